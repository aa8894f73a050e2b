"""Ollama's HTTP API beside OpenAI's, so that apps written for ollama (Open WebUI,
Continue, LangChain's ChatOllama, the ``ollama`` Python and JS clients) can point at
``infer serve --port 11434`` unchanged.

``POST /api/chat`` and ``/api/generate`` are translated onto the same calls as
OpenAI's endpoints (`infer.api`: chat templates, thinking and tool-call parsing,
structured output) and run on the same scheduler slots (`_Server.run_completion`:
continuous batching, prefix reuse, cancellation, /metrics); only the request and
response shapes are ollama's.  Streaming is ollama's default: one JSON object per
line (``application/x-ndjson``), the last with ``"done": true``, ``done_reason`` and
the counts and durations (nanoseconds).  ``/api/embed`` and ``/api/embeddings`` run
beside the slots, as ``/v1/embeddings`` does.

The field names, defaults and shapes follow ollama's server (server/routes.go and
api/types.go).  Where infer differs:

* one model is served; its names are the served name (the file name or ``--alias``),
  that name without ``.gguf``, and either with ``:latest``, compared without regard
  to case.  Any other name is a 404 ``model 'x' not found``, as ollama answers for a
  model it does not have; ``/api/pull``, ``/push``, ``/create``, ``/copy`` and
  ``/delete`` are a 400 saying the server serves one file given at startup;
* a request field or option this server does not know, or a sampler it does not
  have switched on (``mirostat``, ``typical_p``, ``tfs_z`` other than off), is a 400
  naming it, where ollama logs a warning; options about loading and hardware
  (``num_gpu``, ``num_thread``, ``use_mmap``, ...) and ``keep_alive`` are accepted and
  change nothing; ``num_ctx`` is accepted up to the slot's context and refused above;
* an empty chat or prompt answers ``done_reason`` "load", or "unload" with ``keep_alive``
  0, as ollama's; the model stays loaded either way;
* ``images`` and a custom ``template`` (other than
  ``{{ .Prompt }}``) are refused with a 400;
* ``/api/generate``'s ``suffix`` fills in the middle, for a model with FIM tokens (its
  capabilities then list "insert"), in the plain ``[PRE]prompt[SUF]suffix[MID]`` layout
  of ollama's templates for code models;
* a prompt longer than the slot's context is a 400 (``truncate`` is not applied to
  chat history); ``/api/embed`` does truncate inputs to the model's context unless
  ``truncate`` is false;
* ``/api/generate``'s ``context`` (the deprecated token array) is returned as ollama
  computes it, the tokens of the prompt and the reply; given back, its tokens go
  before the new prompt's, as ollama prepends their text.  Such a continuation runs
  as a plain completion: a thinking model's thinking is then part of ``response``;
* the sampling defaults are ollama's (temperature 0.8, top_k 40, top_p 0.9, min_p 0,
  repeat_penalty 1.1, repeat_last_n 64), under the server's own ``--temp``, ``--top-k``,
  ... when given.
"""
from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import os
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import api
from ..api import InvalidRequestError, UnsupportedOptionError
from .app import Dialect
from .llama_server import _unknown as _check_fields

if TYPE_CHECKING:
    from .app import _Server

__all__ = ["OLLAMA", "routes"]

#: the release of ollama whose API this follows, as ``GET /api/version`` reports it
#: (clients compare it to decide which fields they may send)
OLLAMA_API_VERSION = "0.12.0"

#: ollama's sampling defaults (api.DefaultOptions; docs/modelfile.md)
DEFAULT_OPTIONS: dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0,
                                   "repeat_penalty": 1.1, "repeat_last_n": 64}

#: options sent under the same name to infer's samplers
_SAMPLING_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                     "presence_penalty", "frequency_penalty", "seed")
#: options about loading the model and the hardware: accepted, and meaningless here
_LOAD_OPTIONS = frozenset({"numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all",
                           "vocab_only", "use_mmap", "use_mlock", "num_thread", "embedding_only", "num_keep",
                           "penalize_newline"})
#: samplers infer does not have, with the value that switches each off
_OFF_SWITCHES: dict[str, float] = {"typical_p": 1.0, "tfs_z": 1.0, "mirostat": 0.0}
#: their settings, inert while they are off
_INERT_OPTIONS = frozenset({"mirostat_tau", "mirostat_eta"})
#: the options that are integers
_INT_OPTIONS = frozenset({"top_k", "repeat_last_n", "seed", "num_predict", "num_ctx"})
_KNOWN_OPTIONS = frozenset({*_SAMPLING_OPTIONS, *_LOAD_OPTIONS, *_OFF_SWITCHES, *_INERT_OPTIONS,
                            "num_predict", "num_ctx", "stop"})

#: the top-level fields of each endpoint (ollama's api/types.go)
_CHAT_FIELDS = frozenset({"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think",
                          "logprobs", "top_logprobs", "truncate", "shift"})
