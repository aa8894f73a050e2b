"""The OpenAI-shaped calls: `create_chat_completion` and `create_completion`.

They return plain dicts, or iterators of chunk dicts with ``stream=True``, in the
OpenAI wire shape (``id``, ``object``, ``created``, ``model``, ``choices`` with
``finish_reason``, ``usage``), so that ``json.dumps`` of one is a response body
the official clients accept.  Chat runs on `ChatSession` and completions on
`generate`: the same templates, stop rules, tool-call parsing and KV reuse.
Thinking comes back as ``reasoning_content`` and tool calls as ``tool_calls``,
as llama-server sends them.

Every option is checked before anything runs.  A wrong type or value raises
`InvalidRequestError` naming the field; an option this runtime cannot honour
raises `UnsupportedOptionError` rather than being ignored.  ``infer serve`` turns
both into HTTP 400 in OpenAI's error shape.

Without ``context=`` the calls reuse one context per model (so a chat's next turn
prefills only its new tokens), or a fresh one while another thread holds it.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
import weakref
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from .runtime import ContextOverflowError

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


def _check_structured(response_format: Any, logprobs: Any, top_logprobs: Any) -> None:
    """The options that need constrained decoding or per-token probabilities.

    The hook for the structured-output work: it turns ``response_format`` into a
    grammar and ``logprobs`` into per-token records; until then they are refused."""
    if response_format is not None:
        if not isinstance(response_format, Mapping) or not isinstance(response_format.get("type"), str):
            raise InvalidRequestError("response_format: expected an object with a string 'type'",
                                      "response_format")
        if response_format["type"] != "text":
            raise UnsupportedOptionError(
                f"response_format {response_format['type']!r} is not supported yet (only 'text')",
                "response_format")
    if logprobs is not None and not isinstance(logprobs, (bool, int)):
        raise InvalidRequestError(f"logprobs: expected a boolean, got {type(logprobs).__name__}", "logprobs")
    if logprobs:
        raise UnsupportedOptionError("logprobs is not supported yet", "logprobs")
    if top_logprobs is not None:
        _check_optional_int("top_logprobs", top_logprobs, 0, 20)
        if top_logprobs:
            raise UnsupportedOptionError("top_logprobs is not supported yet", "top_logprobs")


def _sampler_options(model: Any, temperature: Any, top_p: Any, top_k: Any, min_p: Any, repeat_penalty: Any,
                     presence_penalty: Any, frequency_penalty: Any, logit_bias: Any, seed: Any) -> dict[str, Any]:
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
    options["seed"] = _check_optional_int("seed", seed, 0)
    _make_sampler(options, 0)  # the Sampler's own range checks, now rather than mid-request
    return options


def _make_sampler(options: Mapping[str, Any], choice: int) -> Any:
    """The sampler of choice ``choice``: seeded ``seed + choice`` so n choices differ."""
    from .sampler import Sampler

    opts = dict(options)
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
    unknown = set(stream_options) - {"include_usage"}
    if unknown:
        raise InvalidRequestError(f"stream_options: unknown field {sorted(unknown)[0]!r}", "stream_options")
    return _check_bool("stream_options.include_usage", stream_options.get("include_usage"))


# ---- chat ------------------------------------------------------------------------------
_ROLES = ("system", "developer", "user", "assistant", "tool")


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
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise UnsupportedOptionError(f"messages[{i}].content: only text parts are supported",
                                                 "messages")
        # OpenAI's "developer" is the system prompt of newer models
        out.append(dict(m, role="system") if role == "developer" else m)
    if out[-1]["role"] not in ("user", "tool"):
        raise InvalidRequestError("messages: the last message must be from the user or a tool "
                                  f"(got {out[-1]['role']!r})", "messages")
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
        # forcing a call needs constrained decoding (the structured-output hook)
        raise UnsupportedOptionError(f"tool_choice {json.dumps(tool_choice)} is not supported yet "
                                     "(only 'auto' and 'none')", "tool_choice")
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
        context: Any = None, model_name: Optional[str] = None) -> Any:
    """OpenAI's ``POST /v1/chat/completions`` on a loaded model.

    Returns a ``chat.completion`` dict, or with ``stream=True`` an iterator of
    ``chat.completion.chunk`` dicts (the usage chunk last when
    ``stream_options={"include_usage": True}``).  Unset sampling options take the
    Sampler's defaults (llama.cpp's); ``temperature=0`` is greedy.  ``n`` choices
    are generated one after the other, choice ``i`` seeded ``seed + i``.
    ``chat_template_kwargs`` are extra template variables (``{"enable_thinking":
    False}``), as llama-server takes them.  ``user`` is accepted and not used.
    """
    from .chat import ChatSession

    msgs = _check_messages(messages)
    offered = _check_tools(tools, tool_choice)
    if parallel_tool_calls is not None and parallel_tool_calls is not True:
        raise UnsupportedOptionError("parallel_tool_calls=false is not supported (a reply may hold several calls)",
                                     "parallel_tool_calls")
    if max_completion_tokens is not None:
        if max_tokens is not None:
            raise InvalidRequestError("give max_tokens or max_completion_tokens, not both", "max_completion_tokens")
        max_tokens = max_completion_tokens
    _check_structured(response_format, logprobs, top_logprobs)
    stops = _check_stop(stop)
    n = int(_check_optional_int("n", n, 1, 16) or 1)
    stream = _check_bool("stream", stream)
    include_usage = _check_include_usage(stream, stream_options)
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise InvalidRequestError("chat_template_kwargs: expected an object", "chat_template_kwargs")
    if user is not None and not isinstance(user, str):
        raise InvalidRequestError("user: expected a string", "user")
    options = _sampler_options(model, temperature, top_p, top_k, min_p, repeat_penalty, presence_penalty,
                               frequency_penalty, logit_bias, seed)
    name = _model_name(model, model_name)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": name}

    def turn(ctx: Any, choice: int) -> Iterator[Any]:
        _use_sampler(ctx, _make_sampler(options, choice))
        # A request's messages are the client's: no trimming, and no reply limit it did not ask for.
        session = ChatSession(model, tools=offered, context=ctx, template_kwargs=chat_template_kwargs,
                              trim_history=False, max_tokens=None)
        session.history = msgs
        try:
            items: Iterator[Any] = session.stream(None, max_tokens=max_tokens, stop=stops, show_thinking=True)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, (InvalidRequestError, ContextOverflowError)):
                raise
            raise InvalidRequestError(str(exc), "messages") from None
        return items

    def run(ctx: Any) -> Iterator[Any]:
        """(choice, item) for every item of every choice; the first turn starts eagerly."""
        _check_max_tokens(max_tokens, int(ctx.n_ctx))
        first = _request_errors(lambda: turn(ctx, 0))
        yield None  # the checks passed and the prompt fits
        for choice in range(n):
            for item in first if choice == 0 else turn(ctx, choice):
                yield choice, item

    if stream:
        return _eager(_chat_chunks(model, context, run, head, include_usage))
    with _context_for(model, context) as ctx:
        steps = run(ctx)
        next(steps)
        return _chat_response(steps, head, ctx)


def _eager(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """Run a chunk generator to its first ``None`` now, so bad options raise here."""
    marker = next(chunks)
    assert marker is None
    return chunks


def _reply_message(reply: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in reply.tool_calls]
        message["content"] = reply.text or None
    return message


def _finish(reply: Any) -> str:
    return "length" if reply.finish_reason == "interrupted" else str(reply.finish_reason)


def _chat_response(steps: Iterator[Any], head: dict[str, Any], ctx: Any) -> dict[str, Any]:
    from .chat import Reply

    choices: list[dict[str, Any]] = []
    prompt = completion = 0
    cached: Optional[int] = None
    for index, item in steps:
        if isinstance(item, Reply):
            choices.append({"index": index, "message": _reply_message(item), "logprobs": None,
                            "finish_reason": _finish(item)})
            prompt = item.prompt_tokens
            completion += item.completion_tokens
            if cached is None:
                cached = _cached_tokens(ctx, item.cached_tokens)
    return dict(head, object="chat.completion", choices=choices, usage=_usage(prompt, completion, cached))


def _chat_chunks(model: Any, context: Any, run: Any, head: dict[str, Any],
                 include_usage: bool) -> Iterator[Any]:
    from .chat import Reply, ThinkingText

    def chunk(index: int, delta: dict[str, Any], finish: Optional[str] = None) -> Chunk:
        return dict(head, object="chat.completion.chunk",
                    choices=[{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}])

    with _context_for(model, context) as ctx:
        steps = run(ctx)
        yield next(steps)
        prompt = completion = 0
        cached: Optional[int] = None
        started: set[int] = set()
        for index, item in steps:
            if index not in started:
                started.add(index)
                yield chunk(index, {"role": "assistant", "content": ""})
            if isinstance(item, Reply):
                if item.tool_calls:
                    calls = [dict(c.to_openai(), index=j) for j, c in enumerate(item.tool_calls)]
                    yield chunk(index, {"tool_calls": calls})
                yield chunk(index, {}, _finish(item))
                prompt = item.prompt_tokens
                completion += item.completion_tokens
                if cached is None:
                    cached = _cached_tokens(ctx, item.cached_tokens)
            elif isinstance(item, ThinkingText):
                yield chunk(index, {"reasoning_content": str(item)})
            elif item:
                yield chunk(index, {"content": item})
        if include_usage:
            yield dict(head, object="chat.completion.chunk", choices=[],
                       usage=_usage(prompt, completion, cached))


# ---- completions ---------------------------------------------------------------------------
def _check_prompt(model: Any, prompt: Any) -> Union[str, list[int]]:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        vocab = int(model.engine.vocab_size)
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(f"prompt: token {bad[0]} is outside the vocabulary [0, {vocab})", "prompt")
        return [int(t) for t in prompt]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        raise UnsupportedOptionError("prompt: a list of prompts is not supported (send one request per prompt)",
                                     "prompt")
    raise InvalidRequestError("prompt: expected a string or a non-empty list of token ids", "prompt")


def create_completion(
        model: Any, prompt: Union[str, list[int]], *, max_tokens: Optional[int] = 16,
        temperature: Optional[float] = None, top_p: Optional[float] = None, top_k: Optional[int] = None,
        min_p: Optional[float] = None, repeat_penalty: Optional[float] = None,
        stop: Union[str, list[str], None] = None, seed: Optional[int] = None, stream: bool = False,
        stream_options: Optional[dict[str, Any]] = None, presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None, logit_bias: Optional[dict[Any, float]] = None, n: int = 1,
        echo: bool = False, best_of: Optional[int] = None, suffix: Optional[str] = None,
        logprobs: Optional[int] = None, user: Optional[str] = None,
        context: Any = None, model_name: Optional[str] = None) -> Any:
    """OpenAI's ``POST /v1/completions``: continue ``prompt`` (text, encoded with BOS
    as the model says, or token ids used as they are).

    Returns a ``text_completion`` dict, or with ``stream=True`` an iterator of
    chunks.  ``max_tokens`` defaults to 16 as in OpenAI's API; None runs to the end
    of the context.  ``echo=True`` puts the prompt text before the completion.
    """
    from .generate import generate

    text_prompt = _check_prompt(model, prompt)
    if suffix is not None:
        raise UnsupportedOptionError("suffix is not supported", "suffix")
    if best_of is not None and _check_optional_int("best_of", best_of, 1) != 1:
        raise UnsupportedOptionError("best_of > 1 is not supported", "best_of")
    if logprobs is not None:
        _check_optional_int("logprobs", logprobs, 0, 5)
        _check_structured(None, bool(logprobs), None)
    stops = _check_stop(stop)
    n = int(_check_optional_int("n", n, 1, 16) or 1)
    stream = _check_bool("stream", stream)
    echo = _check_bool("echo", echo)
    include_usage = _check_include_usage(stream, stream_options)
    if user is not None and not isinstance(user, str):
        raise InvalidRequestError("user: expected a string", "user")
    options = _sampler_options(model, temperature, top_p, top_k, min_p, repeat_penalty, presence_penalty,
                               frequency_penalty, logit_bias, seed)
    name = _model_name(model, model_name)
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": name}
    tok = model.tokenizer
    ids = tok.encode(text_prompt, add_special=True) if isinstance(text_prompt, str) else text_prompt
    if not ids:
        raise InvalidRequestError("prompt: is empty and the model adds no BOS token", "prompt")
    echoed = text_prompt if isinstance(text_prompt, str) else tok.decode(ids)

    def run(ctx: Any) -> Iterator[Any]:
        """(choice, piece or Generation) for every choice, the Generation after its text."""
        _check_max_tokens(max_tokens, int(ctx.n_ctx))
        if len(ids) > int(ctx.n_ctx):
            raise InvalidRequestError(f"prompt of {len(ids)} tokens exceeds the context of {ctx.n_ctx} tokens",
                                      "prompt", "context_length_exceeded")
        yield None
        for choice in range(n):
            _use_sampler(ctx, _make_sampler(options, choice))
            gen = generate(model, ids, context=ctx, max_tokens=max_tokens, stop=stops)
            if echo:
                yield choice, echoed
            for piece in gen:
                yield choice, piece
            yield choice, gen

    def choice_of(index: int, text: str, finish: Optional[str]) -> dict[str, Any]:
        return {"text": text, "index": index, "logprobs": None, "finish_reason": finish}

    if stream:
        def chunks() -> Iterator[Any]:
            with _context_for(model, context) as ctx:
                steps = run(ctx)
                yield next(steps)
                completion = 0
                for index, item in steps:
                    if isinstance(item, str):
                        yield dict(head, object="text_completion", choices=[choice_of(index, item, None)])
                    else:
                        completion += len(item.tokens)
                        yield dict(head, object="text_completion",
                                   choices=[choice_of(index, "", item.finish_reason)])
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
        for index, item in steps:
            if isinstance(item, str):
                texts.setdefault(index, []).append(item)
            else:
                completion += len(item.tokens)
                choices.append(choice_of(index, "".join(texts.get(index, [])), item.finish_reason))
        return dict(head, object="text_completion", choices=choices, usage=_usage(len(ids), completion, None))
