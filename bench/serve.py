"""Aggregate decode speed of `infer serve` at 1, 2, 4 and 8 concurrent streams.

    python bench/serve.py     # BENCH_MODELS=smollm2,gemma3 BENCH_STREAMS=1,2,4,8 BENCH_TOKENS=64
                              # BENCH_THREADS=2 BENCH_REPS=3

For each model one `infer serve --parallel 8` runs on loopback.  Each stream is a
greedy request with end-of-turn tokens banned by logit_bias, so that it decodes
BENCH_TOKENS tokens, and cache_prompt off, so that each prefills its own prompt.
A model whose file has a chat template is driven through /v1/chat/completions;
one without (Gemma 3 270M, a base model) through /v1/completions with the raw
prompt, since each server would otherwise wrap it in a different fallback template.

Two aggregates per load, from the arrival times of the streamed tokens:
"decode" counts the tokens that arrive while every stream is decoding (from the
last stream's first token to the first stream's last), the steady state of N
streams; "end to end" is all tokens after each stream's first over the time from
the first stream's first token to the last stream's end, so it also pays for the
prefills of the streams that join after the first.

Baselines, measured in the same run and alternated with the server's runs rep by
rep (a loaded machine shifts them alike; the medians are printed):
"library", the same greedy decode in this process through `generate` on a plain
Context, against which the server's own overhead at 1 stream is read; and
"next_batch", B contexts advanced together in this process by `runtime.next_batch`
(the batched step with no server around it), which bounds what 8 streams can gain.

BENCH_BASELINE=/path/to/another/checkout (built) runs that checkout's `infer serve`
too ("baseline serve"), alternated with this one's: a change's before and after.

When llama-cpp-python is importable (LLAMA_CPP_LIB_PATH may name its libllama),
`python -m llama_cpp.server` runs on the same model and load too, alternated with
infer's runs; it serves one request at a time.
"""
import concurrent.futures
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import infer  # noqa: E402
from infer.gguf import default_model_path, gemma3_model_path  # noqa: E402
from infer.runtime import next_batch  # noqa: E402

STREAMS = [int(s) for s in os.environ.get("BENCH_STREAMS", "1,2,4,8").split(",")]
TOKENS = int(os.environ.get("BENCH_TOKENS", "64"))
THREADS = os.environ.get("BENCH_THREADS", "2")
REPS = int(os.environ.get("BENCH_REPS", "3"))
MODELS = os.environ.get("BENCH_MODELS", "smollm2,gemma3").split(",")
#: another checkout of infer (built), whose `infer serve` runs beside this one's: before/after a change
BASELINE = os.environ.get("BENCH_BASELINE")
PROMPT = "Tell me a long story about the number {}."


def model_path(name):
    try:
        return str(default_model_path() if name == "smollm2" else gemma3_model_path())
    except FileNotFoundError:
        return None


def request_body(i, chat, banned):
    body = {"max_tokens": TOKENS, "temperature": 0, "stream": True, "logit_bias": {str(t): -100 for t in banned}}
    if chat:
        body["messages"] = [{"role": "user", "content": PROMPT.format(i)}]
    else:
        body["prompt"] = PROMPT.format(i)
    return body


