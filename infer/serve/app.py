"""The ASGI app of ``infer serve``: OpenAI's endpoints over a `Scheduler`.

Each completion request runs `infer.api` in a greenlet of its own on the event
loop's thread (`greenlets`), over a `SlotContext` that pauses the greenlet
where it would wait for the scheduler.  What it produces goes to the response
through an asyncio queue, so a slow client never holds up the decode steps of
the others.

llama-server's own endpoints (``/completion``, ``/tokenize``, ``/props``...) are in
`llama_server`; its completions run through `_Server.run_completion` as OpenAI's do.

Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``
(llama-server's on its endpoints, `Dialect`):
400 for a bad request (bad JSON, an unknown field, a wrong type, a prompt or
``max_tokens`` beyond the context, an option not supported), 401 for a missing
or wrong API key, 503 with ``Retry-After`` when the queue is full or the server
is stopping, 500 for a fault of the server (logged; the other requests go on).

Stopping (`_Server.stop_soon`, which ``infer serve`` calls on Ctrl-C or
SIGTERM): the requests waiting for a slot and any new ones get 503 at once, the
running ones get ``shutdown_grace`` seconds to finish, then end with an error.
"""
from __future__ import annotations

import asyncio
import hmac
import inspect
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import greenlet
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .. import api
from .greenlets import GreenletWaits, Hub
from .metrics import Metrics
from .scheduler import Cancelled, QueueFull, Scheduler, Stopping

__all__ = ["create_app"]

log = logging.getLogger("infer.serve")

#: the context of a slot when none is given, tokens (llama-server's default too)
DEFAULT_CTX = 4096
#: seconds the running requests get to finish when the server stops
SHUTDOWN_GRACE = 5.0
#: the largest request body read, bytes
MAX_BODY = 16 << 20
#: seconds between two checks that a waiting client is still there
_POLL = 0.25
#: paths answered without the API key (load balancers probe them)
_PUBLIC = ("/health", "/v1/health")
#: an HTTP status for "the client closed the request" (no standard one; nginx's)
_CLIENT_GONE = 499


def error_body(message: str, kind: str = "invalid_request_error", param: Optional[str] = None,
               code: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _retry_headers(status: int) -> Optional[dict[str, str]]:
    return {"Retry-After": "1"} if status == 503 else None


def _error_response(status: int, message: str, kind: str = "invalid_request_error",
                    param: Optional[str] = None, code: Optional[str] = None,
                    headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param, code), status_code=status, headers=headers)


