"""OpenAI's Responses API, ``POST /v1/responses`` (Codex CLI, the openai Agents SDK,
``client.responses.create``), as a translation onto `api.create_chat_completion`.

The request's ``input`` (a text, or a list of items: messages with ``input_text`` /
``output_text`` parts, ``function_call``, ``function_call_output`` and ``reasoning``
items) and ``instructions`` become chat messages, as llama-server's
server_chat_convert_responses_to_chatcmpl reads them (tools/server/server-chat.cpp):
``tools`` (flat function tools), ``tool_choice``, ``max_output_tokens``,
``reasoning.effort`` (llama-server's ``reasoning_effort``) and ``text.format``
(``json_schema`` / ``json_object``: the chat completion's ``response_format``).
The reply comes back as ``output`` items: a ``reasoning`` item with the thinking as
``reasoning_text`` content (no summary, nothing encrypted), a ``message`` with one
``output_text`` part, and a ``function_call`` per tool call; ``status`` is
"incomplete" when ``max_output_tokens`` cut it.  Streamed, the events are OpenAI's:
``response.created``, ``response.in_progress``, per item ``response.output_item.added``
(``response.content_part.added``), its deltas, the matching ``...done`` events, and
``response.completed`` (``response.incomplete``), each with its ``sequence_number``.

Nothing is stored: ``previous_response_id`` and ``store: true`` are refused (400),
as are tools other than functions and input other than text.
"""
from __future__ import annotations

import functools
import time
import uuid
from contextlib import closing
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import api
from ..api import InvalidRequestError, UnsupportedOptionError
from .app import OPENAI, Dialect
from .translated import (chat_result, check_fields, check_object, check_string, function_tools, named_event,
                         prompt_tokens, serve_count, serve_translated)

if TYPE_CHECKING:
    from .app import _Server

__all__ = ["RESPONSES", "create_response", "routes", "translate"]

#: the request fields read (beside ``model``); the rest are a 400
_FIELDS = {"input", "instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p", "stream",
           "reasoning", "text", "parallel_tool_calls", "metadata", "user", "store", "previous_response_id",
           "include", "truncation", "service_tier", "prompt_cache_key", "safety_identifier", "background",
           "top_k", "min_p", "seed", "chat_template_kwargs"}
#: the request fields passed to the chat completion under the same name
_SAME = ("temperature", "top_p", "top_k", "min_p", "seed", "parallel_tool_calls", "metadata", "user",
         "service_tier", "prompt_cache_key", "safety_identifier", "chat_template_kwargs")


