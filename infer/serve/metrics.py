"""The counters of /metrics, written in the Prometheus text format (version 0.0.4).

Names follow Prometheus' conventions: ``_total`` for counters, ``_seconds`` for
durations, a histogram as cumulative ``_bucket{le=...}`` lines with ``_sum``
and ``_count``.
"""
from __future__ import annotations

import bisect
import threading
from typing import Any

#: time-to-first-token histogram bounds, seconds
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """Request counters and the time-to-first-token histogram; the scheduler's
    own counters (tokens, steps, slots, queue) are read when rendering."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (endpoint, HTTP status) -> requests answered
        self.requests: dict[tuple[str, int], int] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0

    def count_request(self, endpoint: str, status: int) -> None:
        with self._lock:
            key = (endpoint, int(status))
            self.requests[key] = self.requests.get(key, 0) + 1

    def count_usage(self, usage: dict[str, Any]) -> None:
        with self._lock:
            self.prompt_tokens += int(usage.get("prompt_tokens", 0))
            self.completion_tokens += int(usage.get("completion_tokens", 0))

    def observe_ttft(self, seconds: float) -> None:
        with self._lock:
            self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, seconds)] += 1
            self.ttft_sum += seconds

    def render(self, scheduler: Any) -> str:
        stats = scheduler.stats
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                number = repr(float(value)) if isinstance(value, float) else str(value)
                lines.append(f"{name}{labels} {number}")

        with self._lock:
            requests = sorted(self.requests.items())
            counts, total = list(self.ttft_counts), self.ttft_sum
            prompt, completion = self.prompt_tokens, self.completion_tokens
        metric("infer_requests_total", "counter", "HTTP requests answered, by endpoint and status code",
               [(f'{{endpoint="{e}",status="{s}"}}', n) for (e, s), n in requests])
        metric("infer_requests_rejected_total", "counter", "requests refused with 503 (queue full)",
               [("", stats.rejected)])
        metric("infer_requests_cancelled_total", "counter", "requests whose client went away before the end",
               [("", stats.cancelled)])
        metric("infer_prompt_tokens_total", "counter", "prompt tokens of finished requests (usage)",
               [("", prompt)])
        metric("infer_completion_tokens_total", "counter", "generated tokens of finished requests (usage)",
               [("", completion)])
        metric("infer_tokens_decoded_total", "counter", "tokens sampled and decoded by the scheduler",
               [("", stats.decoded_tokens)])
        metric("infer_tokens_discarded_total", "counter", "tokens decoded ahead and taken back (the reply had ended)",
               [("", stats.discarded_tokens)])
        metric("infer_tokens_prefilled_total", "counter", "prompt tokens evaluated by the scheduler",
               [("", stats.prefilled_tokens)])
        metric("infer_tokens_cached_total", "counter", "prompt tokens found in a slot's KV cache",
               [("", stats.cached_tokens)])
        metric("infer_decode_steps_total", "counter", "batched decode steps run", [("", stats.decode_steps)])
        metric("infer_queue_depth", "gauge", "requests waiting for a slot", [("", scheduler.queue_depth)])
        metric("infer_slots_busy", "gauge", "slots serving a request", [("", scheduler.busy_slots)])
        metric("infer_slots", "gauge", "slots (--parallel)", [("", scheduler.n_slots)])
        cumulative = 0
        buckets = []
        for bound, n in zip(list(TTFT_BUCKETS) + [float("inf")], counts):
            cumulative += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            buckets.append((f'_bucket{{le="{le}"}}', cumulative))
        lines.append("# HELP infer_time_to_first_token_seconds from a request's arrival to its first token")
        lines.append("# TYPE infer_time_to_first_token_seconds histogram")
        for suffix, value in buckets:
            lines.append(f"infer_time_to_first_token_seconds{suffix} {value}")
        lines.append(f"infer_time_to_first_token_seconds_sum {total!r}")
        lines.append(f"infer_time_to_first_token_seconds_count {cumulative}")
        return "\n".join(lines) + "\n"
