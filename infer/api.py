"""The OpenAI-shaped calls: `create_chat_completion` and `create_completion`.

They return plain dicts, or iterators of chunk dicts with ``stream=True``, in the
OpenAI wire shape (``id``, ``object``, ``created``, ``model``, ``choices`` with
``finish_reason``, ``usage``), so that ``json.dumps`` of one is a response body
the official clients accept.  Chat runs on `ChatSession` and completions on
`generate`: the same templates, stop rules, tool-call parsing and KV reuse.
Thinking comes back as ``reasoning_content`` and tool calls as ``tool_calls``,
as llama-server sends them; a chat choice ended by one of ``stop`` names it in
``stop_reason``, as vLLM does.

Every option is checked before anything runs.  A wrong type or value raises
`InvalidRequestError` naming the field; an option this runtime cannot honour
raises `UnsupportedOptionError` rather than being ignored.  ``infer serve`` turns
both into HTTP 400 in OpenAI's error shape.

Without ``context=`` the calls reuse one context per model (so a chat's next turn
prefills only its new tokens), or a fresh one while another thread holds it.
"""
from __future__ import annotations

import functools
import json
import threading
import time
import uuid
import weakref
from contextlib import closing, contextmanager
from typing import Any, Generator, Iterator, Mapping, Optional, Sequence, Union

from .runtime import LONG_TEXT, ContextOverflowError, run_apart

__all__ = ["InvalidRequestError", "UnsupportedOptionError", "create_chat_completion", "create_completion"]

Chunk = dict[str, Any]


class InvalidRequestError(ValueError):
    """A request option has the wrong type or value; ``param`` names it."""

    def __init__(self, message: str, param: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class UnsupportedOptionError(InvalidRequestError):
    """A valid OpenAI option this runtime cannot honour (yet)."""

    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message, param, "unsupported_option")


# ---- option checks ---------------------------------------------------------------------
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_optional_int(name: str, value: Any, lo: int, hi: Optional[int] = None) -> Optional[int]:
    if value is None:
        return None
    if not _is_int(value):
        raise InvalidRequestError(f"{name}: expected an integer, got {type(value).__name__}", name)
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise InvalidRequestError(f"{name}: must be {bound}, got {value}", name)
    return int(value)


def _check_bool(name: str, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{name}: expected a boolean, got {type(value).__name__}", name)
    return value


def _check_labels(**labels: Any) -> None:
    """The string fields that only name a request (``user``, ``prompt_cache_key``, ...)."""
    for name, value in labels.items():
        if value is not None and not isinstance(value, str):
            raise InvalidRequestError(f"{name}: expected a string, got {type(value).__name__}", name)


def _check_stop(stop: Any) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidRequestError("stop: expected a string or a list of strings", "stop")
    return [s for s in stops if s]


def _check_logit_bias(logit_bias: Any, vocab_size: int) -> Optional[dict[int, float]]:
    """OpenAI's ``{"token id": bias}`` (JSON keys are strings) as the Sampler's mapping."""
    if logit_bias is None:
        return None
    if not isinstance(logit_bias, Mapping):
        raise InvalidRequestError("logit_bias: expected an object mapping token ids to numbers", "logit_bias")
    out: dict[int, float] = {}
    for key, bias in logit_bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise InvalidRequestError(f"logit_bias: key {key!r} is not a token id", "logit_bias") from None
        if not 0 <= token < vocab_size:
            raise InvalidRequestError(f"logit_bias: token {token} is outside the vocabulary [0, {vocab_size})",
                                      "logit_bias")
        if not _is_number(bias):
            raise InvalidRequestError(f"logit_bias[{key}]: expected a number, got {type(bias).__name__}",
                                      "logit_bias")
        out[token] = float(bias)
    return out


def _check_structured(response_format: Any, logprobs: Any, top_logprobs: Any) -> Optional[int]:
    """Check ``response_format`` (compiled later, per turn: a bad schema is a 400) and
    turn ``logprobs``/``top_logprobs`` into the alternatives per token (None: off)."""
    if response_format is not None:
        if not isinstance(response_format, Mapping) or not isinstance(response_format.get("type"), str):
            raise InvalidRequestError("response_format: expected an object with a string 'type'",
                                      "response_format")
        try:
            from .structured import grammar_from_response_format

            grammar_from_response_format(response_format)
        except ImportError as exc:
            raise UnsupportedOptionError(str(exc), "response_format") from None
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(str(exc), "response_format") from None
    if logprobs is not None and not isinstance(logprobs, (bool, int)):
        raise InvalidRequestError(f"logprobs: expected a boolean, got {type(logprobs).__name__}", "logprobs")
    top = _check_optional_int("top_logprobs", top_logprobs, 0, 20) if top_logprobs is not None else None
    if top and not logprobs:
        raise InvalidRequestError("top_logprobs: needs logprobs=true", "top_logprobs")
    return (top or 0) if logprobs else None


def _sampler_options(model: Any, temperature: Any, top_p: Any, top_k: Any, min_p: Any, repeat_penalty: Any,
                     presence_penalty: Any, frequency_penalty: Any, logit_bias: Any, seed: Any,
                     repeat_last_n: Any = None) -> dict[str, Any]:
    """The Sampler's keywords for the options given (None: the Sampler's default)."""
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, repeat_penalty=repeat_penalty,
                 presence_penalty=presence_penalty, frequency_penalty=frequency_penalty)
    options: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        if name == "top_k" and not _is_int(value):
            raise InvalidRequestError(f"top_k: expected an integer, got {type(value).__name__}", name)
        if not _is_number(value):
            raise InvalidRequestError(f"{name}: expected a number, got {type(value).__name__}", name)
        options[name] = value
    bias = _check_logit_bias(logit_bias, int(model.engine.vocab_size))
    if bias:
        options["logit_bias"] = bias
    # -1 is llama.cpp's "random" (llama-server's default, `--seed -1` in the CLI)
    options["seed"] = None if seed == -1 and _is_int(seed) else _check_optional_int("seed", seed, 0)
    if repeat_last_n is not None:  # -1: the whole context, resolved by _make_sampler
        options["repeat_last_n"] = _check_optional_int("repeat_last_n", repeat_last_n, -1)
    _make_sampler(options, 0)  # the Sampler's own range checks, now rather than mid-request
    return options


