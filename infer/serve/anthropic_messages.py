"""Anthropic's Messages API, ``POST /v1/messages`` and ``/v1/messages/count_tokens``
(Claude Code with ANTHROPIC_BASE_URL, the anthropic SDK), as a translation onto
`api.create_chat_completion`.

The request as llama-server's server_chat_convert_anthropic_to_oai reads it
(tools/server/server-chat.cpp): ``system`` (a string or text blocks), ``messages``
whose content is a string or blocks (``text``, ``thinking``, ``tool_use``,
``tool_result``), ``tools`` with ``input_schema``, ``tool_choice`` (auto, any,
tool, none), ``max_tokens`` (required), ``stop_sequences``, ``temperature``,
``top_p``, ``top_k``, ``stream``, ``thinking`` (enabled: the template's
``enable_thinking`` true; disabled: false).  ``cache_control`` marks are accepted
and change nothing (the slots reuse any cached prefix anyway).

The reply: ``content`` blocks ``thinking`` (empty ``signature``: nothing to sign
locally), ``text`` and ``tool_use`` (``input`` an object), ``stop_reason``
end_turn, max_tokens, stop_sequence (with ``stop_sequence``) or tool_use, and
``usage`` in Anthropic's terms (``input_tokens`` not read from the cache,
``cache_read_input_tokens`` read from it).  Streamed, Anthropic's named events:
message_start, content_block_start / _delta (text_delta, thinking_delta and
signature_delta, input_json_delta) / _stop, message_delta (stop_reason and the
final usage: message_start's ``input_tokens`` is 0, the prompt not being read yet)
and message_stop.  Errors have Anthropic's shape, ``{"type": "error", "error":
{"type", "message"}}``.
"""
from __future__ import annotations

import json
import re
import uuid
from contextlib import closing
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import api
from ..api import InvalidRequestError, UnsupportedOptionError
from .app import Dialect
from .translated import (chat_result, check_fields, check_object, check_string, function_tools, named_event,
                         prompt_tokens, serve_count, serve_translated)

if TYPE_CHECKING:
    from .app import _Server

__all__ = ["ANTHROPIC", "create_message", "routes", "translate"]

#: Anthropic's error types by HTTP status (its API's "Errors" page)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}

_FIELDS = {"messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "top_k", "stream", "tools",
           "tool_choice", "thinking", "metadata", "service_tier", "chat_template_kwargs", "cache_control"}
#: count_tokens takes the request without its sampling fields
_COUNT_FIELDS = {"messages", "system", "tools", "tool_choice", "thinking", "chat_template_kwargs", "cache_control"}
#: Anthropic's rule for a tool's name
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def error_body(status: int, openai_body: Mapping[str, Any]) -> dict[str, Any]:
    """Anthropic's error body for an OpenAI-shaped one (`app._classify`'s)."""
    error = openai_body.get("error", {})
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": str(error.get("message", ""))}}


# ---- the request -------------------------------------------------------------------------------
def _block_text(block: Mapping[str, Any], where: str) -> str:
    return check_string(f"{where}.text", block.get("text"))


#: the per-request stamp in Claude Code's first system line, "x-anthropic-billing-header:
#: cc_version=...; cch=a5145;": made constant, as llama-server does, so that the prompt's
#: prefix stays cached from one request to the next
_BILLING_STAMP = re.compile(r"^(x-anthropic-billing-header:[^\n]*?cch=)[0-9a-fA-F]{5};")


def _system(system: Any) -> Optional[str]:
    text = _system_text(system)
    return None if text is None else _BILLING_STAMP.sub(r"\g<1>fffff;", text)


def _system_text(system: Any) -> Optional[str]:
    if system is None or isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise InvalidRequestError("system: expected a string or a list of text blocks", "system")
    texts = []
    for i, block in enumerate(system):
        check_object(f"system[{i}]", block)
        if block.get("type") != "text":
            raise InvalidRequestError(f"system[{i}].type: expected 'text', got {block.get('type')!r}", "system")
        texts.append(_block_text(block, f"system[{i}]"))
    return "".join(texts)  # as llama-server joins them


