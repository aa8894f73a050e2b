"""What the endpoints translated onto chat completions share (`responses`, OpenAI's
Responses API, and `anthropic_messages`, Anthropic's Messages API): reading a request
into `api.create_chat_completion`'s keywords, running it on a scheduler slot through
`_Server.run_completion` (the same queue, batching, prefix reuse, cancellation and
metrics as ``/v1/chat/completions``), and their named server-sent events.
"""
from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import api
from ..api import InvalidRequestError
from .app import Dialect, _classify

if TYPE_CHECKING:
    from .app import _Server

__all__ = ["chat_result", "function_tools", "named_event", "prompt_tokens", "serve_count", "serve_translated"]


def named_event(name: str, data: Mapping[str, Any]) -> bytes:
    """One server-sent event with an ``event:`` line (Anthropic's SDK reads only named
    events; OpenAI's Responses events are named too)."""
    return b"event: " + name.encode() + b"\r\ndata: " + json.dumps(data, ensure_ascii=False).encode() + b"\r\n\r\n"


def _param(name: str) -> str:
    """The request field a path in the body is in ("tools[0].name": "tools")."""
    return name.split(".")[0].split("[")[0]


def check_object(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{name}: expected an object, got {type(value).__name__}", _param(name))
    return value


def check_string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name}: expected a string, got {type(value).__name__}", _param(name))
    return value


def check_fields(name: str, value: Mapping[str, Any], allowed: set[str]) -> None:
    """A 400 naming the first field of ``value`` not in ``allowed``."""
    unknown = sorted(set(value) - allowed)
    if unknown:
        where = f"{name}." if name else ""
        raise InvalidRequestError(f"unrecognized request argument supplied: {where}{unknown[0]}",
                                  _param(name or unknown[0]))


def function_tools(tools: Any, read: Callable[[str, dict[str, Any]], tuple[Any, Any, Any]]
                   ) -> Optional[list[dict[str, Any]]]:
    """Chat completion tools of a request's ``tools``: ``read(where, tool)`` checks one
    and gives its (name, description, parameters).  Their keys are in the order OpenAI's
    are written (name, description, parameters): a template shows the tools as JSON."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidRequestError("tools: expected a list of tool objects", "tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        name, description, parameters = read(where, check_object(where, tool))
        function: dict[str, Any] = {"name": check_string(f"{where}.name", name)}
        if description is not None:
            function["description"] = check_string(f"{where}.description", description)
        if parameters is not None:
            function["parameters"] = parameters
        out.append({"type": "function", "function": function})
    return out


def chat_result(model: Any, context: Any, model_name: str, chat: dict[str, Any]) -> Any:
    """`api.create_chat_completion` of the translated request ``chat``: its result, or
    with ``stream`` its chunks, the usage chunk always last."""
    if chat.get("stream"):
        chat = dict(chat, stream_options={"include_usage": True})
    return api.create_chat_completion(model, context=context, model_name=model_name, **chat)


#: a request body -> (chat completion keywords, the call that runs them and shapes the result)
Translate = Callable[[dict[str, Any]], tuple[dict[str, Any], Callable[..., Any]]]


async def serve_translated(server: "_Server", request: Request, endpoint: str, dialect: Dialect,
                           translate: Translate, limit_is_a_cap: bool = False) -> Response:
    """Read the request, ``translate`` it into (chat completion keywords, the call that
    runs them and shapes the result: ``call(model, context=, model_name=, **keywords)``),
    and run that call on a scheduler slot.  ``limit_is_a_cap``: a ``max_tokens`` beyond
    the slot's context means "until the context is full" rather than a 400."""
    body = await server.read_json(request, dialect)
    if isinstance(body, Response):
        server.metrics.count_request(endpoint, body.status_code)
        return body
    try:
        model_field = body.pop("model", None)
        if model_field is not None:
            check_string("model", model_field)
        chat, call = translate(body)
    except (InvalidRequestError, TypeError, ValueError) as exc:
        status, error = _classify(exc)
        server.metrics.count_request(endpoint, status)
        return JSONResponse(dialect.error_body(status, error), status_code=status)
    if server.chat_template_kwargs:  # the command line's, under the request's own (llama-server's merge)
        chat["chat_template_kwargs"] = {**server.chat_template_kwargs, **(chat.get("chat_template_kwargs") or {})}
    server.add_sampling_defaults(chat, api.create_chat_completion)
    limit = chat.get("max_tokens")
    if limit_is_a_cap and isinstance(limit, int) and limit > server.scheduler.n_ctx:
        chat["max_tokens"] = None
    return await server.run_completion(request, endpoint, call, chat, cache_prompt=True,
                                       reply_limit=chat.get("max_tokens"), dialect=dialect)


def prompt_tokens(model: Any, chat: Mapping[str, Any], template_kwargs: Mapping[str, Any]) -> int:
    """The tokens of the prompt the chat completion keywords ``chat`` render, as the chat
    completion's ``prompt_tokens`` counts them (``template_kwargs``: the server's)."""
    from ..chat.session import chat_of

    messages = api._check_messages(chat["messages"])
    tools = api._check_tools(chat.get("tools"), chat.get("tool_choice"))
    kwargs = {**template_kwargs, **(chat.get("chat_template_kwargs") or {})}
    kwargs = api._with_reasoning_effort(kwargs, chat.get("reasoning_effort")) or {}
    text = chat_of(model).render(messages, True, tools, **kwargs)
    tok = model.tokenizer
    ids = list(tok.encode(text, add_special=False, parse_special=True))
    # the BOS the tokenizer adds, when the template does not write it (as ChatSession encodes)
    bos = [t for t in tok.encode("", add_special=True) if t == getattr(tok.vocab, "bos_token_id", None)][:1]
    return len(ids) + (1 if bos and ids[:1] != bos else 0)


async def serve_count(server: "_Server", request: Request, endpoint: str, dialect: Dialect,
                      count: Callable[[Any, dict[str, Any], Mapping[str, Any]], dict[str, Any]]) -> Response:
    """A token-counting endpoint: ``count(model, body, the server's template variables)``
    on a thread (a long conversation to tokenize must not hold up the streams)."""
    body = await server.read_json(request, dialect)
    if isinstance(body, Response):
        server.metrics.count_request(endpoint, body.status_code)
        return body
    try:
        result = await asyncio.to_thread(count, server.model, body, server.chat_template_kwargs)
    except (InvalidRequestError, TypeError, ValueError) as exc:
        status, error = _classify(exc)
        server.metrics.count_request(endpoint, status)
        return JSONResponse(dialect.error_body(status, error), status_code=status)
    server.metrics.count_request(endpoint, 200)
    return JSONResponse(result)