def _text_of(parts: Any, kinds: tuple[str, ...], where: str) -> str:
    """The text of a content list (or a plain string) whose parts are of ``kinds``."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise InvalidRequestError(f"{where}: expected a string or a list of content parts", "input")
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise InvalidRequestError(f"{where}[{j}]: expected an object", "input")
        kind = part.get("type")
        if kind not in kinds:
            if kind in ("input_image", "input_file", "input_audio"):
                raise UnsupportedOptionError(f"{where}[{j}]: {kind} is not supported (text only)", "input")
            raise InvalidRequestError(f"{where}[{j}].type: expected one of {', '.join(kinds)}, got {kind!r}",
                                      "input")
        texts.append(check_string(f"{where}[{j}].text", part.get("text")) if kind != "refusal"
                     else check_string(f"{where}[{j}].refusal", part.get("refusal")))
    return "".join(texts)


def _messages(input_value: Any, instructions: Any) -> list[dict[str, Any]]:
    """The chat messages of ``instructions`` and ``input``; consecutive assistant items
    (text, reasoning, calls) make one assistant message, as llama-server merges them."""
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        messages.append({"role": "system", "content": check_string("instructions", instructions)})
    if isinstance(input_value, str):
        return messages + [{"role": "user", "content": input_value}]
    if not isinstance(input_value, list) or not input_value:
        raise InvalidRequestError("input: expected a string or a non-empty list of items", "input")

    def assistant() -> dict[str, Any]:
        if not messages or messages[-1]["role"] != "assistant":
            messages.append({"role": "assistant", "content": ""})
        return messages[-1]

    for i, item in enumerate(input_value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequestError(f"{where}: expected an object, got {type(item).__name__}", "input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role in ("user", "system", "developer"):
                text = _text_of(item.get("content"), ("input_text",), f"{where}.content")
                messages.append({"role": "system" if role == "developer" else role, "content": text})
            elif role == "assistant":
                target = assistant()
                target["content"] += _text_of(item.get("content"), ("output_text", "input_text", "refusal"),
                                              f"{where}.content")
            else:
                raise InvalidRequestError(f"{where}.role: expected user, system, developer or assistant, "
                                          f"got {role!r}", "input")
        elif kind == "function_call":
            call = {"id": check_string(f"{where}.call_id", item.get("call_id")), "type": "function",
                    "function": {"name": check_string(f"{where}.name", item.get("name")),
                                 "arguments": check_string(f"{where}.arguments", item.get("arguments"))}}
            assistant().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": check_string(f"{where}.call_id", item.get("call_id")),
                             "content": _text_of(item.get("output"), ("input_text",), f"{where}.output")})
        elif kind == "reasoning":
            # the thinking of a turn given back: its text, or else its summary's
            content = item.get("content") or []
            text = _text_of(content, ("reasoning_text",), f"{where}.content") if content else \
                _text_of(item.get("summary") or [], ("summary_text",), f"{where}.summary")
            target = assistant()
            target["reasoning_content"] = target.get("reasoning_content", "") + text
        else:
            raise InvalidRequestError(f"{where}.type: expected message, function_call, function_call_output "
                                      f"or reasoning, got {kind!r}", "input")
    return messages


def _tool(where: str, tool: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(name, description, parameters) of a function tool in Responses' flat shape."""
    if tool.get("type") != "function":
        raise UnsupportedOptionError(f"{where}: only function tools are supported, got type {tool.get('type')!r}",
                                     "tools")
    check_fields(where, tool, {"type", "name", "description", "parameters", "strict"})
    parameters = tool.get("parameters")
    return tool.get("name"), tool.get("description"), \
        None if parameters is None else check_object(f"{where}.parameters", parameters)


def _tool_choice(tool_choice: Any) -> Any:
    if tool_choice is None or isinstance(tool_choice, str):
        return tool_choice
    check_object("tool_choice", tool_choice)
    if tool_choice.get("type") != "function" or not isinstance(tool_choice.get("name"), str):
        raise InvalidRequestError("tool_choice: expected 'auto', 'none', 'required' or "
                                  "{'type': 'function', 'name': ...}", "tool_choice")
    return {"type": "function", "function": {"name": tool_choice["name"]}}


def _response_format(text: Any) -> Optional[dict[str, Any]]:
    """``text.format`` as the chat completion's ``response_format``."""
    if text is None:
        return None
    check_object("text", text)
    check_fields("text", text, {"format", "verbosity"})
    fmt = text.get("format")
    if fmt is None:
        return None
    check_object("text.format", fmt)
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        check_fields("text.format", fmt, {"type", "name", "schema", "strict", "description"})
        schema = {"name": check_string("text.format.name", fmt.get("name")),
                  "schema": check_object("text.format.schema", fmt.get("schema"))}
        if fmt.get("strict") is not None:
            schema["strict"] = fmt["strict"]
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidRequestError(f"text.format.type: expected text, json_object or json_schema, got {kind!r}", "text")