_GENERATE_FIELDS = frozenset({"model", "prompt", "suffix", "system", "template", "context", "raw", "format",
                              "options", "stream", "keep_alive", "think", "images", "logprobs", "top_logprobs",
                              "truncate", "shift"})
_EMBED_FIELDS = frozenset({"model", "input", "truncate", "options", "keep_alive", "dimensions"})
_EMBEDDINGS_FIELDS = frozenset({"model", "prompt", "options", "keep_alive"})
_SHOW_FIELDS = frozenset({"model", "name", "verbose", "system", "template", "options"})
_MESSAGE_FIELDS = frozenset({"role", "content", "thinking", "images", "tool_calls", "tool_name", "tool_call_id"})

#: a template that is only the prompt: the same as ``raw``
_PROMPT_ONLY_TEMPLATE = re.compile(r"^\s*\{\{-?\s*\.Prompt\s*-?\}\}\s*$")

#: what a served file's expiry is reported as: never (ollama's keep_alive -1 gives
#: a time this far off too)
_NEVER = "2318-01-01T00:00:00Z"


# ---- errors -------------------------------------------------------------------------------------------
def error_body(status: int, openai_body: Mapping[str, Any]) -> dict[str, Any]:
    """ollama's error body, ``{"error": "message"}``, for an OpenAI-shaped one."""
    return {"error": str(openai_body.get("error", {}).get("message", ""))}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _NotFound(Exception):
    """The request names a model this server does not serve (a 404)."""


def _usage(result: Any) -> Optional[dict[str, Any]]:
    """The usage of a final object (``"done": true``), counted in /metrics."""
    if isinstance(result, Mapping) and result.get("done") is True and "eval_count" in result:
        return api._usage(int(result["prompt_eval_count"]), int(result["eval_count"]), None)
    return None


def stream_response(items: "asyncio.Queue[tuple[str, Any]]", handle: Any) -> Response:
    """A stream's objects, one JSON object a line (``application/x-ndjson``); an error
    after the first line is one more line, ``{"error": ...}``, as ollama writes it."""

    async def lines() -> Any:
        try:
            while True:
                batch = [await items.get()]
                while not items.empty():  # what has queued up goes in one write
                    batch.append(items.get_nowait())
                out = []
                for kind, value in batch:
                    if kind == "chunk":
                        out.append(json.dumps(value, ensure_ascii=False).encode() + b"\n")
                        continue
                    if kind == "error":
                        out.append(json.dumps(value[1], ensure_ascii=False).encode() + b"\n")
                    if out:
                        yield b"".join(out)
                    return
                yield b"".join(out)
        finally:
            handle.cancel()  # the client went away (a no-op once the request is over)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


OLLAMA = Dialect(error_body=error_body, stream_end=None, usage=_usage, stream_response=stream_response)


# ---- shapes -----------------------------------------------------------------------------------------
def _now() -> str:
    """The time as ollama writes ``created_at`` (Go's RFC 3339 with nanoseconds, UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


def human_number(n: int) -> str:
    """A parameter count as ollama writes it (format.HumanNumber): 8B, 7.6B, 134.52M, 12K."""
    for scale, unit, digits in ((1e9, "B", 1), (1e6, "M", 2)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.{digits}f}{unit}"
    return f"{n / 1e3:.0f}K" if n >= 1000 else str(n)


def quantization_level(file_type: Any) -> str:
    """``general.file_type`` as ollama names it (Q4_K_M, Q8_0, F16, ...)."""
    from ..quant_mixtures import RECIPES, file_type_name

    if isinstance(file_type, int) and not isinstance(file_type, bool):
        for recipe in RECIPES.values():
            if recipe.file_type == file_type and (recipe.mixture or recipe.name in ("f32", "f16", "bf16")):
                return recipe.mixture or recipe.name.upper()
    return file_type_name(file_type) or "unknown"


def _json_value(value: Any) -> Any:
    """A metadata value as JSON (numpy arrays and scalars as lists and numbers)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