def _make_sampler(options: Mapping[str, Any], choice: int, n_ctx: int = 0) -> Any:
    """The sampler of choice ``choice``: seeded ``seed + choice`` so n choices differ;
    a ``repeat_last_n`` of -1 (llama.cpp's "the whole context") is ``n_ctx``."""
    from .sampler import Sampler

    opts = dict(options)
    if opts.get("repeat_last_n") == -1:
        opts["repeat_last_n"] = n_ctx
    if opts.get("seed") is not None:
        opts["seed"] = int(opts["seed"]) + choice
    try:
        return Sampler(**opts)
    except (TypeError, ValueError) as exc:
        name = str(exc).split(":")[0].split("[")[0].strip()
        raise InvalidRequestError(str(exc), name if name in opts else None) from None


def _check_max_tokens(max_tokens: Any, n_ctx: int) -> Optional[int]:
    value = _check_optional_int("max_tokens", max_tokens, 1)
    if value is not None and value > n_ctx:
        raise InvalidRequestError(f"max_tokens: {value} exceeds the context of {n_ctx} tokens", "max_tokens",
                                  "context_length_exceeded")
    return value


# ---- the context a call runs in ----------------------------------------------------------
_shared: "weakref.WeakKeyDictionary[Any, tuple[Any, threading.Lock]]" = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


@contextmanager
def _context_for(model: Any, context: Any) -> Iterator[Any]:
    """``context`` if given; else the model's shared context when no other call
    holds it, or a fresh one (so a stream left unconsumed never blocks others)."""
    if context is not None:
        yield context
        return
    with _shared_lock:
        if model not in _shared:
            _shared[model] = (model.create_context(), threading.Lock())
        shared, lock = _shared[model]
    if not lock.acquire(blocking=False):
        yield model.create_context()
        return
    try:
        yield shared
    finally:
        lock.release()


def _use_sampler(context: Any, sampler: Any) -> None:
    context.sampler = sampler
    sampler.set_history(context.tokens)  # the penalty window of what the cache holds


def _request_errors(call: Any) -> Any:
    """Run ``call()``, reporting a prompt that does not fit as InvalidRequestError."""
    try:
        return call()
    except InvalidRequestError:
        raise
    except ContextOverflowError as exc:
        # ChatSession's advice (reset(), a larger n_ctx) is for its own users
        raise InvalidRequestError(str(exc).split(";")[0], "messages", "context_length_exceeded") from None


def _model_name(model: Any, model_name: Optional[str]) -> str:
    if model_name:
        return model_name
    md = getattr(model, "metadata", None) or {}
    path = getattr(model, "path", None)
    if path:
        import os

        return os.path.basename(str(path))
    return str(md.get("general.name") or md.get("general.architecture") or "infer")


def _usage(prompt: int, completion: int, cached: Optional[int]) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _cached_tokens(context: Any, fallback: int) -> int:
    """Prompt tokens found in the KV cache: a serving slot counts them when it binds."""
    return int(getattr(context, "cached_tokens", fallback))


def _check_include_usage(stream: bool, stream_options: Any) -> bool:
    if stream_options is None:
        return False
    if not stream:
        raise InvalidRequestError("stream_options: only with stream=true", "stream_options")
    if not isinstance(stream_options, Mapping):
        raise InvalidRequestError("stream_options: expected an object", "stream_options")
    unknown = set(stream_options) - {"include_usage", "include_obfuscation"}
    if unknown:
        raise InvalidRequestError(f"stream_options: unknown field {sorted(unknown)[0]!r}", "stream_options")
    # OpenAI's random padding of each chunk against length side channels: a loopback
    # server has none to pad, so the flag is checked and changes nothing
    _check_bool("stream_options.include_obfuscation", stream_options.get("include_obfuscation"))
    return _check_bool("stream_options.include_usage", stream_options.get("include_usage"))


