"""``infer serve`` on Ray Serve: the same ASGI app, one model per replica.

Ray Serve's HTTP proxy spreads the requests over the replicas; each replica
loads the model itself and runs its own scheduler (``parallel`` slots).  Three
ways to start it (docs/serve.md):

* ``infer serve --ray --replicas 2 --threads 1`` (a local Ray, or the cluster
  that ``RAY_ADDRESS`` names);
* ``serve run infer.serve.ray_deployment:app_builder replicas=2 threads=1``;
* from Python: ``serve.run(infer.serve.ray_deployment.build(replicas=2))``.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

__all__ = ["app_builder", "build", "run_cli"]


def _replica_class() -> Any:
    from ray import serve

    class InferReplica:
        """One replica: loads the model when Ray builds its ASGI app."""

        def __init__(self, model_path: Optional[str], n_threads: Optional[int], options: dict[str, Any],
                     chat_template: Optional[str] = None) -> None:
            self._model_path = model_path
            self._n_threads = n_threads
            self._options = options
            self._chat_template = chat_template

        def __serve_build_asgi_app__(self) -> Any:
            from .. import loader
            from .app import create_app

            self.model = loader.load(self._model_path, n_threads=self._n_threads,
                                     chat_template=self._chat_template)
            return create_app(self.model, **self._options)

    return serve.ingress()(InferReplica)


def build(model: Optional[str] = None, *, replicas: int = 1, threads: int = 1,
          chat_template: Optional[str] = None, **options: Any) -> Any:
    """A Ray Serve application of ``replicas`` replicas, each one model of
    ``threads`` kernel threads (and as many Ray CPUs), with ``chat_template`` in
    place of the file's if given (`infer.load`'s); ``options`` go to
    `infer.serve.app.create_app` (``parallel``, ``ctx_size``, ``api_key``...)."""
    from ray import serve

    if replicas < 1 or threads < 1:
        raise ValueError(f"replicas and threads: must be >= 1, got {replicas} and {threads}")
    deployment = serve.deployment(_replica_class(), name="infer", num_replicas=replicas,
                                  ray_actor_options={"num_cpus": threads})
    return deployment.bind(model, threads, options, chat_template)


_INT_OPTIONS = ("replicas", "threads", "parallel", "ctx_size", "max_queue", "prefill_chunk")


def app_builder(args: dict[str, str]) -> Any:
    """For ``serve run infer.serve.ray_deployment:app_builder key=value ...``: the
    keys are `build`'s (``model``, ``replicas``, ``threads``) and create_app's."""
    kwargs: dict[str, Any] = {}
    for key, value in args.items():
        kwargs[key] = int(value) if key in _INT_OPTIONS else value
    return build(**kwargs)


def run_cli(args: Any, options: dict[str, Any], chat_template: Optional[str] = None) -> int:
    """``infer serve --ray``: deploy, print where, and wait for Ctrl-C."""
    try:
        import ray
        from ray import serve
    except ImportError:
        from ..cli.common import CLIError

        raise CLIError('infer serve --ray needs the ray extra: pip install "infer-llm[ray]"') from None
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False,
             logging_level="WARNING")
    serve.start(http_options={"host": args.host, "port": args.port})
    threads = args.threads or 1
    serve.run(build(args.model, replicas=args.replicas, threads=threads, chat_template=chat_template, **options),
              name="infer",
              route_prefix="/")
    print(f"infer serve: Ray Serve, {args.replicas} replicas x {threads} threads, "
          f"{options['parallel']} slots each, on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
    return 0