class _ModelFacts:
    """What the listing endpoints say about the served file, worked out once."""

    def __init__(self, server: "_Server") -> None:
        model = server.model
        self.served = server.model_name
        stem = self.served[:-len(".gguf")] if self.served.lower().endswith(".gguf") else self.served
        #: the name listed (ollama's names carry a tag)
        self.name = stem if ":" in stem else f"{stem}:latest"
        self.names = {n.lower() for n in (self.served, stem, self.name, f"{self.served}:latest")}
        md = getattr(model, "metadata", None) or {}
        self.metadata = md
        self.arch = str(md.get("general.architecture", ""))
        path = getattr(model, "path", None)
        self.path = None if path is None else str(path)
        try:
            st = os.stat(self.path) if self.path else None
        except OSError:
            st = None
        self.size = st.st_size if st else 0
        mtime = st.st_mtime if st else server.started
        self.modified_at = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).isoformat()
        # an identifier of the served file (path, size, time), not a hash of its bytes:
        # hashing gigabytes at startup would delay serving
        self.digest = hashlib.sha256(f"{self.path}:{self.size}:{mtime}".encode()).hexdigest()
        self._parameters: Optional[int] = None

    def parameters(self) -> int:
        count = self.metadata.get("general.parameter_count")
        if isinstance(count, int) and count > 0:
            return count
        if self._parameters is None:
            self._parameters = 0
            if self.path:
                from ..gguf import GGUFFile

                f = GGUFFile(self.path)
                try:
                    self._parameters = sum(int(t.n_elements) for t in f.tensors.values())
                finally:
                    f.close()
        return self._parameters

    def details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": "gguf", "family": self.arch, "families": [self.arch],
                "parameter_size": human_number(self.parameters()),
                "quantization_level": quantization_level(self.metadata.get("general.file_type"))}

    def check_name(self, name: Any) -> str:
        """The model name of a request, if it names the served model; else _NotFound
        (or InvalidRequestError for none)."""
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("model is required", "model")
        if name.lower() not in self.names:
            raise _NotFound(f"model '{name}' not found (this server serves '{self.name}')")
        return name


def capabilities(model: Any) -> list[str]:
    """What the model can do, in ollama's words: completion (not an encoder), embedding (its
    file sets a pooling type), tools (its template takes them), thinking (its template has a
    thought block or channel)."""
    from ..chat.session import chat_of
    from ..chat.template import HARMONY

    from ..infill import InfillUnsupportedError, fim_ids

    if getattr(model.engine, "is_encoder", False):  # nomic-embed-text and the like: ollama lists embedding only
        return ["embedding"]
    out = ["completion"]
    try:
        fim_ids(model.tokenizer)
        out.append("insert")  # ollama's word for fill-in-the-middle (generate's suffix)
    except (InfillUnsupportedError, AttributeError):
        pass
    md = getattr(model, "metadata", None) or {}
    if f"{md.get('general.architecture')}.pooling_type" in md:  # a model made for embeddings, as ollama reads it
        out.append("embedding")
    try:
        chat = chat_of(model)
        if chat.tools_placement != "instructions":
            out.append("tools")
        if chat.think_markers is not None or chat.call_format == HARMONY:
            out.append("thinking")
    except (TypeError, ValueError):  # a template that does not render: completion only
        pass
    return out


# ---- requests -----------------------------------------------------------------------------------------
def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{name}: expected a boolean, got {type(value).__name__}", name)
    return value


def _check_keep_alive(value: Any) -> None:
    """``keep_alive`` ("5m", 300, -1): the model stays loaded whatever it says."""
    if value is not None and (not isinstance(value, (str, int, float)) or isinstance(value, bool)):
        raise InvalidRequestError("keep_alive: expected a duration such as \"5m\" or a number of seconds",
                                  "keep_alive")


