"""`infer serve`: the OpenAI-compatible HTTP server (docs/serve.md)."""
from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from typing import Any

from .common import (CLIError, UsageError, add_llama_tuning_args, add_model_args, add_server_sampling_args,
                     add_template_args, chat_template_kwargs, load_model, read_chat_template, server_sampling_defaults)

_INSTALL_HINT = 'pip install "infer-llm[serve]"'


def _check(args: argparse.Namespace) -> None:
    for name in ("parallel", "replicas", "prefill_chunk"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.max_queue < 0:
        raise UsageError(f"--max-queue: must be >= 0, got {args.max_queue}")
    if args.ctx_size is not None and args.ctx_size < 0:
        raise UsageError(f"--ctx-size: must be >= 0, got {args.ctx_size}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: must be in [0, 65535], got {args.port}")
    server_sampling_defaults(args)  # a bad --top-p fails before the model loads


def app_options(args: argparse.Namespace) -> dict[str, Any]:
    """create_app's keywords from the command line (the Ray replicas take them too)."""
    return dict(parallel=args.parallel, ctx_size=args.ctx_size, api_key=args.api_key,
                cors_origins=args.cors or (), max_queue=args.max_queue, prefill_chunk=args.prefill_chunk,
                model_name=args.alias, slots_endpoint=args.slots, chat_template_kwargs=chat_template_kwargs(args),
                sampling_defaults=server_sampling_defaults(args))


def cmd_serve(args: argparse.Namespace) -> int:
    _check(args)
    if args.api_key is None:
        args.api_key = os.environ.get("INFER_API_KEY") or None
    if args.ray:
        from ..serve.ray_deployment import run_cli

        return run_cli(args, app_options(args), chat_template=read_chat_template(args))
    try:
        import uvicorn

        from ..serve.app import SHUTDOWN_GRACE, create_app
    except ImportError as exc:
        raise CLIError(f"infer serve needs the serve extra ({exc.name} is missing): {_INSTALL_HINT}") from None
    model = load_model(args, text_generation=False)
    app = create_app(model, **app_options(args))
    scheduler = app.state.scheduler
    name = app.state.server.model_name

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # Ctrl-C or SIGTERM: queued requests get 503 at once and the running ones
            # SHUTDOWN_GRACE seconds to finish.  A second Ctrl-C quits at once, without
            # the tracebacks of every request uvicorn would cancel.  os.write: safe in a
            # signal handler, which may interrupt a print.
            if self.should_exit and sig == signal.SIGINT:
                os.write(2, b"infer serve: stopped\n")
                os._exit(128 + sig)
            if not self.should_exit:
                os.write(2, f"infer serve: stopping; running requests get {SHUTDOWN_GRACE:g} s to finish "
                            f"(Ctrl-C again to stop at once)\n".encode())
            app.state.server.stop_soon()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning" if not args.verbose else "info",
                            access_log=bool(args.verbose), lifespan="on",
                            timeout_graceful_shutdown=int(SHUTDOWN_GRACE) + 5)  # the app ends its requests first
    server = Server(config)
    # Bound here, so that the startup line can name the port (--port 0 picks one).
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        sock.listen(2048)  # connections wait in the backlog until uvicorn accepts them
    except OSError as exc:
        model.close()
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    port = sock.getsockname()[1]
    auth = ", API key required" if args.api_key else ""
    print(f"infer serve: {name}, {scheduler.n_slots} slots x {scheduler.n_ctx} tokens{auth}, "
          f"on http://{args.host}:{port}/v1", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        model.close()
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with continuous batching")
    add_model_args(p)
    add_llama_tuning_args(p)
    add_template_args(p)
    add_server_sampling_args(p)  # the defaults of requests that omit a field, as llama-server's
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default: 8080; 0 = any free port)")
    p.add_argument("--parallel", "-np", type=int, default=1,
                   help="slots: requests decoded together in one batch (default: 1)")
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context window of each slot, tokens (default: 4096, or the model's trained context "
                        "if shorter; 0 = the trained context)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests that may wait for a slot; beyond it 503 (default: 64)")
    p.add_argument("--prefill-chunk", type=int, default=64,
                   help="prompt tokens prefilled between two decode steps (default: 64)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: $INFER_API_KEY, else none)")
    p.add_argument("--cors", action="append", metavar="ORIGIN", default=None,
                   help="allow this origin by CORS (repeatable; '*' for any); default: CORS off")
    p.add_argument("--alias", "-a", default=None, help="the model id the API reports (default: the file name)")
    # llama-server turns these on; here they are always on, so its command lines run unchanged
    p.add_argument("--metrics", action="store_true", help="accepted for llama-server compatibility: "
                   "GET /metrics is always on")
    p.add_argument("--embedding", "--embeddings", action="store_true", help="accepted for llama-server "
                   "compatibility: /v1/embeddings is always on")
    p.add_argument("--cont-batching", "-cb", action="store_true", help="accepted for llama-server "
                   "compatibility: batching is always continuous")
    p.add_argument("--slots", action=argparse.BooleanOptionalAction, default=True,
                   help="llama-server's GET /slots (default: on; --no-slots turns it off, as llama-server's)")
    p.add_argument("--ray", action="store_true", help="serve with Ray Serve (the ray extra) instead of uvicorn")
    p.add_argument("--replicas", type=int, default=1, help="with --ray: model replicas (default: 1)")
    p.set_defaults(func=cmd_serve)