def _classify(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The HTTP status and error body of an exception raised by a request."""
    if isinstance(exc, api.InvalidRequestError):
        return 400, error_body(str(exc), param=exc.param, code=exc.code)
    if isinstance(exc, Stopping):  # another replica can take it: 503 asks the client to retry
        return 503, error_body(f"{exc}; retry the request", "server_busy", code="server_stopping")
    if isinstance(exc, Cancelled):
        return _CLIENT_GONE, error_body(str(exc), "cancelled")
    if isinstance(exc, (TypeError, ValueError)):  # ChatTemplateError, a message the template refuses
        return 400, error_body(str(exc))
    log.error("request failed", exc_info=exc)
    return 500, error_body(f"internal error: {type(exc).__name__}: {exc}", "server_error")


@dataclass(frozen=True)
class Dialect:
    """What differs between the endpoint families sharing `_Server.run_completion`:
    the shape of their errors and how their streams end."""

    #: the body of an error, from its status and OpenAI-shaped body (`_classify`'s)
    error_body: Callable[[int, dict[str, Any]], dict[str, Any]]
    #: the data of the event after the last chunk (OpenAI's ``[DONE]``), None for none
    stream_end: Optional[str]
    #: the usage of a result or chunk, counted in /metrics (None: it has none)
    usage: Callable[[Any], Optional[dict[str, Any]]]
    #: the response of a stream from its queue of items and its slot handle (None:
    #: server-sent events; ollama's endpoints write one JSON object a line)
    stream_response: Optional[Callable[[Any, Any], Response]] = None
    #: the whole server-sent event of a chunk or of an error body, for endpoints whose
    #: events are named (``event: ...``); None: OpenAI's data-only events
    event: Optional[Callable[[Any], bytes]] = None


OPENAI = Dialect(error_body=lambda status, body: body, stream_end="[DONE]", usage=lambda r: r.get("usage"))


class _BearerAuth:
    """Refuses requests without ``Authorization: Bearer <key>`` (ASGI middleware)."""

    def __init__(self, app: Any, key: str, dialects: Optional[dict[str, Dialect]] = None) -> None:
        self.app = app
        self.expected = key.encode()
        #: the error shape of each path not in OpenAI's (llama-server's endpoints)
        self.dialects = dialects or {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in _PUBLIC and scope["method"] != "OPTIONS":
            headers = dict(scope["headers"])
            scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
            # the scheme is case-insensitive (RFC 7235, 2.1); the key is not.  Anthropic's
            # clients send the key as x-api-key: accepted too, as llama-server does.
            if not ((hmac.compare_digest(given, self.expected) and scheme.lower() == b"bearer")
                    or hmac.compare_digest(headers.get(b"x-api-key", b""), self.expected)):
                dialect = self.dialects.get(scope["path"], OPENAI)
                body = error_body("invalid or missing API key (Authorization: Bearer ..., or x-api-key)",
                                  code="invalid_api_key")
                response = JSONResponse(dialect.error_body(401, body), status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _accepted_fields(call: Callable[..., Any]) -> frozenset[str]:
    """The body fields an endpoint takes: its api function's keywords."""
    internal = {"model", "context", "model_name"}
    return frozenset(name for name, p in inspect.signature(call).parameters.items()
                     if name not in internal and p.kind is not inspect.Parameter.VAR_KEYWORD)


def _default_max_tokens(call: Callable[..., Any]) -> Optional[int]:
    """An endpoint's ``max_tokens`` when a request gives none (completions: 16, as OpenAI's)."""
    param = inspect.signature(call).parameters.get("max_tokens")
    default = None if param is None else param.default
    return default if isinstance(default, int) and not isinstance(default, bool) else None


class _Server:
    """The state the routes share: model, scheduler, metrics, names."""

    def __init__(self, model: Any, scheduler: Scheduler, model_name: str, shutdown_grace: float) -> None:
        self.model = model
        self.scheduler = scheduler
        self.model_name = model_name
        self.shutdown_grace = shutdown_grace
        self.metrics = Metrics()
        self.started = int(time.time())
        #: template variables every chat request gets unless it sets them (--chat-template-kwargs)
        self.chat_template_kwargs: dict[str, Any] = {}
        #: llama-server's request fields a request that omits them gets (the command line's
        #: --temp, --top-k, -n, ...): n_predict, temperature, top_k, top_p, min_p, seed, ...
        self.sampling_defaults: dict[str, Any] = {}
        self._loop_hub: Optional[Hub] = None
        #: the event loop serving the app (set at startup), and whether it is stopping
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.stopping = False

    # ---- stopping ------------------------------------------------------------------------
    def stop_soon(self) -> None:
        """Begin stopping (from any thread, or a signal handler): no more requests, and
        the running ones end after ``shutdown_grace`` seconds if they have not."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.scheduler.drain()
        # close() fails the running requests' next jobs with Stopping: a step at most
        asyncio.get_running_loop().call_later(self.shutdown_grace, self.scheduler.close)

    # ---- routes ------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        busy = self.scheduler.busy_slots
        return JSONResponse({"status": "ok", "slots_idle": self.scheduler.n_slots - busy,
                             "slots_processing": busy})

    def _model_entry(self) -> dict[str, Any]:
        engine = self.model.engine
        return {"id": self.model_name, "object": "model", "created": self.started, "owned_by": "infer",
                "meta": {"architecture": engine.architecture, "n_ctx_slot": self.scheduler.n_ctx,
                         "n_ctx_train": engine.max_seq_len, "n_vocab": engine.vocab_size}}

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_entry()]})

    async def model_info(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name != self.model_name:
            return _error_response(404, f"the model {name!r} does not exist (this server has "
                                        f"{self.model_name!r})", param="model", code="model_not_found")
        return JSONResponse(self._model_entry())

    async def metrics_text(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.render(self.scheduler),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    async def chat_completions(self, request: Request) -> Response:
        return await self._complete(request, "/v1/chat/completions", api.create_chat_completion, "messages")

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, "/v1/completions", api.create_completion, "prompt")

    async def embeddings(self, request: Request) -> Response:
        """Embeddings run beside the decoding slots (their own context; the kernels'
        thread pool takes one parallel run at a time)."""
        parsed = await self._parse(request, api.create_embedding, "input")
        if isinstance(parsed, Response):
            self.metrics.count_request("/v1/embeddings", parsed.status_code)
            return parsed
        body = parsed[0]
        try:
            result = await asyncio.to_thread(api.create_embedding, self.model, model_name=self.model_name, **body)
        except BaseException as exc:
            status, error = _classify(exc)
            self.metrics.count_request("/v1/embeddings", status)
            return JSONResponse(error, status_code=status)
        self.metrics.count_request("/v1/embeddings", 200)
        return JSONResponse(result)

    def _hub(self) -> Hub:
        """The hub of the running event loop (the app may outlive a loop: tests)."""
        loop = asyncio.get_running_loop()
        if self._loop_hub is None or self._loop_hub.loop is not loop:
            self._loop_hub = Hub(loop)
        return self._loop_hub

    # ---- one completion request ----------------------------------------------------------
    async def _complete(self, request: Request, endpoint: str, call: Callable[..., Any], required: str) -> Response:
        parsed = await self._parse(request, call, required)
        if isinstance(parsed, Response):
            self.metrics.count_request(endpoint, parsed.status_code)
            return parsed
        body, wants_usage, cache_prompt = parsed
        given = body.get("chat_template_kwargs")
        if call is api.create_chat_completion and self.chat_template_kwargs and isinstance(given, (dict, type(None))):
            body["chat_template_kwargs"] = {**self.chat_template_kwargs, **(given or {})}  # llama-server's merge
        self.add_sampling_defaults(body, call)
        limit = body.get("max_tokens", body.get("max_completion_tokens", _default_max_tokens(call)))
        return await self.run_completion(request, endpoint, call, body, cache_prompt=cache_prompt,
                                         reply_limit=limit, wants_usage=wants_usage)

    def add_sampling_defaults(self, body: dict[str, Any], call: Callable[..., Any]) -> None:
        """The server's sampling defaults into ``body`` for the fields it omits (or sends as
        null), as llama-server's params_from_json_cmpl falls back to its command line's."""
        accepted = _accepted_fields(call)
        for name, value in self.sampling_defaults.items():
            if name == "n_predict":  # any of the reply-limit spellings is the request's own
                if any(body.get(k) is not None for k in ("n_predict", "max_tokens", "max_completion_tokens")):
                    continue
                name = "n_predict" if "n_predict" in accepted else "max_tokens"
            if name in accepted and body.get(name) is None:
                body[name] = value

    async def run_completion(self, request: Request, endpoint: str, call: Callable[..., Any], body: dict[str, Any],
                             *, cache_prompt: bool, reply_limit: Any, wants_usage: bool = False,
                             dialect: Dialect = OPENAI) -> Response:
        """``call(model, context=<a slot>, model_name=..., **body)`` in a greenlet of its own
        on a scheduler slot: its result as JSON, or its chunks as server-sent events
        (``body["stream"]``), its errors shaped by ``dialect``."""

        def error_response(status: int, error: dict[str, Any]) -> JSONResponse:
            return JSONResponse(dialect.error_body(status, error), status_code=status,
                                headers=_retry_headers(status))

        try:
            handle = self.scheduler.open()
        except QueueFull as exc:
            self.metrics.count_request(endpoint, 503)
            return error_response(503, error_body(str(exc), "server_busy", code="queue_full"))
        except Cancelled as exc:
            status, error = _classify(exc)
            self.metrics.count_request(endpoint, status)
            return error_response(status, error)
        handle.reuse_prefix = cache_prompt
        if isinstance(reply_limit, int) and not isinstance(reply_limit, bool):
            handle.reply_limit = reply_limit  # nothing is decoded ahead past the last token asked for
        stream = body.get("stream") is True
        items: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        put = items.put_nowait  # the request's greenlet runs on the loop's thread

        def work(waits: GreenletWaits) -> None:
            handle.waits = waits
            status = 200
            final: tuple[str, Any] = ("end", None)
            try:
                result = call(self.model, context=handle, model_name=self.model_name, **body)
                if not stream:
                    usage = dialect.usage(result)
                    if usage is not None:
                        self.metrics.count_usage(usage)
                    final = ("result", result)
                else:
                    try:
                        # The response starts with the first chunk (the prompt is in and the
                        # first token out): errors until then get a status of their own,
                        # such as 503 for a queued request when the server stops.
                        chunks = iter(result)
                        first = next(chunks, None)
                        put(("ok", None))
                        for chunk in itertools.chain(() if first is None else (first,), chunks):
                            usage = dialect.usage(chunk)
                            if usage is not None:
                                self.metrics.count_usage(usage)
                            put(("chunk", chunk))
                    finally:
                        result.close()
            except greenlet.GreenletExit:  # collected while paused: the loop is gone, no one to tell
                return
            except BaseException as exc:
                status, error = _classify(exc)
                final = ("error", (status, dialect.error_body(status, error)))
            handle.close()
            if handle.first_token_at is not None:
                self.metrics.observe_ttft(handle.first_token_at - handle.opened)
            # counted before the client can see the end, so /metrics agrees with it
            self.metrics.count_request(endpoint, status)
            put(final)

        self._hub().start(work)
        try:
            kind, value = await self._next_item(items, request)
        except Cancelled:
            handle.cancel()
            return Response(status_code=_CLIENT_GONE)
        if kind == "error":
            status, error = value
            return JSONResponse(error, status_code=status, headers=_retry_headers(status))
        if kind == "result":
            return JSONResponse(value)
        if dialect.stream_response is not None:
            return dialect.stream_response(items, handle)
        return _event_stream(items, handle, wants_usage, self.shutdown_grace, dialect.stream_end, dialect.event)

    @staticmethod
    async def read_json(request: Request, dialect: Dialect = OPENAI) -> Any:
        """The request's body, a JSON object, or an error response."""

        def error(status: int, message: str) -> JSONResponse:
            return JSONResponse(dialect.error_body(status, error_body(message)), status_code=status)

        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            return error(413, f"request body larger than {MAX_BODY} bytes")
        parts, size = [], 0
        async for part in request.stream():  # a chunked body has no length to check first
            size += len(part)
            if size > MAX_BODY:
                return error(413, f"request body larger than {MAX_BODY} bytes")
            parts.append(part)
        def no_constant(name: str) -> Any:  # Python reads NaN and Infinity; JSON (RFC 8259) has neither
            raise ValueError(f"{name} is not a JSON value")

        try:
            body = json.loads(b"".join(parts), parse_constant=no_constant)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            return error(400, f"the request body is not valid JSON: {exc}")
        except RecursionError:
            return error(400, "the request body is nested too deeply")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object")
        return body

    async def _parse(self, request: Request, call: Callable[..., Any],
                     required: str) -> Any:
        """(body as api keywords, whether the client asked for the usage chunk, whether
        to reuse the slot's cache), or an error response."""
        body = await self.read_json(request)
        if isinstance(body, Response):
            return body
        name = body.pop("model", None)
        if name is not None and not isinstance(name, str):
            return _error_response(400, "model: expected a string", param="model")
        # llama-server's field: False gives results independent of what the slot held
        # (prefill split differently can round differently)
        cache_prompt = body.pop("cache_prompt", True)
        if not isinstance(cache_prompt, bool):
            return _error_response(400, "cache_prompt: expected a boolean", param="cache_prompt")
        if call is not api.create_embedding:  # llama-server's own sampling fields, read as /completion reads them
            from . import llama_server

            try:
                llama_server.take_llama_fields(self.model, body)
            except api.InvalidRequestError as exc:
                status, error = _classify(exc)
                return JSONResponse(error, status_code=status)
        unknown = sorted(set(body) - _accepted_fields(call))
        if unknown:
            return _error_response(400, f"unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
        if required not in body:
            return _error_response(400, f"{required}: is required", param=required)
        # The server always asks for the usage chunk (for /metrics) and drops it
        # when the client did not; a malformed stream_options is left to the api's check.
        options = body.get("stream_options")
        wants_usage = isinstance(options, dict) and options.get("include_usage") is True
        if body.get("stream") is True and (options is None or (
                isinstance(options, dict) and isinstance(options.get("include_usage", False), bool))):
            body["stream_options"] = dict(options or {}, include_usage=True)
        return body, wants_usage, cache_prompt

    @staticmethod
    async def _next_item(items: "asyncio.Queue[tuple[str, Any]]", request: Request) -> tuple[str, Any]:
        """The request's next item; Cancelled if the client disconnects meanwhile."""
        while True:
            try:
                return await asyncio.wait_for(items.get(), timeout=_POLL)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    raise Cancelled("the client disconnected") from None


def _sse(payload: str) -> bytes:
    """One server-sent event carrying ``payload`` (JSON has no raw newlines: one data line)."""
    return b"data: " + payload.encode() + b"\r\n\r\n"


def _event_stream(items: "asyncio.Queue[tuple[str, Any]]", handle: Any, wants_usage: bool,
                  shutdown_grace: float, end: Optional[str],
                  encode: Optional[Callable[[Any], bytes]] = None) -> Response:
    from sse_starlette import EventSourceResponse

    async def events() -> Any:
        # Each body message carries every chunk already queued, not one each: when
        # the event loop falls behind the decode (many streams on few cores) it
        # catches up in fewer sends; a stream that keeps up still sends token by token.
        try:
            while True:
                batch = [await items.get()]
                while not items.empty():
                    batch.append(items.get_nowait())
                out = []
                for kind, value in batch:
                    if encode is not None and kind in ("chunk", "error"):
                        out.append(encode(value if kind == "chunk" else value[1]))
                        if kind == "error":
                            yield b"".join(out)
                            return
                        continue
                    if kind == "chunk":
                        if "usage" in value and not value["choices"] and not wants_usage:
                            continue
                        out.append(_sse(json.dumps(value, ensure_ascii=False)))
                    else:
                        if kind == "error":
                            out.append(_sse(json.dumps(value[1], ensure_ascii=False)))
                        elif end is not None:
                            out.append(_sse(end))
                        if out:
                            yield b"".join(out)
                        return
                if out:
                    yield b"".join(out)
        finally:
            handle.cancel()  # the client went away (a no-op once the request is over)

    # sse-starlette would end the stream as soon as uvicorn begins to stop; the
    # scheduler ends it instead (an error event after shutdown_grace), and this
    # longer grace only backs that up.
    return EventSourceResponse(events(), ping=15, shutdown_grace_period=shutdown_grace + 2)


def _warm_grammars(model: Any) -> None:
    """Build llguidance's view of the vocabulary now, in a thread (about 0.3 s for
    49k tokens), rather than in the first request that asks for a grammar, which
    runs on the event loop's thread and would hold up every stream meanwhile."""
    try:
        from ..structured import llg_tokenizer

        llg_tokenizer(model.tokenizer, int(model.engine.vocab_size))
    except Exception:  # llguidance is not installed, or this vocabulary does not suit it
        pass


#: the request fields a server may default (llama-server's command-line sampling flags)
SAMPLING_DEFAULT_FIELDS = ("n_predict", "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                           "presence_penalty", "frequency_penalty", "seed")


def _check_sampling_defaults(model: Any, defaults: Mapping[str, Any], n_ctx: int) -> dict[str, Any]:
    """``defaults`` if every request could run with them; else ValueError naming the field."""
    unknown = sorted(set(defaults) - set(SAMPLING_DEFAULT_FIELDS))
    if unknown:
        raise ValueError(f"sampling_defaults: {unknown[0]!r} is not one of {', '.join(SAMPLING_DEFAULT_FIELDS)}")
    try:
        api._sampler_options(model, defaults.get("temperature"), defaults.get("top_p"), defaults.get("top_k"),
                             defaults.get("min_p"), defaults.get("repeat_penalty"), defaults.get("presence_penalty"),
                             defaults.get("frequency_penalty"), None, defaults.get("seed"))
        api._check_optional_int("repeat_last_n", defaults.get("repeat_last_n"), -1)
        api._check_max_tokens(defaults.get("n_predict"), n_ctx)
    except api.InvalidRequestError as exc:
        raise ValueError(f"sampling_defaults: {exc}") from None
    return dict(defaults)


def create_app(model: Any, *, parallel: int = 1, ctx_size: Optional[int] = None, api_key: Optional[str] = None,
               cors_origins: Sequence[str] = (), max_queue: int = 64, prefill_chunk: int = 64,
               model_name: Optional[str] = None, shutdown_grace: float = SHUTDOWN_GRACE,
               slots_endpoint: bool = True, chat_template_kwargs: Optional[Mapping[str, Any]] = None,
               sampling_defaults: Optional[Mapping[str, Any]] = None) -> Starlette:
    """The ASGI app serving ``model`` with ``parallel`` slots of ``ctx_size`` tokens
    (None: 4096 or the model's trained context if shorter; 0: the trained context).

    ``api_key``: require ``Authorization: Bearer <api_key>`` (not on /health).
    ``cors_origins``: origins allowed by CORS (none: CORS off).  The app's
    ``state.scheduler`` is closed at shutdown.  ``shutdown_grace``: seconds the
    running requests get after ``app.state.server.stop_soon()``, which a server
    running the app should call when it begins to stop (``infer serve`` does, on
    Ctrl-C and SIGTERM); give the ASGI server a longer graceful-shutdown timeout.
    Beside OpenAI's endpoints the app answers llama-server's own (`llama_server`);
    ``slots_endpoint=False`` turns its ``GET /slots`` off, as ``--no-slots`` does.
    ``chat_template_kwargs``: template variables of every chat request, under the
    request's own ``chat_template_kwargs`` (llama-server's ``--chat-template-kwargs``).
    ``sampling_defaults``: the values of the fields in `SAMPLING_DEFAULT_FIELDS` (llama-server's
    names) a request that omits them runs with, on every completion endpoint, as
    llama-server's ``--temp``, ``--top-k``, ``-n``, ... (shown in ``GET /props``).
    """
    from . import anthropic_messages, llama_server, ollama, responses

    if not shutdown_grace >= 0:
        raise ValueError(f"shutdown_grace: must be >= 0, got {shutdown_grace!r}")
    trained = int(model.engine.max_seq_len)
    n_ctx = min(DEFAULT_CTX, trained) if ctx_size is None else (ctx_size or trained)
    scheduler = Scheduler(model, n_slots=parallel, n_ctx=n_ctx, max_queue=max_queue,
                          prefill_chunk=prefill_chunk)
    server = _Server(model, scheduler, api._model_name(model, model_name), float(shutdown_grace))
    server.chat_template_kwargs = dict(chat_template_kwargs or {})
    server.sampling_defaults = _check_sampling_defaults(model, sampling_defaults or {}, n_ctx)
    threading.Thread(target=_warm_grammars, args=(model,), name="infer-warm-grammars", daemon=True).start()
    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/health", server.health, methods=["GET"]),  # llama-server answers both
        Route("/metrics", server.metrics_text, methods=["GET"]),
    ]
    for prefix in ("/v1", ""):  # llama-server answers both spellings
        routes += [
            Route(f"{prefix}/models", server.models, methods=["GET"]),
            Route(f"{prefix}/models/{{name:path}}", server.model_info, methods=["GET"]),
            Route(f"{prefix}/chat/completions", server.chat_completions, methods=["POST"]),
            Route(f"{prefix}/embeddings", server.embeddings, methods=["POST"]),
        ]
    # /completions without /v1 is llama-server's own /completion, as there
    routes.append(Route("/v1/completions", server.completions, methods=["POST"]))
    llama_routes = llama_server.routes(server, slots_endpoint=slots_endpoint)
    routes += llama_routes
    ollama_routes = ollama.routes(server)  # ollama's /api/* and its "Ollama is running" probe
    routes += ollama_routes
    from . import rerank

    routes += rerank.routes(server)
    # OpenAI's Responses API and Anthropic's Messages API, translated onto chat completions
    routes += responses.routes(server)
    anthropic_routes = anthropic_messages.routes(server)
    routes += anthropic_routes
    middleware = []
    if cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["Authorization", "Content-Type", "X-Api-Key",
                                                    "Anthropic-Version", "Anthropic-Beta"]))
    if api_key:
        middleware.append(Middleware(_BearerAuth, key=api_key,
                                     dialects={**{route.path: llama_server.LLAMA for route in llama_routes},
                                               **{route.path: ollama.OLLAMA for route in ollama_routes},
                                               **{route.path: anthropic_messages.ANTHROPIC
                                                  for route in anthropic_routes}}))

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error_response(404, f"no route {request.method} {request.url.path}", code="not_found")

    async def bad_method(request: Request, exc: Exception) -> Response:
        return _error_response(405, f"method {request.method} not allowed on {request.url.path}")

    def lifespan(app: Starlette) -> Any:
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def span() -> Any:
            server.loop = asyncio.get_running_loop()
            yield
            scheduler.close()
        return span()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={404: not_found, 405: bad_method})
    app.state.scheduler = scheduler
    app.state.server = server
    return app
