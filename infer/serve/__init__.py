"""``infer serve``: an OpenAI-compatible HTTP server with continuous batching.

* `scheduler`: N slots decoded together by one thread (`Scheduler`, `SlotContext`);
* `app`: the ASGI app (Starlette) over a model and a scheduler (`create_app`);
* `metrics`: the Prometheus text of /metrics;
* `ray_deployment`: the same app as a Ray Serve deployment, one model per replica.

See docs/serve.md.
"""