def _tool_result_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequestError(f"{where}.content: expected a string or a list of text blocks", "messages")
    texts = []
    for j, block in enumerate(content):
        check_object(f"{where}.content[{j}]", block)
        if block.get("type") != "text":
            raise UnsupportedOptionError(f"{where}.content[{j}]: only text blocks are supported in a tool "
                                         f"result, got {block.get('type')!r}", "messages")
        texts.append(_block_text(block, f"{where}.content[{j}]"))
    return "".join(texts)


def _messages(messages: Any, system: Optional[str]) -> list[dict[str, Any]]:
    """Chat messages: an assistant turn's blocks make one message (text, reasoning_content,
    tool_calls); a user turn's tool results become tool messages and its text a user
    message, in the order of its blocks."""
    out: list[dict[str, Any]] = [] if system is None else [{"role": "system", "content": system}]
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("messages: expected a non-empty list of messages", "messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        check_object(where, message)
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise InvalidRequestError(f"{where}.role: expected 'user' or 'assistant', got {role!r}", "messages")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise InvalidRequestError(f"{where}.content: expected a string or a list of content blocks",
                                      "messages")
        turn: dict[str, Any] = {"role": "assistant", "content": ""}
        user_text: Optional[dict[str, Any]] = None  # the user message this message's text blocks go to
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            check_object(at, block)
            kind = block.get("type")
            if kind == "text":
                text = _block_text(block, at)
                if role == "assistant":
                    turn["content"] += text
                elif user_text is not None and out[-1] is user_text:
                    user_text["content"] += text
                else:
                    user_text = {"role": "user", "content": text}
                    out.append(user_text)
            elif kind in ("thinking", "redacted_thinking") and role == "assistant":
                if kind == "thinking":  # a redacted block has nothing readable to give back
                    turn["reasoning_content"] = turn.get("reasoning_content", "") + \
                        check_string(f"{at}.thinking", block.get("thinking"))
            elif kind == "tool_use" and role == "assistant":
                arguments = json.dumps(check_object(f"{at}.input", block.get("input")), ensure_ascii=False)
                turn.setdefault("tool_calls", []).append(
                    {"id": check_string(f"{at}.id", block.get("id")), "type": "function",
                     "function": {"name": check_string(f"{at}.name", block.get("name")), "arguments": arguments}})
            elif kind == "tool_result" and role == "user":
                out.append({"role": "tool", "tool_call_id": check_string(f"{at}.tool_use_id", block.get("tool_use_id")),
                            "content": _tool_result_text(block.get("content"), at)})
            elif kind in ("image", "document", "search_result"):
                raise UnsupportedOptionError(f"{at}: {kind} blocks are not supported (text only)", "messages")
            else:
                raise InvalidRequestError(f"{at}.type: {kind!r} is not a content block of a {role} message "
                                          "(text, tool_result; assistant: text, thinking, tool_use)", "messages")
        if role == "assistant":
            out.append(turn)
    return out


def _tool(where: str, tool: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(name, description, input_schema) of a client tool."""
    if tool.get("type") not in (None, "custom"):
        raise UnsupportedOptionError(f"{where}: Anthropic's server tool {tool.get('type')!r} is not "
                                     "supported; give client tools (name, description, input_schema)", "tools")
    check_fields(where, tool, {"type", "name", "description", "input_schema", "cache_control"})
    name = check_string(f"{where}.name", tool.get("name"))
    if not _TOOL_NAME.match(name):
        raise InvalidRequestError(f"{where}.name: {name!r} must match {_TOOL_NAME.pattern}", "tools")
    schema = check_object(f"{where}.input_schema", tool.get("input_schema"))
    if schema.get("type") != "object":
        raise InvalidRequestError(f"{where}.input_schema.type: must be 'object', got {schema.get('type')!r}",
                                  "tools")
    return name, tool.get("description"), schema


def _tool_choice(tool_choice: Any) -> tuple[Any, Optional[bool]]:
    """(the chat completion's tool_choice, its parallel_tool_calls) of Anthropic's."""
    if tool_choice is None:
        return None, None
    check_object("tool_choice", tool_choice)
    check_fields("tool_choice", tool_choice, {"type", "name", "disable_parallel_tool_use"})
    disable = tool_choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise InvalidRequestError("tool_choice.disable_parallel_tool_use: expected a boolean", "tool_choice")
    parallel = None if disable is None else not disable
    kind = tool_choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": check_string("tool_choice.name", tool_choice.get("name"))}}, \
            parallel
    choices = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in choices:
        raise InvalidRequestError(f"tool_choice.type: expected auto, any, tool or none, got {kind!r}", "tool_choice")
    return choices[kind], parallel


def _thinking(thinking: Any) -> Optional[bool]:
    """Whether the template should think (its ``enable_thinking``), None: its default.
    ``budget_tokens`` is checked, not enforced: ``max_tokens`` bounds thinking and answer."""
    if thinking is None:
        return None
    check_object("thinking", thinking)
    kind = thinking.get("type")
    if kind == "disabled":
        check_fields("thinking", thinking, {"type"})
        return False
    if kind in ("enabled", "adaptive"):
        check_fields("thinking", thinking, {"type", "budget_tokens"})
        api._check_optional_int("thinking.budget_tokens", thinking.get("budget_tokens"), 1)
        return True
    raise InvalidRequestError(f"thinking.type: expected enabled, disabled or adaptive, got {kind!r}", "thinking")


def _chat_common(body: dict[str, Any]) -> dict[str, Any]:
    """The chat keywords count_tokens and messages share (the prompt's)."""
    chat: dict[str, Any] = {"messages": _messages(body.get("messages"), _system(body.get("system")))}
    tools = function_tools(body.get("tools"), _tool)
    if tools is not None:
        chat["tools"] = tools
    tool_choice, parallel = _tool_choice(body.get("tool_choice"))
    if tool_choice is not None:
        chat["tool_choice"] = tool_choice
    if parallel is not None:
        chat["parallel_tool_calls"] = parallel
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        chat["chat_template_kwargs"] = dict(check_object("chat_template_kwargs", kwargs))
    think = _thinking(body.get("thinking"))
    if think is not None:
        chat["chat_template_kwargs"] = dict(chat.get("chat_template_kwargs") or {}, enable_thinking=think)
    return chat


def translate(body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(the chat completion keywords of a Messages request, the call that runs them)."""
    check_fields("", body, _FIELDS)
    if "messages" not in body:
        raise InvalidRequestError("messages: Field required", "messages")
    if "max_tokens" not in body:
        raise InvalidRequestError("max_tokens: Field required", "max_tokens")
    chat = _chat_common(body)
    chat["max_tokens"] = api._check_optional_int("max_tokens", body["max_tokens"], 1)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise InvalidRequestError("stop_sequences: expected a list of non-empty strings", "stop_sequences")
        chat["stop"] = stops
    for name in ("temperature", "top_p", "top_k", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    metadata = body.get("metadata")
    if metadata is not None:
        check_fields("metadata", check_object("metadata", metadata), {"user_id"})
        if metadata.get("user_id") is not None:
            chat["user"] = check_string("metadata.user_id", metadata["user_id"])
    if body.get("service_tier") is not None:
        chat["service_tier"] = check_string("service_tier", body["service_tier"])
    return chat, create_message


# ---- the response ------------------------------------------------------------------------------
def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
    return {"input_tokens": usage["prompt_tokens"] - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": usage["completion_tokens"]}


def _stop_reason(finish: Optional[str], stop_string: Optional[str]) -> str:
    if finish == "tool_calls":
        return "tool_use"
    if finish == "length":
        return "max_tokens"
    return "stop_sequence" if stop_string else "end_turn"


def _tool_use(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call["function"]
    return {"type": "tool_use", "id": call["id"], "name": function["name"], "input": json.loads(function["arguments"])}


def create_message(model: Any, *, context: Any = None, model_name: str = "", **chat: Any) -> Any:
    """Anthropic's message (or, with ``stream``, its events) of the chat completion ``chat``."""
    result = chat_result(model, context, model_name, chat)
    message_id = f"msg_{uuid.uuid4().hex}"
    if chat.get("stream"):
        return _events(result, message_id, model_name)
    choice = result["choices"][0]
    message = choice["message"]
    content: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    content += [_tool_use(call) for call in message.get("tool_calls") or ()]
    stop_string = choice.get("stop_reason")
    return {"id": message_id, "type": "message", "role": "assistant", "model": result["model"], "content": content,
            "stop_reason": _stop_reason(choice["finish_reason"], stop_string), "stop_sequence": stop_string,
            "usage": _usage(result["usage"])}


def _events(chunks: Any, message_id: str, model_name: str) -> Iterator[dict[str, Any]]:
    """Anthropic's stream events of a chat completion's chunks: a content block opens
    with its first delta and closes when another kind of content begins."""
    index = -1
    open_kind: Optional[str] = None
    finish: Optional[str] = None
    stop_string: Optional[str] = None

    def close() -> Iterator[dict[str, Any]]:
        nonlocal open_kind
        if open_kind == "thinking":  # Anthropic's clients expect a signature before the block ends
            yield {"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": ""}}
        if open_kind is not None:
            yield {"type": "content_block_stop", "index": index}
        open_kind = None

    with closing(chunks):  # a stream dropped midway closes the chat stream, which ends its turn
        for n, chunk in enumerate(chunks):
            if n == 0:
                yield {"type": "message_start", "message": {
                    "id": message_id, "type": "message", "role": "assistant", "model": model_name, "content": [],
                    "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                              "output_tokens": 0}}}
            if not chunk["choices"]:  # the usage chunk: the last
                yield from close()
                yield {"type": "message_delta", "delta": {"stop_reason": _stop_reason(finish, stop_string),
                                                          "stop_sequence": stop_string},
                       "usage": _usage(chunk["usage"])}
                yield {"type": "message_stop"}
                continue
            choice = chunk["choices"][0]
            delta = choice["delta"]
            finish = choice["finish_reason"] or finish
            stop_string = choice.get("stop_reason") or stop_string
            for kind, key, delta_kind in (("thinking", "reasoning_content", "thinking_delta"),
                                          ("text", "content", "text_delta")):
                piece = delta.get(key)
                if not piece:
                    continue
                if open_kind != kind:
                    yield from close()
                    index += 1
                    open_kind = kind
                    block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
                        {"type": "text", "text": ""}
                    yield {"type": "content_block_start", "index": index, "content_block": block}
                yield {"type": "content_block_delta", "index": index,
                       "delta": {"type": delta_kind, "thinking" if kind == "thinking" else "text": piece}}
            for call in delta.get("tool_calls") or ():
                yield from close()
                index += 1
                yield {"type": "content_block_start", "index": index,
                       "content_block": dict(_tool_use(call), input={})}
                yield {"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": call["function"]["arguments"]}}
                yield {"type": "content_block_stop", "index": index}


# ---- count_tokens ------------------------------------------------------------------------------
def count_tokens(model: Any, body: dict[str, Any], template_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"input_tokens": n}``: the tokens of the prompt the request renders."""
    body.pop("model", None)
    check_fields("", body, _COUNT_FIELDS)
    return {"input_tokens": prompt_tokens(model, _chat_common(body), template_kwargs)}


# ---- the routes --------------------------------------------------------------------------------
def _event(value: Mapping[str, Any]) -> bytes:
    """An event of the stream; an error body (mid-stream) is Anthropic's ``error`` event."""
    return named_event(str(value["type"]), value)


def _metered_usage(result: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The usage of a message, or of the stream's message_delta, as /metrics counts it."""
    if result.get("type") not in ("message", "message_delta"):
        return None
    usage = result["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": usage["output_tokens"],
            "total_tokens": prompt + usage["output_tokens"]}


#: Anthropic's dialect: its error shape, its named events, no ``[DONE]``
ANTHROPIC = Dialect(error_body=error_body, stream_end=None, usage=_metered_usage, event=_event)


def routes(server: "_Server") -> list[Route]:
    async def messages(request: Request) -> Response:
        # max_tokens is required and Anthropic's clients send large ones (Claude Code:
        # 32000): beyond a slot's context it stops the reply where the context is full
        return await serve_translated(server, request, "/v1/messages", ANTHROPIC, translate, limit_is_a_cap=True)

    async def tokens(request: Request) -> Response:
        return await serve_count(server, request, "/v1/messages/count_tokens", ANTHROPIC, count_tokens)

    routes = []
    for prefix in ("/v1", ""):  # as every endpoint here answers both
        routes += [Route(f"{prefix}/messages", messages, methods=["POST"]),
                   Route(f"{prefix}/messages/count_tokens", tokens, methods=["POST"])]
    return routes