# ---- chat ------------------------------------------------------------------------------
_ROLES = ("system", "developer", "user", "assistant", "tool")
#: OpenAI's content parts of images, audio and files (Qwen2.5-VL / Qwen3-VL run as text models)
MEDIA_PARTS = ("image_url", "input_audio", "file")


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("messages: expected a non-empty list of message objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequestError(f"messages[{i}]: expected an object, got {type(m).__name__}", "messages")
        role = m.get("role")
        if role not in _ROLES:
            raise InvalidRequestError(f"messages[{i}].role: expected one of {', '.join(_ROLES)}, got {role!r}",
                                      "messages")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidRequestError(f"messages[{i}].content: expected a string, a list of parts or null",
                                      "messages")
        if content is None and role != "assistant":
            raise InvalidRequestError(f"messages[{i}].content: a {role} message needs content", "messages")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind in MEDIA_PARTS:
                    raise UnsupportedOptionError(
                        f"messages[{i}].content[{j}]: {kind} parts are not supported: infer runs a model's text "
                        "part only (a vision or audio model's mmproj file is not loaded)", "messages")
                if kind != "text" or not isinstance(part.get("text"), str):
                    raise UnsupportedOptionError(f"messages[{i}].content[{j}]: only text parts are supported",
                                                 "messages")
            m = dict(m, content="".join(part["text"] for part in content))  # as the template joins them
        # OpenAI's "developer" is the system prompt of newer models
        out.append(dict(m, role="system") if role == "developer" else m)
    last = out[-1]
    if last["role"] == "assistant" and (last.get("tool_calls") or not isinstance(last.get("content"), str)
                                        or not last["content"] or len(out) < 2):
        raise InvalidRequestError("messages: a last assistant message is a reply to continue (llama-server's "
                                  "prefill): it needs text, no tool calls, and a conversation before it",
                                  "messages")
    if last["role"] not in ("user", "tool", "assistant"):
        raise InvalidRequestError("messages: the last message must be from the user, a tool, or an assistant "
                                  f"reply to continue (got {last['role']!r})", "messages")
    return out


def _check_tools(tools: Any, tool_choice: Any) -> Optional[list[dict[str, Any]]]:
    """The tools to offer the model, after ``tool_choice``."""
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise InvalidRequestError("tools: expected a list of tool objects", "tools")
        for i, t in enumerate(tools):
            function = t.get("function")
            if t.get("type") != "function" or not isinstance(function, dict) or \
                    not isinstance(function.get("name"), str):
                raise InvalidRequestError(f"tools[{i}]: expected {{'type': 'function', 'function': "
                                          "{'name': ..., 'parameters': ...}}", "tools")
    if tool_choice is None or tool_choice == "auto":
        return tools or None
    if tool_choice == "none":
        return None  # the model is not told about them, so it cannot call them
    if tool_choice == "required" or isinstance(tool_choice, dict):
        if not tools:
            raise InvalidRequestError(f"tool_choice {json.dumps(tool_choice)}: no tools given", "tool_choice")
        if isinstance(tool_choice, dict):
            function = tool_choice.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            if tool_choice.get("type") != "function" or not isinstance(name, str):
                raise InvalidRequestError("tool_choice: expected {'type': 'function', 'function': {'name': ...}}",
                                          "tool_choice")
            if name not in [t["function"]["name"] for t in tools]:
                raise InvalidRequestError(f"tool_choice: no tool named {name!r}", "tool_choice")
        return list(tools)  # ChatSession forces the call with a grammar
    raise InvalidRequestError("tool_choice: expected 'auto', 'none', 'required' or a function object",
                              "tool_choice")


def create_chat_completion(
        model: Any, messages: Sequence[dict[str, Any]], *, tools: Optional[list[dict[str, Any]]] = None,
        tool_choice: Any = None, max_tokens: Optional[int] = None, max_completion_tokens: Optional[int] = None,
        temperature: Optional[float] = None, top_p: Optional[float] = None, top_k: Optional[int] = None,
        min_p: Optional[float] = None, repeat_penalty: Optional[float] = None,
        stop: Union[str, list[str], None] = None, seed: Optional[int] = None, stream: bool = False,
        stream_options: Optional[dict[str, Any]] = None, presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None, logit_bias: Optional[dict[Any, float]] = None, n: int = 1,
        response_format: Optional[dict[str, Any]] = None, logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None, parallel_tool_calls: Optional[bool] = None,
        chat_template_kwargs: Optional[dict[str, Any]] = None, user: Optional[str] = None,
        metadata: Optional[dict[str, str]] = None, store: Optional[bool] = None,
        service_tier: Optional[str] = None, prompt_cache_key: Optional[str] = None,
        safety_identifier: Optional[str] = None, grammar: Optional[str] = None,
        json_schema: Optional[dict[str, Any]] = None, reasoning_effort: Optional[str] = None,
        repeat_last_n: Optional[int] = None, context: Any = None, model_name: Optional[str] = None) -> Any:
    """OpenAI's ``POST /v1/chat/completions`` on a loaded model.

    Returns a ``chat.completion`` dict, or with ``stream=True`` an iterator of
    ``chat.completion.chunk`` dicts (the usage chunk last when
    ``stream_options={"include_usage": True}``).  Unset sampling options take the
    Sampler's defaults (llama.cpp's); ``temperature=0`` is greedy.  ``n`` choices
    are generated one after the other, choice ``i`` seeded ``seed + i``.
    ``chat_template_kwargs`` are extra template variables (``{"enable_thinking":
    False}``), as llama-server takes them.  ``user``, ``metadata``, ``store``,
    ``service_tier``, ``prompt_cache_key`` and ``safety_identifier`` label, log or
    route a request at OpenAI and change nothing in the reply: they are checked and
    not used (nothing is stored), as llama-server ignores them.  llama-server's
    ``grammar`` (GBNF) or ``json_schema`` constrains the reply, as ``response_format`` does.
    ``repeat_last_n`` is llama.cpp's penalty window (-1: the whole context; default 64).
    ``reasoning_effort`` is read as llama-server reads it: ``"none"`` turns thinking off
    (``enable_thinking`` false), any other level is the template's ``reasoning_effort``
    (gpt-oss's "Reasoning: high"), over ``chat_template_kwargs``.
    """
    from .chat import ChatSession
    from .chat.template import TEMPLATE_VARIABLES

    msgs = _check_messages(messages)
    offered = _check_tools(tools, tool_choice)
    single_call = not _check_bool("parallel_tool_calls", True if parallel_tool_calls is None else parallel_tool_calls)
    if max_completion_tokens is not None:
        if max_tokens is not None:
            raise InvalidRequestError("give max_tokens or max_completion_tokens, not both", "max_completion_tokens")
        max_tokens = max_completion_tokens
    top = _check_structured(response_format, logprobs, top_logprobs)
    constraint: Any = response_format
    extra_grammar = _completion_grammar(grammar, json_schema)
    if extra_grammar is not None:
        if response_format is not None:
            raise InvalidRequestError("give response_format or llama-server's grammar / json_schema, not both",
                                      "grammar" if grammar is not None else "json_schema")
        constraint = extra_grammar  # a compiled Grammar: ChatSession takes it as a response_format
    forced = tool_choice if tool_choice == "required" or isinstance(tool_choice, dict) else None
    if extra_grammar is not None and forced is not None:  # the forced call has a grammar of its own
        raise InvalidRequestError("a forced tool_choice and llama-server's grammar / json_schema: give one",
                                  "grammar" if grammar is not None else "json_schema")
    stops = _check_stop(stop)
    n = int(_check_optional_int("n", n, 1, 16) or 1)
    stream = _check_bool("stream", stream)
    include_usage = _check_include_usage(stream, stream_options)
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise InvalidRequestError("chat_template_kwargs: expected an object", "chat_template_kwargs")
    reserved = sorted(set(chat_template_kwargs or ()) & set(TEMPLATE_VARIABLES))
    if reserved:
        raise InvalidRequestError(f"chat_template_kwargs: {reserved[0]!r} is set from the request and the model "
                                  f"(as are {', '.join(TEMPLATE_VARIABLES)})", "chat_template_kwargs")
    chat_template_kwargs = _with_reasoning_effort(chat_template_kwargs, reasoning_effort)
    _check_labels(user=user, service_tier=service_tier, prompt_cache_key=prompt_cache_key,
                  safety_identifier=safety_identifier)
    _check_bool("store", store)
    if metadata is not None and (not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise InvalidRequestError("metadata: expected an object of string values", "metadata")
    options = _sampler_options(model, temperature, top_p, top_k, min_p, repeat_penalty, presence_penalty,
                               frequency_penalty, logit_bias, seed, repeat_last_n)
    name = _model_name(model, model_name)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": name}

    def turn(ctx: Any, choice: int) -> Iterator[Any]:
        _use_sampler(ctx, _make_sampler(options, choice, int(ctx.n_ctx)))
        # A request's messages are the client's: no trimming, and no reply limit it did not ask for.
        session = ChatSession(model, tools=offered, context=ctx, template_kwargs=chat_template_kwargs,
                              trim_history=False, max_tokens=None)
        session.history = msgs
        try:
            items: Iterator[Any] = session.stream(None, max_tokens=max_tokens, stop=stops, show_thinking=True,
                                                  response_format=constraint, tool_choice=forced,
                                                  logprobs=top)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, (InvalidRequestError, ContextOverflowError)):
                raise
            # response_format was compiled in the checks: a grammar failing here is a forced call's
            from .structured import GrammarError

            param = "tools" if forced is not None and isinstance(exc, GrammarError) else "messages"
            raise InvalidRequestError(str(exc), param) from None
        return _first_call_only(items) if single_call else items

    def run(ctx: Any) -> Generator[Any, None, None]:
        """(choice, item) for every item of every choice; the first turn starts eagerly."""
        _check_max_tokens(max_tokens, int(ctx.n_ctx))
        first = _request_errors(lambda: turn(ctx, 0))
        yield None  # the checks passed and the prompt fits
        for choice in range(n):
            for item in first if choice == 0 else turn(ctx, choice):
                yield choice, item

    if stream:
        return _eager(_chat_chunks(model, context, run, head, include_usage))
    # closing(): a turn cut short ends (rolling the context back) before the context is released
    with _context_for(model, context) as ctx, closing(run(ctx)) as steps:
        next(steps)
        return _chat_response(steps, head, ctx)


def _with_reasoning_effort(template_kwargs: Optional[dict[str, Any]],
                           reasoning_effort: Any) -> Optional[dict[str, Any]]:
    """The template variables with OpenAI's ``reasoning_effort`` applied as llama-server
    applies it (server-common.cpp): "none" sets enable_thinking false and gives the
    template no level; another level is the template's ``reasoning_effort``."""
    if reasoning_effort is None:
        return template_kwargs
    if not isinstance(reasoning_effort, str) or not reasoning_effort:
        raise InvalidRequestError("reasoning_effort: expected a level such as 'none', 'low', 'medium' or 'high'",
                                  "reasoning_effort")
    merged = dict(template_kwargs or {})
    if reasoning_effort == "none":
        merged.pop("reasoning_effort", None)
        merged["enable_thinking"] = False
    else:
        merged["reasoning_effort"] = reasoning_effort
    return merged


def _first_call_only(items: Iterator[Any]) -> Iterator[Any]:
    """A turn's items with at most one tool call in its Reply (``parallel_tool_calls=false``,
    as llama-server's parser reads it: the calls after the first are not the reply's)."""
    import dataclasses

    from .chat import Reply

    for item in items:
        if isinstance(item, Reply) and len(item.tool_calls) > 1:
            item = dataclasses.replace(item, tool_calls=item.tool_calls[:1])
        yield item


def _eager(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """Run a chunk generator to its first ``None`` now, so bad options raise here."""
    marker = next(chunks)
    assert marker is None
    return chunks


def _unparsed_calls(reply: Any) -> str:
    """The text of the tool calls that did not parse (cut off by max_tokens, or
    malformed): returned as content, as llama-server does, rather than dropped."""
    return "".join(e.raw for e in reply.tool_call_errors)


def _reply_message(reply: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text + _unparsed_calls(reply)}
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in reply.tool_calls]
        message["content"] = message["content"] or None
    return message


def _finish(reply: Any) -> str:
    return "length" if reply.finish_reason == "interrupted" else str(reply.finish_reason)


def _with_stop_reason(choice: dict[str, Any], reply: Any) -> dict[str, Any]:
    """The choice, with vLLM's ``stop_reason`` (the stop string that ended it) when one
    did: finish_reason "stop" alone does not tell it from the end of the turn (Anthropic's
    stop_sequence needs it)."""
    if reply.stop_string is not None:
        choice["stop_reason"] = reply.stop_string
    return choice


def _reply_logprobs(reply: Any) -> Optional[dict[str, Any]]:
    """OpenAI's choice ``logprobs``: ``{"content": [...]}`` when they were asked for."""
    return None if reply.logprobs is None else {"content": reply.logprobs}


def _chat_response(steps: Iterator[Any], head: dict[str, Any], ctx: Any) -> dict[str, Any]:
    from .chat import Reply

    choices: list[dict[str, Any]] = []
    prompt = completion = 0
    cached: Optional[int] = None
    for index, item in steps:
        if isinstance(item, Reply):
            choices.append(_with_stop_reason({"index": index, "message": _reply_message(item),
                                              "logprobs": _reply_logprobs(item), "finish_reason": _finish(item)},
                                             item))
            prompt = item.prompt_tokens
            completion += item.completion_tokens
            if cached is None:
                cached = _cached_tokens(ctx, item.cached_tokens)
    return dict(head, object="chat.completion", choices=choices, usage=_usage(prompt, completion, cached))


def _chat_chunks(model: Any, context: Any, run: Any, head: dict[str, Any],
                 include_usage: bool) -> Iterator[Any]:
    from .chat import Reply, ThinkingText

    def chunk(index: int, delta: dict[str, Any], finish: Optional[str] = None,
              logprobs: Optional[dict[str, Any]] = None) -> Chunk:
        return dict(head, object="chat.completion.chunk",
                    choices=[{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}])

    # closing(): a stream dropped in the middle ends its turn, which rolls the context back
    # to the rendered history, while the context is still this call's
    with _context_for(model, context) as ctx, closing(run(ctx)) as steps:
        yield next(steps)
        prompt = completion = 0
        cached: Optional[int] = None
        started: set[int] = set()
        # Each token's logprobs go with the chunk that carries its text (as OpenAI and
        # llama-server send them); those of tokens whose text never showed (a stop
        # string, a tool call) with the finishing chunk.
        pending: list[dict[str, Any]] = []
        sent = 0
        for index, item in steps:
            if index not in started:
                started.add(index)
                pending, sent = [], 0
                yield chunk(index, {"role": "assistant", "content": ""})
            if isinstance(item, Reply):
                if item.tool_call_errors:
                    yield chunk(index, {"content": _unparsed_calls(item)})
                if item.tool_calls:
                    calls = [dict(c.to_openai(), index=j) for j, c in enumerate(item.tool_calls)]
                    yield chunk(index, {"tool_calls": calls})
                rest = None if item.logprobs is None else {"content": item.logprobs[sent:]}
                finishing = chunk(index, {}, _finish(item), rest)
                _with_stop_reason(finishing["choices"][0], item)
                yield finishing
                prompt = item.prompt_tokens
                completion += item.completion_tokens
                if cached is None:
                    cached = _cached_tokens(ctx, item.cached_tokens)
                continue
            pending += getattr(item, "logprobs", None) or []
            if not item:
                continue
            delta = ({"reasoning_content": str(item)} if isinstance(item, ThinkingText)
                     else {"content": str(item)})
            yield chunk(index, delta, None, {"content": pending} if pending else None)
            sent += len(pending)
            pending = []
        if include_usage:
            yield dict(head, object="chat.completion.chunk", choices=[],
                       usage=_usage(prompt, completion, cached))


# ---- completions ---------------------------------------------------------------------------
def _completion_logprobs(entries: Optional[list[dict[str, Any]]], at: int = 0) -> Optional[dict[str, Any]]:
    """The legacy completions ``logprobs`` object (tokens, token_logprobs, top_logprobs,
    text_offset) of a Generation's ``logprobs`` entries, the first token's text at
    offset ``at``; None when they were not asked for."""
    if entries is None:
        return None
    offsets = []
    for e in entries:
        offsets.append(at)
        at += e.get("width", len(e["token"]))
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [None if e["top_logprobs"] is None
                             else {t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def _prompt_logprobs(model: Any, ids: list[int], top: int) -> list[dict[str, Any]]:
    """The echoed prompt's ``logprobs`` entries, as OpenAI sends them with ``echo``: each
    token's log-probability after the tokens before it, from the model's own logits
    (no sampling options), and none for the first token.  They come from one all-logits
    prefill on a context of their own (a server's slots prefill without rows)."""
    from .generate import logprob_entry
    from .sampler import Sampler

    tok = model.tokenizer
    rows = model.create_context(n_ctx=len(ids)).prefill(ids, all_logits=True)
    plain = Sampler(temperature=0.0)
    first = logprob_entry(tok, plain.logprobs(rows[0], ids[0]))
    entries = [dict(first, logprob=None, top_logprobs=None)]
    entries += [logprob_entry(tok, plain.logprobs(rows[i - 1], ids[i], top)) for i in range(1, len(ids))]
    for token, entry in zip(ids, entries):
        if tok.vocab.is_special(token):  # BOS: in the prompt, not in the echoed text
            entry["width"] = 0
    return entries


def _check_prompt(model: Any, prompt: Any) -> Union[str, list[int]]:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        vocab = int(model.engine.vocab_size)
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(f"prompt: token {bad[0]} is outside the vocabulary [0, {vocab})", "prompt")
        return [int(t) for t in prompt]
    raise InvalidRequestError("prompt: expected a string, a non-empty list of token ids, or a list of those",
                              "prompt")


def _prompt_batch(model: Any, prompt: Any) -> Optional[list[Union[str, list[int]]]]:
    """The prompts of a batched ``prompt`` (a list of strings or of token-id lists, as
    OpenAI and lm-evaluation-harness send them), each checked; None for one prompt."""
    if not isinstance(prompt, list) or not prompt or not all(isinstance(p, (str, list)) for p in prompt):
        return None
    return [_check_prompt(model, p) for p in prompt]


def create_completion(
        model: Any, prompt: Union[str, list[int]], *, max_tokens: Optional[int] = 16,
        temperature: Optional[float] = None, top_p: Optional[float] = None, top_k: Optional[int] = None,
        min_p: Optional[float] = None, repeat_penalty: Optional[float] = None,
        stop: Union[str, list[str], None] = None, seed: Optional[int] = None, stream: bool = False,
        stream_options: Optional[dict[str, Any]] = None, presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None, logit_bias: Optional[dict[Any, float]] = None, n: int = 1,
        echo: bool = False, best_of: Optional[int] = None, suffix: Optional[str] = None,
        logprobs: Optional[int] = None, user: Optional[str] = None, grammar: Optional[str] = None,
        json_schema: Optional[dict[str, Any]] = None, repeat_last_n: Optional[int] = None,
        context: Any = None, model_name: Optional[str] = None) -> Any:
    """OpenAI's ``POST /v1/completions``: continue ``prompt`` (text, encoded with BOS
    as the model says and special-token texts such as ``<|im_start|>`` read as those
    tokens, or token ids used as they are; or a list of such prompts, whose choices
    come in prompt order, prompt ``i``'s choice ``j`` at index ``i * n + j``).

    Returns a ``text_completion`` dict, or with ``stream=True`` an iterator of
    chunks.  ``max_tokens`` defaults to 16 as in OpenAI's API; None runs to the end
    of the context.  ``echo=True`` puts the prompt text before the completion.
    llama-server's ``grammar`` (GBNF) or ``json_schema`` constrains the completion;
    ``repeat_last_n`` is llama.cpp's penalty window (-1: the whole context; default 64).
    A non-empty ``suffix`` asks for the text between the prompt and it, for a model with
    fill-in-the-middle tokens (`infer.infill`), as llama-cpp-python lays it out.
    """
    options = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                   repeat_penalty=repeat_penalty, stop=stop, seed=seed, stream=stream,
                   stream_options=stream_options, presence_penalty=presence_penalty,
                   frequency_penalty=frequency_penalty, logit_bias=logit_bias, n=n, echo=echo, best_of=best_of,
                   suffix=suffix, logprobs=logprobs, user=user, grammar=grammar, json_schema=json_schema,
                   repeat_last_n=repeat_last_n, context=context, model_name=model_name)
    batch = _prompt_batch(model, prompt)
    if batch is None:
        return _create_completion(model, prompt, **options)
    first = _create_completion(model, batch[0], **options)  # the options fail here, early
    n_choices = int(_check_optional_int("n", n, 1, 16) or 1)
    if stream:
        return _batched_chunks(model, batch, options, first, n_choices)
    parts = [first] + [_create_completion(model, p, **options) for p in batch[1:]]
    choices = [dict(c, index=i * n_choices + c["index"]) for i, part in enumerate(parts) for c in part["choices"]]
    usage = {key: sum(part["usage"][key] for part in parts) for key in parts[0]["usage"]}
    return dict(parts[0], choices=choices, usage=usage)


def _batched_chunks(model: Any, batch: list[Union[str, list[int]]], options: dict[str, Any],
                    first: Iterator[Any], n_choices: int) -> Iterator[Any]:
    """The chunks of a streamed list of prompts: each prompt's in turn, under the first
    one's id, with the choices renumbered and one usage chunk (summed) at the end."""
    head: Optional[dict[str, Any]] = None
    usage: dict[str, int] = {}
    for i, prompt in enumerate(batch):
        chunks = first if i == 0 else _create_completion(model, prompt, **options)
        for chunk in chunks:
            head = head or {k: chunk[k] for k in ("id", "created", "model")}
            if not chunk["choices"]:  # this prompt's usage
                for key, value in chunk["usage"].items():
                    usage[key] = usage.get(key, 0) + value
                continue
            yield dict(chunk, **head, choices=[dict(c, index=i * n_choices + c["index"]) for c in chunk["choices"]])
    if usage and head is not None:
        yield dict(head, object="text_completion", choices=[], usage=usage)


def _completion_grammar(grammar: Any, json_schema: Any) -> Any:
    """The `infer.structured.Grammar` of llama-server's ``grammar`` (GBNF text) or
    ``json_schema`` (an object), compiled now so a bad one is a 400 naming it; None
    for neither."""
    if grammar is None and json_schema is None:
        return None
    if grammar is not None and json_schema is not None:
        raise InvalidRequestError("json_schema: give grammar or json_schema, not both", "json_schema")
    param = "grammar" if grammar is not None else "json_schema"
    if grammar is not None and not isinstance(grammar, str):
        raise InvalidRequestError(f"grammar: expected GBNF text, got {type(grammar).__name__}", "grammar")
    if json_schema is not None and not isinstance(json_schema, Mapping):
        raise InvalidRequestError(f"json_schema: expected an object, got {type(json_schema).__name__}",
                                  "json_schema")
    try:
        from .structured import Grammar

        if isinstance(grammar, str):
            return Grammar.gbnf(grammar)
        return Grammar.json_schema(dict(json_schema or {}))
    except ImportError as exc:
        raise UnsupportedOptionError(str(exc), param) from None
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(str(exc), param) from None


def _fill_in_the_middle(tok: Any, prompt: Union[str, list[int]], suffix: str) -> list[int]:
    """The ids of a completion between ``prompt`` and ``suffix``, in the plain layout
    llama-cpp-python gives its ``suffix`` (`infill.prefix_suffix_middle`); the texts read
    without special tokens."""
    from .infill import InfillUnsupportedError, prefix_suffix_middle

    try:
        prefix = tok.encode(prompt, add_special=False, parse_special=False) if isinstance(prompt, str) else prompt
        return prefix_suffix_middle(tok, prefix, tok.encode(suffix, add_special=False, parse_special=False))
    except InfillUnsupportedError as exc:
        raise UnsupportedOptionError(f"suffix: {exc}", "suffix") from None
    except ValueError as exc:  # text UTF-8 cannot encode (a lone surrogate)
        raise InvalidRequestError(f"suffix: {exc}", "suffix") from None


def _create_completion(
        model: Any, prompt: Union[str, list[int]], *, max_tokens: Optional[int],
        temperature: Optional[float], top_p: Optional[float], top_k: Optional[int],
        min_p: Optional[float], repeat_penalty: Optional[float],
        stop: Union[str, list[str], None], seed: Optional[int], stream: bool,
        stream_options: Optional[dict[str, Any]], presence_penalty: Optional[float],
        frequency_penalty: Optional[float], logit_bias: Optional[dict[Any, float]], n: int,
        echo: bool, best_of: Optional[int], suffix: Optional[str],
        logprobs: Optional[int], user: Optional[str], grammar: Optional[str],
        json_schema: Optional[dict[str, Any]], repeat_last_n: Optional[int], context: Any,
        model_name: Optional[str]) -> Any:
    """`create_completion` of one prompt."""
    from .generate import generate

    text_prompt = _check_prompt(model, prompt)
    if suffix is not None and not isinstance(suffix, str):
        raise InvalidRequestError(f"suffix: expected a string, got {type(suffix).__name__}", "suffix")
    if suffix and echo:
        raise UnsupportedOptionError("echo: not taken with suffix (the prompt is laid out for fill-in-the-middle)",
                                     "echo")
    if best_of is not None and _check_optional_int("best_of", best_of, 1) != 1:
        raise UnsupportedOptionError("best_of > 1 is not supported", "best_of")
    if logprobs is not None:
        _check_optional_int("logprobs", logprobs, 0, 5)
    stops = _check_stop(stop)
    n = int(_check_optional_int("n", n, 1, 16) or 1)
    stream = _check_bool("stream", stream)
    echo = _check_bool("echo", echo)
    include_usage = _check_include_usage(stream, stream_options)
    _check_labels(user=user)
    constraint = _completion_grammar(grammar, json_schema)
    options = _sampler_options(model, temperature, top_p, top_k, min_p, repeat_penalty, presence_penalty,
                               frequency_penalty, logit_bias, seed, repeat_last_n)
    name = _model_name(model, model_name)
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": name}
    tok = model.tokenizer
    # Special-token texts in a text prompt are those tokens, as llama-server and
    # llama-cpp-python read a completion prompt (a hand-formatted chat turn).
    try:
        if isinstance(text_prompt, str):
            encode = functools.partial(tok.encode, text_prompt, add_special=True, parse_special=True)
            ids = encode() if len(text_prompt) < LONG_TEXT else run_apart(context, encode)
        else:
            ids = text_prompt
    except ValueError as exc:  # text UTF-8 cannot encode (a lone surrogate)
        raise InvalidRequestError(f"prompt: {exc}", "prompt") from None
    if suffix:
        ids = _fill_in_the_middle(tok, text_prompt, suffix)
    if not ids:
        raise InvalidRequestError("prompt: is empty and the model adds no BOS token", "prompt")
    echoed = text_prompt if isinstance(text_prompt, str) else tok.decode(ids)
    prompt_entries = None

    def run(ctx: Any) -> Iterator[Any]:
        """(choice, piece or Generation) for every choice, the Generation after its text."""
        _check_max_tokens(max_tokens, int(ctx.n_ctx))
        if len(ids) > int(ctx.n_ctx):
            raise InvalidRequestError(f"prompt of {len(ids)} tokens exceeds the context of {ctx.n_ctx} tokens",
                                      "prompt", "context_length_exceeded")
        nonlocal prompt_entries
        if echo and logprobs is not None:
            # a serving slot runs this pass beside the others, off the thread its request waits on
            prompt_entries = run_apart(ctx, functools.partial(_prompt_logprobs, model, ids, logprobs))
        yield None
        for choice in range(n):
            _use_sampler(ctx, _make_sampler(options, choice, int(ctx.n_ctx)))
            gen = generate(model, ids, context=ctx, max_tokens=max_tokens, stop=stops, logprobs=logprobs,
                           grammar=constraint)
            if echo:
                yield choice, echoed, prompt_entries
            sent = 0  # logprob entries already handed out with a piece
            for piece in gen:
                yield choice, piece, None if gen.logprobs is None else gen.logprobs[sent:]
                sent = len(gen.logprobs or ())
            yield choice, gen, None if gen.logprobs is None else gen.logprobs[sent:]

    def choice_of(index: int, text: str, finish: Optional[str], entries: Optional[list[dict[str, Any]]],
                  at: int = 0) -> dict[str, Any]:
        return {"text": text, "index": index, "logprobs": _completion_logprobs(entries, at),
                "finish_reason": finish}

    if stream:
        def chunks() -> Iterator[Any]:
            with _context_for(model, context) as ctx:
                steps = run(ctx)
                yield next(steps)
                completion = 0
                at: dict[int, int] = {}  # text of the tokens reported so far, per choice (text_offset)
                for index, item, entries in steps:
                    # each chunk carries the logprobs of the tokens whose text it holds
                    offset = at.get(index, 0)
                    at[index] = (len(item) if item is echoed and echo
                                 else offset + sum(len(e["token"]) for e in entries or ()))
                    if isinstance(item, str):
                        yield dict(head, object="text_completion",
                                   choices=[choice_of(index, item, None, entries, offset)])
                    else:
                        completion += len(item.tokens)
                        yield dict(head, object="text_completion",
                                   choices=[choice_of(index, "", item.finish_reason, entries, offset)])
                if include_usage:
                    yield dict(head, object="text_completion", choices=[],
                               usage=_usage(len(ids), completion, None))
        return _eager(chunks())
    with _context_for(model, context) as ctx:
        steps = run(ctx)
        next(steps)
        texts: dict[int, list[str]] = {}
        choices = []
        completion = 0
        for index, item, _ in steps:
            if isinstance(item, str):
                texts.setdefault(index, []).append(item)
            else:
                completion += len(item.tokens)
                choice = choice_of(index, "".join(texts.get(index, [])), item.finish_reason,
                                   item.logprobs, len(echoed) if echo else 0)
                if choice["logprobs"] is not None and prompt_entries is not None:
                    echoed_part = _completion_logprobs(prompt_entries)
                    assert echoed_part is not None
                    for key, values in echoed_part.items():
                        choice["logprobs"][key] = values + choice["logprobs"][key]
                choices.append(choice)
        return dict(head, object="text_completion", choices=choices, usage=_usage(len(ids), completion, None))


# ---- embeddings ------------------------------------------------------------------------------
def create_embedding(model: Any, input: Union[str, list[str], list[int], list[list[int]]], *,
                     encoding_format: str = "float",
                     pooling: Optional[str] = None, user: Optional[str] = None, dimensions: Optional[int] = None,
                     model_name: Optional[str] = None, **ignored: Any) -> dict[str, Any]:
    """OpenAI's ``POST /v1/embeddings``: unit-length pooled embeddings of the final hidden
    states (`Model.embed`; the file's pooling, else mean), one per input, as a ``list``
    of ``embedding``s.  An
    input is a text, or token ids (a list of ints, or a list of such lists), as OpenAI
    takes them and LangChain's OpenAIEmbeddings sends them."""
    import base64

    import numpy as np

    from .embeddings import as_token_ids, tokenize_inputs

    def is_ids(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and as_token_ids(value) is not None

    texts: Any = [input] if isinstance(input, str) or is_ids(input) else input
    if not isinstance(texts, list) or not texts or \
            not all((isinstance(t, str) and t) or is_ids(t) for t in texts):
        raise InvalidRequestError("input: expected a non-empty string, a list of non-empty strings, "
                                  "a list of token ids or a list of such lists", "input")
    if encoding_format not in ("float", "base64"):
        raise InvalidRequestError("encoding_format: expected 'float' or 'base64'", "encoding_format")
    if pooling is not None and pooling not in ("mean", "last", "cls"):
        raise InvalidRequestError("pooling: expected 'mean', 'last' or 'cls'", "pooling")
    if pooling is None:
        from .embeddings import file_pooling

        try:
            pooling = file_pooling(model)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), "pooling") from None
    if dimensions is not None:
        raise UnsupportedOptionError("dimensions is not supported (the model's width is fixed)", "dimensions")
    if ignored:
        raise InvalidRequestError(f"unrecognized request argument: {sorted(ignored)[0]}", sorted(ignored)[0])
    try:
        encoded = tokenize_inputs(model, texts, name="input")
    except ValueError as exc:  # text UTF-8 cannot encode (a lone surrogate), an id outside the vocabulary
        raise InvalidRequestError(f"input: {exc}", "input") from None
    lengths = [len(ids) for ids in encoded]
    n_tokens = sum(lengths)
    limit = int(model.engine.max_seq_len)
    longest = max(lengths)
    if longest > limit:
        raise InvalidRequestError(f"input: input is too large: a text of {longest} tokens exceeds the model's "
                                  f"context of {limit}", "input", "context_length_exceeded")
    vectors = model.embed(encoded, pooling=pooling, normalize=True)  # the ids, not tokenized again
    data = []
    for i, vec in enumerate(vectors):
        value: Any = (base64.b64encode(np.asarray(vec, "<f4").tobytes()).decode("ascii")
                      if encoding_format == "base64" else [float(v) for v in vec])
        data.append({"object": "embedding", "index": i, "embedding": value})
    return {"object": "list", "data": data, "model": _model_name(model, model_name),
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}