def stream_once(port, path, body):
    """Arrival times of the chunks that carry text, one per token (both servers
    stream token by token), and the end time of the stream."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    arrivals = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        for c in json.loads(data).get("choices", []):
            if c.get("delta", {}).get("content") or c.get("text"):
                arrivals.append(time.perf_counter())
    conn.close()
    return arrivals, time.perf_counter()


def aggregate(port, n_streams, chat, banned, ours):
    """(decode tok/s, end-to-end tok/s) of n_streams concurrent requests."""
    bodies = [request_body(i, chat, banned) for i in range(n_streams)]
    if ours:
        for b in bodies:
            b["cache_prompt"] = False
    path = "/v1/chat/completions" if chat else "/v1/completions"
    with concurrent.futures.ThreadPoolExecutor(n_streams) as pool:
        results = list(pool.map(lambda b: stream_once(port, path, b), bodies))
    if any(len(a) < 2 for a, _ in results):
        raise RuntimeError(f"{sum(len(a) < 2 for a, _ in results)} of {n_streams} streams sent no content "
                           f"(lengths {[len(a) for a, _ in results]})")
    lo = max(a[0] for a, _ in results)
    hi = min(a[-1] for a, _ in results)
    inside = sum(sum(1 for t in a if lo < t <= hi) for a, _ in results)
    decode = inside / (hi - lo) if hi > lo and inside else float("nan")
    start = min(a[0] for a, _ in results)
    end = max(e for _, e in results)
    return decode, sum(len(a) - 1 for a, _ in results) / (end - start)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(proc, port, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the server did not start")


def start_infer(path, root=ROOT):
    proc = subprocess.Popen([sys.executable, "-m", "infer", "serve", "--model", path, "--port", "0",
                             "--parallel", str(max(STREAMS)), "--ctx-size", str(TOKENS + 128),
                             "--threads", THREADS], cwd=root, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        match = re.search(r"on http://127\.0\.0\.1:(\d+)/v1", line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, int(match.group(1))
    raise RuntimeError(f"infer serve did not start (exit {proc.wait()})")


def start_llama_cpp(path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", path, "--port", str(port),
                             "--n_threads", THREADS, "--n_ctx", str(TOKENS + 128),
                             # its default cuts a running stream short when the next request arrives
                             "--interrupt_requests", "False"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(proc, port)
    return proc, port


def library_tok_s(model, ids, banned):
    """Decode tok/s of one greedy generate() in this process, end-of-turn banned."""
    from infer.generate import generate

    ctx = model.create_context(n_ctx=TOKENS + 128, temperature=0, logit_bias={t: -100.0 for t in banned})
    gen = generate(model, ids, context=ctx, max_tokens=TOKENS)
    first = None
    for _ in gen:
        if first is None:
            first = time.perf_counter()
    return (len(gen.tokens) - 1) / (time.perf_counter() - first)


def next_batch_tok_s(model, ids, banned, b):
    """tok/s of b greedy contexts advanced together by next_batch (no server)."""
    ctxs = []
    for _ in range(b):
        ctx = model.create_context(n_ctx=TOKENS + 128, temperature=0, logit_bias={t: -100.0 for t in banned})
        ctx.prefill(ids)
        ctxs.append(ctx)
    t0 = time.perf_counter()
    for _ in range(TOKENS - 1):
        next_batch(ctxs)
    return b * (TOKENS - 1) / (time.perf_counter() - t0)


def prompt_ids(model, chat):
    """The tokens the server prefills for stream 0's request."""
    if chat:
        text = model.chat.render([{"role": "user", "content": PROMPT.format(0)}])
        return model.tokenizer.encode(text, add_special=False, parse_special=True)
    return model.tokenizer.encode(PROMPT.format(0))


def have_llama_cpp():
    try:
        import llama_cpp.server.app  # noqa: F401
    except Exception as exc:  # ImportError, or its libllama not found (RuntimeError/OSError)
        return f"{type(exc).__name__}: {exc}"
    return None


def med(values):
    """The median of the measured values (nan: none, a server that never ran N streams at once)."""
    kept = [v for v in values if v == v]
    return statistics.median(kept) if kept else float("nan")


def fmt(rows):
    return " ".join(f"{med(rows[n]):10.1f}" if med(rows[n]) == med(rows[n]) else f"{'-':>10}" for n in STREAMS)