def sampling(server: "_Server", options: Any) -> dict[str, Any]:
    """The api keywords of ollama's ``options`` over ollama's defaults and the server's
    own (``--temp``, ...): sampler settings, ``max_tokens`` and ``stop``."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise InvalidRequestError("options: expected an object", "options")
    unknown = sorted(set(options) - _KNOWN_OPTIONS)
    if unknown:
        raise InvalidRequestError(f"options: unknown option {unknown[0]!r}", unknown[0])
    # JSON has one number type: ollama takes 40.0 for an integer option, as Go's decoding of its map does
    options = {k: int(v) if k in _INT_OPTIONS and isinstance(v, float) and v.is_integer() else v
               for k, v in options.items()}
    for name, off in _OFF_SWITCHES.items():
        value = options.get(name)
        if value is not None and (not api._is_number(value) or float(value) != off):
            raise UnsupportedOptionError(f"options.{name}: this server has no such sampler; only {off:g} (off) "
                                         f"is accepted, got {value!r}", name)
    out: dict[str, Any] = dict(DEFAULT_OPTIONS)
    for name, value in server.sampling_defaults.items():  # llama-server's names, the same as ollama's here
        if name in _SAMPLING_OPTIONS:
            out[name] = value
        elif name == "n_predict":
            out["max_tokens"] = None if value == -1 else value
    for name in _SAMPLING_OPTIONS:
        if options.get(name) is not None:
            out[name] = options[name]
    predict = options.get("num_predict")
    if predict is not None:
        # -1: no limit, -2: until the context is full; 0 is no limit too (the runner counts only > 0)
        predict = api._check_optional_int("num_predict", predict, -2)
        out["max_tokens"] = predict if predict and predict > 0 else None
    n_ctx = options.get("num_ctx")
    if n_ctx is not None:
        n_ctx = api._check_optional_int("num_ctx", n_ctx, 1)
        slot = int(server.scheduler.n_ctx)
        if n_ctx is not None and n_ctx > slot:
            raise UnsupportedOptionError(f"options.num_ctx: {n_ctx} exceeds this server's context of {slot} tokens "
                                         "per slot (start infer serve with a larger --ctx-size)", "num_ctx")
    if options.get("stop") is not None:
        out["stop"] = options["stop"]
    return out


def _format(value: Any) -> Optional[dict[str, Any]]:
    """ollama's ``format`` as an OpenAI ``response_format``: "json" any JSON object, an
    object a JSON Schema, "" or null none."""
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value}}
    raise InvalidRequestError('format: expected "json" or a JSON schema object', "format")


def _think(value: Any, model: Any, name: str) -> Optional[str]:
    """ollama's ``think`` as the api's ``reasoning_effort``: true the template's default,
    false "none", a level ("low", "medium", "high") that level; true for a model
    that cannot think is a 400, as in ollama."""
    if value is None or value is False:
        return None if value is None else "none"
    if value is not True and value not in ("low", "medium", "high"):
        raise InvalidRequestError('think: expected true, false, "low", "medium" or "high"', "think")
    if "thinking" not in capabilities(model):
        raise InvalidRequestError(f'"{name}" does not support thinking', "think")
    return None if value is True else str(value)


def _logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    wanted = _flag(body, "logprobs", False)
    top = api._check_optional_int("top_logprobs", body.get("top_logprobs"), 0, 20)
    return {"logprobs": True, "top_logprobs": top or 0} if wanted else {}


def _no_images(images: Any, where: str) -> None:
    if images:
        raise UnsupportedOptionError(f"{where}: images are not supported: infer runs a model's text part only "
                                     "(a vision model's mmproj file is not loaded)", "images")


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """ollama's messages as OpenAI's: ``thinking`` as ``reasoning_content``, tool calls
    with their arguments as JSON text and an id each, a tool result's ``tool_name`` as
    the id of the latest call of that name."""
    if not isinstance(messages, list):
        raise InvalidRequestError("messages: expected a list of message objects", "messages")
    out: list[dict[str, Any]] = []
    ids: dict[str, str] = {}  # function name -> id of its latest call
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequestError(f"messages[{i}]: expected an object, got {type(m).__name__}", "messages")
        unknown = sorted(set(m) - _MESSAGE_FIELDS)
        if unknown:
            raise InvalidRequestError(f"messages[{i}]: unknown field {unknown[0]!r}", "messages")
        _no_images(m.get("images"), f"messages[{i}].images")
        content = m.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise InvalidRequestError(f"messages[{i}].content: expected a string", "messages")
        message: dict[str, Any] = {"role": m.get("role"), "content": content}
        thinking = m.get("thinking")
        if thinking:
            if not isinstance(thinking, str):
                raise InvalidRequestError(f"messages[{i}].thinking: expected a string", "messages")
            message["reasoning_content"] = thinking
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise InvalidRequestError(f"messages[{i}].tool_calls: expected a list", "messages")
            message["tool_calls"] = []
            for j, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise InvalidRequestError(f"messages[{i}].tool_calls[{j}]: expected {{'function': {{'name': "
                                              "..., 'arguments': {...}}}}", "messages")
                arguments = function.get("arguments") or {}
                if not isinstance(arguments, (dict, str)):
                    raise InvalidRequestError(f"messages[{i}].tool_calls[{j}].function.arguments: expected an "
                                              "object", "messages")
                call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{i}_{j}"
                ids[function["name"]] = call_id
                message["tool_calls"].append({
                    "id": call_id, "type": "function",
                    "function": {"name": function["name"], "arguments": arguments if isinstance(arguments, str)
                                 else json.dumps(arguments, ensure_ascii=False)}})
        if m.get("role") == "tool":
            name = m.get("tool_name")
            if name is not None and not isinstance(name, str):
                raise InvalidRequestError(f"messages[{i}].tool_name: expected a string", "messages")
            call_id = m.get("tool_call_id") or (ids.get(name) if name else None)
            if name:
                message["name"] = name
            if call_id:
                message["tool_call_id"] = call_id
        out.append(message)
    return out


def _tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool calls as ollama's: arguments as an object."""
    out = []
    for j, call in enumerate(calls):
        function = call["function"]
        try:
            arguments = json.loads(function["arguments"]) if function.get("arguments") else {}
        except json.JSONDecodeError:
            arguments = {"arguments": function["arguments"]}  # kept, not dropped
        out.append({"id": call.get("id"), "function": {"index": j, "name": function["name"],
                                                        "arguments": arguments}})
    return out


