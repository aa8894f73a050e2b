"""What a turn produces: the `Reply`, its `ToolCall`s and `ToolCallError`s, the
`TextPiece` and `ThinkingText` pieces a stream yields, and `parse_tool_call`, which reads a call
back from the JSON the model wrote."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

#: an OpenAI-shaped chat message, tool or tool call
Message = dict[str, Any]


@dataclass
class ToolCall:
    """One tool call the model made: ``name`` and ``arguments`` (a dict)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_openai(self) -> Message:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


@dataclass
class ToolCallError:
    """A tool call the model botched: the text it wrote and what is wrong with it."""

    raw: str
    message: str

    def __str__(self) -> str:
        return self.message


class TextPiece(str):
    """A piece of a streamed reply (`ChatSession.stream`).  With ``logprobs=k``,
    ``logprobs`` holds the OpenAI ``logprobs.content`` entries of the tokens generated
    since the previous piece (a token whose text is still held back, such as the start
    of a possible stop string, is reported with the piece that shows it, or with the
    `Reply`); otherwise None."""

    logprobs: Optional[list[dict[str, Any]]] = None


class ThinkingText(TextPiece):
    """A piece of a thinking block (`ChatSession.stream` with ``show_thinking=True``)."""


@dataclass
class Reply:
    """A finished assistant turn."""

    text: str
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    #: "stop" (end of turn or stop string), "length" (max_tokens or a full context),
    #: "tool_calls", or "interrupted"
    finish_reason: str = "stop"
    #: tokens of the whole rendered prompt, of those found in the KV cache, and generated
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    #: with ``logprobs=k``: OpenAI ``logprobs.content`` entries, one per generated token
    #: (the end-of-turn token excluded), else None
    logprobs: Optional[list[dict[str, Any]]] = None

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def message(self) -> Message:
        """The OpenAI-shaped assistant message this reply adds to history."""
        m: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            m["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return m

    def __str__(self) -> str:
        return self.text


def parse_tool_call(raw: str, call_id: str = "", tool_names: Optional[Iterable[str]] = None
                    ) -> Union[ToolCall, ToolCallError]:
    """Parse ``{"name": ..., "arguments": {...}}`` (``parameters`` is accepted for
    ``arguments``; arguments given as a JSON string are decoded).  Never raises:
    a malformed call comes back as a `ToolCallError` saying what is wrong."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCallError(raw, f"tool call is not valid JSON: {exc.msg} at character {exc.pos}")
    if isinstance(obj, dict) and "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # {"type": "function", "function": {...}}, the OpenAI shape
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCallError(raw, "tool call must be a JSON object with a string \"name\"")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCallError(raw, f"tool call arguments are not valid JSON: {exc.msg}")
    if not isinstance(args, dict):
        return ToolCallError(raw, f"tool call arguments must be a JSON object, got {type(args).__name__}")
    names = set(tool_names) if tool_names is not None else None
    if names is not None and obj["name"] not in names:
        return ToolCallError(raw, f"tool call names an unknown tool {obj['name']!r} "
                                  f"(known: {', '.join(sorted(names)) or 'none'})")
    return ToolCall(obj["name"], args, call_id)