def bench_model(name, path, theirs_missing):
    with infer.load(path, n_threads=int(THREADS)) as model:
        chat = bool(model.metadata.get("tokenizer.chat_template"))
        banned = sorted(set(getattr(model.tokenizer.vocab, "end_of_turn_ids", ())) |
                        {model.tokenizer.vocab.eos_token_id})
        ids = prompt_ids(model, chat)
        servers = {"infer serve": start_infer(path)}
        if BASELINE:
            servers["baseline serve"] = start_infer(path, BASELINE)
        failed = {}
        if theirs_missing is None:
            try:
                servers["llama_cpp.server"] = start_llama_cpp(path)
            except RuntimeError as exc:
                failed["llama_cpp.server"] = str(exc)
        library = []
        batched = {n: [] for n in STREAMS}
        decode = {s: {n: [] for n in STREAMS} for s in servers}
        e2e = {s: {n: [] for n in STREAMS} for s in servers}
        try:
            for server, (_, port) in servers.items():  # warm-up
                aggregate(port, 1, chat, banned, server != "llama_cpp.server")
            for _ in range(REPS):
                library.append(library_tok_s(model, ids, banned))
                for n in STREAMS:
                    batched[n].append(next_batch_tok_s(model, ids, banned, n))
                for server, (_, port) in list(servers.items()):
                    if server in failed:
                        continue
                    try:
                        for n in STREAMS:
                            d, e = aggregate(port, n, chat, banned, server != "llama_cpp.server")
                            decode[server][n].append(d)
                            e2e[server][n].append(e)
                    except RuntimeError as exc:  # e.g. a model its chat handler cannot serve
                        failed[server] = str(exc)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=60)
    endpoint = "chat" if chat else "completions"
    lib = med(library)
    print(f"{name:8} {'library generate':26} {lib:10.1f}   (one sequence; /v1/{endpoint})")
    print(f"{name:8} {'library next_batch (B=N)':26} {fmt(batched)} "
          f"{med(batched[STREAMS[-1]]) / med(batched[STREAMS[0]]):10.2f}x")
    for server in servers:
        if server in failed:
            print(f"{name:8} {server:26} not measured: {failed[server]}")
            continue
        for label, rows in (("decode", decode[server]), ("end to end", e2e[server])):
            ratio = med(rows[STREAMS[-1]]) / med(rows[STREAMS[0]])
            if ratio == ratio:
                print(f"{name:8} {server + ' ' + label:26} {fmt(rows)} {ratio:10.2f}x")
            else:  # it serves one request at a time: N streams never decode together
                print(f"{name:8} {server + ' ' + label:26} {fmt(rows)} {'-':>11}")
    for server in (s for s in servers if s != "llama_cpp.server" and s not in failed):
        ours = decode[server]
        print(f"{name:8} {server} decode / library: {med(ours[STREAMS[0]]) / lib:.2f} at {STREAMS[0]} stream; "
              f"/ next_batch: {med(ours[STREAMS[-1]]) / med(batched[STREAMS[-1]]):.2f} at {STREAMS[-1]}")
    if "llama_cpp.server" in servers and "llama_cpp.server" not in failed:
        # end to end for both: llama_cpp.server never decodes two streams at once
        print(f"{name:8} at {STREAMS[-1]} streams, end to end: infer serve / llama_cpp.server = "
              f"{med(e2e['infer serve'][STREAMS[-1]]) / med(e2e['llama_cpp.server'][STREAMS[-1]]):.2f}x")


def main():
    theirs_missing = have_llama_cpp()
    print(f"bench/serve.py: {TOKENS} tokens per stream, {THREADS} threads, greedy, median of {REPS}, tok/s")
    print(f"{'model':8} {'engine':26} " + " ".join(f"{f'{n} stream' + ('s' if n > 1 else ''):>10}" for n in STREAMS)
          + f" {'last/first':>11}")
    for name in MODELS:
        path = model_path(name)
        if path is None:
            print(f"{name:8} not installed")
            continue
        bench_model(name, path, theirs_missing)
    if theirs_missing:
        print(f"llama_cpp.server: not measured ({theirs_missing})")


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # rows as they come, also into a file
    main()