# ---- running a request ----------------------------------------------------------------------------------
class _Plan:
    """One ollama request as the api call it becomes, and how to shape its answer."""

    def __init__(self, name: str, kind: str, call: Callable[..., Any], keywords: dict[str, Any],
                 context_of: Optional[Callable[[str, str], list[int]]] = None) -> None:
        self.name = name            # the model name the request gave (echoed, as ollama does)
        self.kind = kind            # "chat" or "generate"
        self.call = call            # api.create_chat_completion or api.create_completion
        self.keywords = keywords
        #: generate: the ``context`` tokens of a reply's text and thinking (None: none returned)
        self.context_of = context_of
        self.started = time.monotonic()


def run_plan(model: Any, *, plan: _Plan, stream: bool, context: Any = None, model_name: Optional[str] = None) -> Any:
    """``plan`` on a slot (``context``): ollama's final object, or with ``stream`` an
    iterator of its objects, the last one the final one."""
    chunks = plan.call(model, stream=True, stream_options={"include_usage": True}, context=context,
                       model_name=model_name, **plan.keywords)  # the options fail here, early
    objects = _objects(plan, chunks)
    if stream:
        return objects
    content: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    logprobs: list[dict[str, Any]] = []
    final: dict[str, Any] = {}
    for obj in objects:
        part = obj.get("message", obj)
        content.append(part.get("content", part.get("response", "")) or "")
        thinking.append(part.get("thinking", "") or "")
        calls += part.get("tool_calls", [])
        logprobs += obj.get("logprobs", [])
        final = obj
    key = "message" if plan.kind == "chat" else "response"
    if plan.kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if any(thinking):
            message["thinking"] = "".join(thinking)
        if calls:
            message["tool_calls"] = calls
        final[key] = message
    else:
        final[key] = "".join(content)
        if any(thinking):
            final["thinking"] = "".join(thinking)
    if logprobs:
        final["logprobs"] = logprobs
    return final