def translate(body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(the chat completion keywords of a Responses request, the call that runs them)."""
    check_fields("", body, _FIELDS)
    if "input" not in body:
        raise InvalidRequestError("input: is required", "input")
    if body.get("previous_response_id") is not None:
        raise UnsupportedOptionError("previous_response_id: responses are not stored on this server; send the "
                                     "whole conversation as input", "previous_response_id")
    if body.get("store") not in (None, False):
        raise UnsupportedOptionError("store: responses are not stored on this server; send store: false",
                                     "store")
    if body.get("background") not in (None, False):
        raise UnsupportedOptionError("background: not supported; stream the response instead", "background")
    if body.get("truncation") not in (None, "disabled"):
        raise UnsupportedOptionError("truncation: only 'disabled' is supported (a conversation longer than the "
                                     "context is a 400)", "truncation")
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
            raise InvalidRequestError("include: expected a list of strings", "include")
        # the reasoning comes back as plain text (reasoning_text content) instead of encrypted
        other = [x for x in include if x != "reasoning.encrypted_content"]
        if other:
            raise UnsupportedOptionError(f"include: {other[0]!r} is not supported", "include")
    chat: dict[str, Any] = {"messages": _messages(body["input"], body.get("instructions"))}
    tools = function_tools(body.get("tools"), _tool)
    if tools is not None:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = api._check_optional_int("max_output_tokens", body["max_output_tokens"], 1)
    reasoning = body.get("reasoning")
    if reasoning is not None:
        check_object("reasoning", reasoning)
        check_fields("reasoning", reasoning, {"effort", "summary", "generate_summary"})
        if reasoning.get("effort") is not None:
            chat["reasoning_effort"] = reasoning["effort"]
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    if body.get("stream") is not None:
        chat["stream"] = body["stream"]
    for name in _SAME:
        if body.get(name) is not None:
            chat[name] = body[name]
    echo = {"instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto",
            "text": body.get("text") or {"format": {"type": "text"}},
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"), "metadata": body.get("metadata") or {},
            "store": False, "previous_response_id": None, "truncation": "disabled", "background": False}
    return chat, functools.partial(create_response, echo)


# ---- the response ------------------------------------------------------------------------------
def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"]}


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}] if text else [], "encrypted_content": None}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: Optional[str], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [] if text is None else [_text_part(text)]}


def _call_item(call: Mapping[str, Any], status: str, arguments: Optional[str] = None) -> dict[str, Any]:
    function = call["function"]
    return {"id": "fc_" + call["id"].removeprefix("call_"), "type": "function_call", "status": status,
            "call_id": call["id"], "name": function["name"],
            "arguments": function["arguments"] if arguments is None else arguments}


def _response(echo: dict[str, Any], response_id: str, created: int, model_name: str, output: list[Any],
              status: str, usage: Optional[dict[str, Any]]) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": created, "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None, "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": model_name, "output": output, "usage": usage, **echo}


def create_response(echo: dict[str, Any], model: Any, *, context: Any = None, model_name: str = "",
                    **chat: Any) -> Any:
    """The Responses API's response (or, with ``stream``, its events) of the chat
    completion ``chat``; ``echo`` holds the request fields a response repeats."""
    result = chat_result(model, context, model_name, chat)
    response_id, created = _new_id("resp"), int(time.time())
    if not chat.get("stream"):
        choice = result["choices"][0]
        message = choice["message"]
        output = []
        if message.get("reasoning_content"):
            output.append(_reasoning_item(_new_id("rs"), message["reasoning_content"], "completed"))
        status = "incomplete" if choice["finish_reason"] == "length" else "completed"
        if message.get("content"):
            output.append(_message_item(_new_id("msg"), message["content"], status))
        output += [_call_item(call, "completed") for call in message.get("tool_calls") or ()]
        return _response(echo, response_id, created, result["model"], output, status, _usage(result["usage"]))
    return _events(result, echo, response_id, created, model_name)


def _events(chunks: Any, echo: dict[str, Any], response_id: str, created: int,
            model_name: str) -> Iterator[dict[str, Any]]:
    """The Responses stream's events of a chat completion's chunks: an item opens
    when its first delta comes and closes when another kind of output begins."""
    sequence = 0
    output: list[dict[str, Any]] = []
    # the open item: its kind ("reasoning" or "message"), id and text so far
    open_kind: Optional[str] = None
    open_id = ""
    texts: list[str] = []
    finish: Optional[str] = None

    def event(kind: str, **data: Any) -> dict[str, Any]:
        nonlocal sequence
        sequence += 1
        return {"type": kind, "sequence_number": sequence - 1, **data}

    def close(status: str = "completed") -> Iterator[dict[str, Any]]:
        nonlocal open_kind
        if open_kind is None:
            return
        text, index = "".join(texts), len(output)
        if open_kind == "reasoning":
            yield event("response.reasoning_text.done", item_id=open_id, output_index=index, content_index=0,
                        text=text)
            item = _reasoning_item(open_id, text, status)
        else:
            yield event("response.output_text.done", item_id=open_id, output_index=index, content_index=0,
                        text=text, logprobs=[])
            yield event("response.content_part.done", item_id=open_id, output_index=index, content_index=0,
                        part=_text_part(text))
            item = _message_item(open_id, text, status)
        yield event("response.output_item.done", output_index=index, item=item)
        output.append(item)
        open_kind = None

    def start(kind: str) -> Iterator[dict[str, Any]]:
        nonlocal open_kind, open_id, texts
        yield from close()
        open_kind, texts = kind, []
        index = len(output)
        if kind == "reasoning":
            open_id = _new_id("rs")
            yield event("response.output_item.added", output_index=index,
                        item=_reasoning_item(open_id, "", "in_progress"))
        else:
            open_id = _new_id("msg")
            yield event("response.output_item.added", output_index=index,
                        item=_message_item(open_id, None, "in_progress"))
            yield event("response.content_part.added", item_id=open_id, output_index=index, content_index=0,
                        part=_text_part(""))

    with closing(chunks):  # a stream dropped midway closes the chat stream, which ends its turn
        for n, chunk in enumerate(chunks):
            if n == 0:
                head = _response(echo, response_id, created, model_name, [], "in_progress", None)
                yield event("response.created", response=head)
                yield event("response.in_progress", response=head)
            if not chunk["choices"]:  # the usage chunk: the last
                status = "incomplete" if finish == "length" else "completed"
                yield from close(status)  # the item max_output_tokens cut
                final = _response(echo, response_id, created, model_name, output, status, _usage(chunk["usage"]))
                yield event(f"response.{status}", response=final)
                continue
            choice = chunk["choices"][0]
            delta = choice["delta"]
            finish = choice["finish_reason"] or finish
            for kind, key in (("reasoning", "reasoning_content"), ("message", "content")):
                piece = delta.get(key)
                if not piece:
                    continue
                if open_kind != kind:
                    yield from start(kind)
                texts.append(piece)
                index = len(output)
                if kind == "reasoning":
                    yield event("response.reasoning_text.delta", item_id=open_id, output_index=index,
                                content_index=0, delta=piece)
                else:
                    yield event("response.output_text.delta", item_id=open_id, output_index=index,
                                content_index=0, delta=piece, logprobs=[])
            for call in delta.get("tool_calls") or ():
                yield from close()
                index = len(output)
                item = _call_item(call, "completed")
                yield event("response.output_item.added", output_index=index,
                            item=_call_item(call, "in_progress", ""))
                yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                            delta=item["arguments"])
                yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                            name=item["name"], arguments=item["arguments"])
                yield event("response.output_item.done", output_index=index, item=item)
                output.append(item)


# ---- the route ---------------------------------------------------------------------------------
def _event(value: Mapping[str, Any]) -> bytes:
    """An event of the stream, or (mid-stream) an error body as OpenAI's ``error`` event;
    it keeps the ``error`` object, which the openai client raises as an APIError."""
    if "type" not in value and isinstance(value.get("error"), Mapping):
        error = value["error"]
        value = {"type": "error", "code": error.get("code"), "message": error.get("message"),
                 "param": error.get("param"), "error": dict(error)}
    return named_event(str(value["type"]), value)


def _metered_usage(result: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The usage of a response, or of the stream's last event, as /metrics counts it."""
    response = result if result.get("object") == "response" else result.get("response")
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):  # an event before the last
        return None
    return {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["total_tokens"]}


#: Responses' dialect: OpenAI's error shape, named events and no ``[DONE]``
RESPONSES = Dialect(error_body=OPENAI.error_body, stream_end=None, usage=_metered_usage, event=_event)


def count_input_tokens(model: Any, body: dict[str, Any], template_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /v1/responses/input_tokens``: the tokens of the prompt the request renders."""
    body.pop("model", None)
    return {"object": "response.input_tokens", "input_tokens": prompt_tokens(model, translate(body)[0],
                                                                             template_kwargs)}


def routes(server: "_Server") -> list[Route]:
    async def responses(request: Request) -> Response:
        return await serve_translated(server, request, "/v1/responses", RESPONSES, translate)

    async def input_tokens(request: Request) -> Response:
        return await serve_count(server, request, "/v1/responses/input_tokens", RESPONSES, count_input_tokens)

    routes = []
    for prefix in ("/v1", ""):  # llama-server answers both
        routes += [Route(f"{prefix}/responses", responses, methods=["POST"]),
                   Route(f"{prefix}/responses/input_tokens", input_tokens, methods=["POST"])]
    return routes
