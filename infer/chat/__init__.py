"""Chat: the model's own template, and a multi-turn session over a Context.

* `sandbox`: the jinja2 environment templates render in, and `ChatTemplateError`;
* `template`: `Chat`, a template and what a session learns from it by probing;
* `replies`: `Reply`, `ToolCall`, `ToolCallError`, `TextPiece`, `ThinkingText`, `parse_tool_call`;
* `reply_parser`: the state machine that splits a streamed reply into answer,
  thinking and tool calls;
* `session`: `ChatSession`, a conversation whose KV cache always holds the
  rendered history.
"""
from __future__ import annotations

from .replies import Message, Reply, TextPiece, ThinkingText, ToolCall, ToolCallError, parse_tool_call
from .sandbox import ChatTemplateError
from .session import DEFAULT_MAX_TOKENS, BaseModelWarning, ChatSession
from .template import FALLBACK_TEMPLATES, Chat

__all__ = [
    "DEFAULT_MAX_TOKENS", "FALLBACK_TEMPLATES", "BaseModelWarning", "Chat", "ChatSession", "ChatTemplateError",
    "Message", "Reply", "TextPiece", "ThinkingText", "ToolCall", "ToolCallError", "parse_tool_call",
]