def _objects(plan: _Plan, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The OpenAI chunks of a streamed call as ollama's objects."""
    first_at: Optional[float] = None
    finish = "stop"
    usage: dict[str, Any] = {}
    texts: list[str] = []
    thoughts: list[str] = []

    def head() -> dict[str, Any]:
        return {"model": plan.name, "created_at": _now()}

    def piece(content: str = "", thinking: str = "", calls: Optional[list[dict[str, Any]]] = None,
              logprobs: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
        obj = head()
        if plan.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            obj["message"] = message
        else:
            obj["response"] = content
            if thinking:
                obj["thinking"] = thinking
        obj["done"] = False
        if logprobs:
            obj["logprobs"] = logprobs
        return obj

    try:
        for chunk in chunks:
            if "usage" in chunk and not chunk.get("choices"):
                usage = chunk["usage"]
                continue
            for choice in chunk.get("choices", []):
                if first_at is None:
                    first_at = time.monotonic()
                if choice.get("finish_reason"):
                    finish = "length" if choice["finish_reason"] == "length" else "stop"
                entries = (choice.get("logprobs") or {}).get("content") if plan.kind == "chat" else None
                delta = choice.get("delta")
                if delta is None:  # a completion's chunk
                    text = choice.get("text") or ""
                    texts.append(text)
                    if text:
                        yield piece(text)
                    continue
                calls = _tool_calls(delta["tool_calls"]) if delta.get("tool_calls") else None
                content = delta.get("content") or ""
                thinking = delta.get("reasoning_content") or ""
                texts.append(content)
                thoughts.append(thinking)
                if content or thinking or calls or entries:
                    yield piece(content, thinking, calls, entries)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    ended = time.monotonic()
    first_at = first_at or ended
    final = head()
    if plan.kind == "chat":
        final["message"] = {"role": "assistant", "content": ""}
    else:
        final["response"] = ""
    final.update(done=True, done_reason=finish)
    if plan.kind == "generate" and plan.context_of is not None:
        final["context"] = plan.context_of("".join(texts), "".join(thoughts))
    final.update(total_duration=_ns(ended - plan.started), load_duration=0,
                 prompt_eval_count=int(usage.get("prompt_tokens", 0)),
                 prompt_eval_duration=_ns(first_at - plan.started),
                 eval_count=int(usage.get("completion_tokens", 0)), eval_duration=_ns(ended - first_at))
    yield final


def _checked_name(facts: "_ModelFacts", body: Mapping[str, Any], fields: frozenset[str]) -> str:
    """The model name of a request whose fields, ``keep_alive`` and flags are checked."""
    _check_fields(body, fields)
    name = facts.check_name(body.get("model"))
    _check_keep_alive(body.get("keep_alive"))
    for flag in ("truncate", "shift"):  # ollama's defaults, true: nothing to do with them here
        _flag(body, flag, True)
    return name


def _chat_plan(server: "_Server", facts: _ModelFacts, body: dict[str, Any]) -> _Plan:
    name = _checked_name(facts, body, _CHAT_FIELDS)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequestError("tools: expected a list of tool objects", "tools")
    keywords = dict(sampling(server, body.get("options")), messages=chat_messages(body.get("messages")),
                    tools=[dict(t, type=t.get("type") or "function") if isinstance(t, dict) else t
                           for t in tools] if tools else None,
                    response_format=_format(body.get("format")),
                    reasoning_effort=_think(body.get("think"), server.model, name), **_logprobs(body))
    if server.chat_template_kwargs:
        keywords["chat_template_kwargs"] = dict(server.chat_template_kwargs)
    return _Plan(name, "chat", api.create_chat_completion, keywords)


def _generate_plan(server: "_Server", facts: _ModelFacts, body: dict[str, Any]) -> _Plan:
    from ..chat.session import chat_of

    name = _checked_name(facts, body, _GENERATE_FIELDS)
    model = server.model
    prompt = body.get("prompt") or ""
    system = body.get("system") or ""
    template = body.get("template") or ""
    context = body.get("context")
    for field, value in (("prompt", prompt), ("system", system), ("template", template)):
        if not isinstance(value, str):
            raise InvalidRequestError(f"{field}: expected a string", field)
    raw = _flag(body, "raw", False)
    _no_images(body.get("images"), "images")
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise InvalidRequestError("suffix: expected a string", "suffix")
    if suffix:
        return _insert_plan(server, name, body, prompt, suffix)
    if raw and (template or system or context):
        raise InvalidRequestError("raw mode does not support template, system, or context", "raw")
    if template:
        if not _PROMPT_ONLY_TEMPLATE.match(template):
            raise UnsupportedOptionError("template: only the model's own chat template is supported (or "
                                         "\"{{ .Prompt }}\", the same as raw); leave it out", "template")
        if system or context:
            raise UnsupportedOptionError("template: \"{{ .Prompt }}\" takes no system or context", "template")
        raw = True
    vocab = int(model.engine.vocab_size)
    if context is not None and (not isinstance(context, list) or not all(
            api._is_int(t) and 0 <= t < vocab for t in context)):
        raise InvalidRequestError(f"context: expected a list of token ids in [0, {vocab})", "context")
    options = sampling(server, body.get("options"))
    response_format = _format(body.get("format"))
    effort = _think(body.get("think"), model, name)
    logprobs = _logprobs(body)
    completion_options = dict(options, max_tokens=options.get("max_tokens"))
    if response_format is not None:  # a completion takes llama-server's json_schema
        schema = response_format.get("json_schema", {}).get("schema", {"type": "object"})
        completion_options["json_schema"] = schema
    if logprobs:
        raise UnsupportedOptionError("logprobs: only /api/chat reports log-probabilities here", "logprobs")
    if raw:
        return _Plan(name, "generate", api.create_completion, dict(completion_options, prompt=prompt))
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    chat = chat_of(model)
    kwargs = dict(server.chat_template_kwargs)
    kwargs = api._with_reasoning_effort(kwargs, effort) or {}
    rendered = chat.render(messages, True, None, **kwargs)
    tok = model.tokenizer

    def context_of(reply: str, thinking: str) -> list[int]:
        # ollama tokenizes the prompt and the reply's raw text: thinking goes back in its markers
        if thinking and chat.think_markers:
            reply = chat.think_markers[0] + thinking + chat.think_markers[1] + reply
        return list(tok.encode(rendered + reply, add_special=True, parse_special=True))

    if context:
        # ollama puts the context's text before the new prompt's; the ids go there as they are
        text = rendered[len(chat.bos_token):] if chat.bos_token and rendered.startswith(chat.bos_token) \
            else rendered
        ids = list(context) + list(tok.encode(text, add_special=False, parse_special=True))
        before = list(context)

        def continued(reply: str, thinking: str) -> list[int]:
            return before + list(tok.encode(text + reply, add_special=False, parse_special=True))

        return _Plan(name, "generate", api.create_completion, dict(completion_options, prompt=ids), continued)
    keywords = dict(options, messages=messages, response_format=response_format, reasoning_effort=effort)
    if server.chat_template_kwargs:
        keywords["chat_template_kwargs"] = dict(server.chat_template_kwargs)
    return _Plan(name, "generate", api.create_chat_completion, keywords, context_of)


def _insert_plan(server: "_Server", name: str, body: dict[str, Any], prompt: str, suffix: str) -> _Plan:
    """/api/generate with a ``suffix``: the code between ``prompt`` and it, in the plain
    fill-in-the-middle layout of ollama's templates for code models (`infill.prefix_suffix_middle`)."""
    from ..infill import InfillUnsupportedError, prefix_suffix_middle

    for field in ("system", "template", "context", "raw", "format", "think"):
        if body.get(field) not in (None, "", False):
            raise UnsupportedOptionError(f"{field}: not taken with suffix (fill-in-the-middle takes the prompt, the "
                                         "suffix and the options)", field)
    if body.get("images"):
        _no_images(body.get("images"), "images")
    tok = server.model.tokenizer
    try:
        ids = prefix_suffix_middle(tok, tok.encode(prompt, add_special=False, parse_special=False),
                                   tok.encode(suffix, add_special=False, parse_special=False))
    except InfillUnsupportedError as exc:
        raise UnsupportedOptionError(f"suffix: {name} does not support insert ({exc})", "suffix") from None
    options = sampling(server, body.get("options"))
    return _Plan(name, "generate", api.create_completion, dict(options, max_tokens=options.get("max_tokens"),
                                                               prompt=ids))


# ---- the routes -------------------------------------------------------------------------------------------
def routes(server: "_Server") -> list[Route]:
    """ollama's endpoints over ``server`` (the app's `_Server`)."""
    from .app import _classify

    facts = _ModelFacts(server)
    model = server.model

    def failure(endpoint: str, exc: BaseException) -> JSONResponse:
        if isinstance(exc, _NotFound):
            status, body = 404, {"error": str(exc)}
        else:
            status, openai_body = _classify(exc)
            body = error_body(status, openai_body)
        server.metrics.count_request(endpoint, status)
        return JSONResponse(body, status_code=status)

    async def body_of(request: Request, endpoint: str) -> Any:
        body = await server.read_json(request, OLLAMA)
        if isinstance(body, Response):
            server.metrics.count_request(endpoint, body.status_code)
        return body

    async def inference(request: Request, endpoint: str,
                        planner: Callable[["_Server", _ModelFacts, dict[str, Any]], _Plan]) -> Response:
        body = await body_of(request, endpoint)
        if isinstance(body, Response):
            return body
        try:
            stream = _flag(body, "stream", True)
            empty = (not body.get("messages")) if endpoint == "/api/chat" else (not body.get("prompt"))
            if empty:  # ollama's "load the model" request (or, with keep_alive 0, "unload"): it stays loaded
                name = _checked_name(facts, body, _CHAT_FIELDS if endpoint == "/api/chat" else _GENERATE_FIELDS)
                reply: dict[str, Any] = {"model": name, "created_at": _now()}
                if endpoint == "/api/chat":
                    reply["message"] = {"role": "assistant", "content": ""}
                else:
                    reply["response"] = ""
                unload = body.get("keep_alive") in (0, "0", "0s", "0m")
                reply.update(done=True, done_reason="unload" if unload else "load")
                server.metrics.count_request(endpoint, 200)
                return JSONResponse(reply)
            plan = await asyncio.to_thread(planner, server, facts, body)  # renders and tokenizes: off the loop
        except Exception as exc:
            return failure(endpoint, exc)
        limit = plan.keywords.get("max_tokens")
        return await server.run_completion(request, endpoint, run_plan, {"plan": plan, "stream": stream},
                                           cache_prompt=True, reply_limit=limit, dialect=OLLAMA)

    async def chat(request: Request) -> Response:
        return await inference(request, "/api/chat", _chat_plan)

    async def generate(request: Request) -> Response:
        return await inference(request, "/api/generate", _generate_plan)

    def embed_vectors(texts: list[str], truncate: bool, normalize: bool) -> tuple[list[list[float]], int]:
        """The embeddings of ``texts`` and their token count; a text longer than the
        model's context is cut to it (``truncate``) or refused."""
        import numpy as np

        from ..embeddings import tokenize_inputs

        try:
            encoded = tokenize_inputs(model, texts, name="input")
        except ValueError as exc:
            raise InvalidRequestError(f"input: {exc}", "input") from None
        limit = int(model.engine.max_seq_len)
        for i, ids in enumerate(encoded):
            if len(ids) > limit:
                if not truncate:
                    raise InvalidRequestError("the input length exceeds the context length", "input")
                encoded[i] = ids[:limit]
        vectors = np.asarray(model.embed(encoded, normalize=normalize), dtype=np.float64)
        return [[float(v) for v in vec] for vec in vectors], sum(len(ids) for ids in encoded)

    async def embed(request: Request) -> Response:
        endpoint = "/api/embed"
        started = time.monotonic()
        body = await body_of(request, endpoint)
        if isinstance(body, Response):
            return body
        try:
            name = _checked_name(facts, body, _EMBED_FIELDS)
            sampling(server, body.get("options"))
            given = body.get("input")
            texts = ([given] if given else []) if isinstance(given, str) else given
            if given is None:
                texts = []
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise InvalidRequestError("invalid input type", "input")
            if any(not t for t in texts):
                raise InvalidRequestError("input: an empty text has no embedding", "input")
            dimensions = api._check_optional_int("dimensions", body.get("dimensions"), 0)
            vectors, count = await asyncio.to_thread(embed_vectors, texts, _flag(body, "truncate", True), True) \
                if texts else ([], 0)
            if dimensions and vectors and dimensions < len(vectors[0]):  # cut and normalized again, as ollama does
                import numpy as np

                cut = np.asarray(vectors)[:, :dimensions]
                cut /= np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)
                vectors = cut.tolist()
        except Exception as exc:
            return failure(endpoint, exc)
        server.metrics.count_request(endpoint, 200)
        return JSONResponse({"model": name, "embeddings": vectors, "total_duration": _ns(time.monotonic() - started),
                             "load_duration": 0, "prompt_eval_count": count})

    async def embeddings(request: Request) -> Response:
        endpoint = "/api/embeddings"
        body = await body_of(request, endpoint)
        if isinstance(body, Response):
            return body
        try:
            _checked_name(facts, body, _EMBEDDINGS_FIELDS)
            sampling(server, body.get("options"))
            prompt = body.get("prompt") or ""
            if not isinstance(prompt, str):
                raise InvalidRequestError("prompt: expected a string", "prompt")
            # the legacy endpoint's vector is not normalized (ollama's EmbeddingsHandler)
            vectors, _ = await asyncio.to_thread(embed_vectors, [prompt], False, False) if prompt else ([[]], 0)
        except Exception as exc:
            return failure(endpoint, exc)
        server.metrics.count_request(endpoint, 200)
        return JSONResponse({"embedding": vectors[0]})

    async def tags(request: Request) -> Response:
        details = await asyncio.to_thread(facts.details)
        return JSONResponse({"models": [{"name": facts.name, "model": facts.name, "modified_at": facts.modified_at,
                                         "size": facts.size, "digest": facts.digest, "details": details}]})

    async def ps(request: Request) -> Response:
        details = await asyncio.to_thread(facts.details)
        return JSONResponse({"models": [{"name": facts.name, "model": facts.name, "size": facts.size,
                                         "digest": facts.digest, "details": details, "expires_at": _NEVER,
                                         "size_vram": 0, "context_length": int(server.scheduler.n_ctx)}]})

    def show_info(body: dict[str, Any]) -> dict[str, Any]:
        from ..chat.session import chat_of

        _check_fields(body, _SHOW_FIELDS)
        facts.check_name(body.get("model") or body.get("name"))
        verbose = _flag(body, "verbose", False)
        info: dict[str, Any] = {}
        for key, value in facts.metadata.items():
            if key in ("general.name", "tokenizer.chat_template"):  # as ollama leaves them out
                continue
            is_array = not isinstance(value, (str, bytes)) and hasattr(value, "__len__")
            if is_array and len(value) > 5 and not verbose:
                info[key] = []  # long arrays (the vocabulary) only with verbose, as ollama
            else:
                info[key] = _json_value(value)
        info.setdefault("general.parameter_count", facts.parameters())
        chat = chat_of(model)
        return {"license": str(facts.metadata.get("general.license", "")), "modelfile": f"# infer serve\nFROM "
                f"{facts.path or facts.served}\n", "parameters": "", "template": chat.source,
                "details": facts.details(), "model_info": info, "capabilities": capabilities(model),
                "modified_at": facts.modified_at}

    async def show(request: Request) -> Response:
        body = await body_of(request, "/api/show")
        if isinstance(body, Response):
            return body
        try:
            result = await asyncio.to_thread(show_info, body)
        except Exception as exc:
            return failure("/api/show", exc)
        return JSONResponse(result)

    async def manage(request: Request) -> Response:
        path = request.url.path
        return _error(400, f"{path} is not available: infer serves the one model file given at startup "
                           f"('{facts.name}'); to serve another, restart infer serve with --model PATH")

    async def version(request: Request) -> Response:
        return JSONResponse({"version": OLLAMA_API_VERSION})

    async def root(request: Request) -> Response:
        return PlainTextResponse("Ollama is running")

    async def elsewhere(request: Request) -> Response:
        """Any other /api path or method, in ollama's error shape."""
        path = request.url.path
        if any(route.path == path for route in known):
            return _error(405, f"method {request.method} not allowed on {path}")
        return _error(404, f"no route {request.method} {path}")

    known = [
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/api/version", version, methods=["GET", "HEAD"]),
        Route("/api/tags", tags, methods=["GET", "HEAD"]),
        Route("/api/ps", ps, methods=["GET"]),
        Route("/api/show", show, methods=["POST"]),
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/generate", generate, methods=["POST"]),
        Route("/api/embed", embed, methods=["POST"]),
        Route("/api/embeddings", embeddings, methods=["POST"]),
        Route("/api/pull", manage, methods=["POST"]),
        Route("/api/push", manage, methods=["POST"]),
        Route("/api/create", manage, methods=["POST"]),
        Route("/api/copy", manage, methods=["POST"]),
        Route("/api/delete", manage, methods=["DELETE"]),
    ]
    every = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    return known + [Route("/api/{rest:path}", elsewhere, methods=every)]  # last: it matches every /api path
