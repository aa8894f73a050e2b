"""Aggregate decode speed of `infer serve` at 1, 2, 4 and 8 concurrent streams.

    python bench/serve.py     # BENCH_MODELS=smollm2,gemma3 BENCH_STREAMS=1,2,4,8 BENCH_TOKENS=64
                              # BENCH_THREADS=2 BENCH_REPS=1

For each model one `infer serve --parallel 8` runs on loopback.  Each stream is a
chat completion (greedy, end-of-turn tokens banned by logit_bias so every stream
decodes exactly BENCH_TOKENS tokens, cache_prompt off so each prefills its own
prompt).  "aggregate tok/s" is all streams' tokens after their first, divided
by the time from the first stream's first token to the last stream's end.  The
baselines, measured in the same run: the 1-stream figure ("x 1 stream" is the
8-stream figure over it) and "library", the same greedy decode in this process
through `generate` on a plain Context (what the server's own overhead is
measured against).

When llama-cpp-python is installed, `python -m llama_cpp.server` on the same
model and load is measured too (it serves one request at a time).
"""
import concurrent.futures
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import infer  # noqa: E402
from infer.gguf import default_model_path, gemma3_model_path  # noqa: E402

STREAMS = [int(s) for s in os.environ.get("BENCH_STREAMS", "1,2,4,8").split(",")]
TOKENS = int(os.environ.get("BENCH_TOKENS", "64"))
THREADS = os.environ.get("BENCH_THREADS", "2")
REPS = int(os.environ.get("BENCH_REPS", "1"))
MODELS = os.environ.get("BENCH_MODELS", "smollm2,gemma3").split(",")


def model_path(name):
    try:
        return str(default_model_path() if name == "smollm2" else gemma3_model_path())
    except FileNotFoundError:
        return None


def stream_once(port, body):
    """(time of the first token, time of the end, tokens) of one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first = None
    tokens = 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for c in chunk.get("choices", []):
            if c.get("delta", {}).get("content") and first is None:
                first = time.perf_counter()
    conn.close()
    return first, time.perf_counter(), tokens


def aggregate(port, n_streams, banned, usage_chunk=True):
    bodies = [{"messages": [{"role": "user", "content": f"Tell me a long story about the number {i}."}],
               "max_tokens": TOKENS, "temperature": 0, "stream": True,
               "logit_bias": {str(t): -100 for t in banned}} for i in range(n_streams)]
    if usage_chunk:
        for b in bodies:
            b.update(stream_options={"include_usage": True}, cache_prompt=False)
    with concurrent.futures.ThreadPoolExecutor(n_streams) as pool:
        results = list(pool.map(lambda b: stream_once(port, b), bodies))
    if any(r[0] is None for r in results):
        raise RuntimeError(f"{sum(r[0] is None for r in results)} of {n_streams} streams sent no content")
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    tokens = sum((r[2] or TOKENS) - 1 for r in results)
    return tokens / (end - start)


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_infer(path):
    proc = subprocess.Popen([sys.executable, "-m", "infer", "serve", "--model", path, "--port", "0",
                             "--parallel", str(max(STREAMS)), "--ctx-size", str(TOKENS + 128),
                             "--threads", THREADS], cwd=ROOT, stderr=subprocess.PIPE, text=True)
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


def run(label, start, path, banned, usage_chunk=True):
    proc, port = start(path)
    try:
        aggregate(port, 1, banned, usage_chunk)  # warm-up
        rows = {}
        for n in STREAMS:
            rows[n] = max(aggregate(port, n, banned, usage_chunk) for _ in range(REPS))
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def library_tok_s(model, banned):
    """Decode tok/s of one greedy generate() in this process, end-of-turn banned."""
    from infer.generate import generate

    ids = model.tokenizer.encode("Tell me a long story about the number 0.")
    ctx = model.create_context(n_ctx=TOKENS + 128, temperature=0, logit_bias={t: -100.0 for t in banned})
    gen = generate(model, ids, context=ctx, max_tokens=TOKENS)
    first = None
    for _ in gen:
        if first is None:
            first = time.perf_counter()
    return (len(gen.tokens) - 1) / (time.perf_counter() - first)


def main():
    try:
        import llama_cpp  # noqa: F401
        have_llama_cpp = True
    except ImportError:
        have_llama_cpp = False
    print(f"bench/serve.py: {TOKENS} tokens per stream, {THREADS} threads, greedy, best of {REPS}")
    print(f"{'model':10} {'server':18} " + " ".join(f"{f'{n} stream' + ('s' if n > 1 else ''):>10}" for n in STREAMS)
          + f" {'x 1 stream':>11}")
    for name in MODELS:
        path = model_path(name)
        if path is None:
            print(f"{name:10} not installed")
            continue
        with infer.load(path, n_threads=int(THREADS)) as model:
            banned = sorted(set(getattr(model.tokenizer.vocab, "end_of_turn_ids", ())) |
                            {model.tokenizer.vocab.eos_token_id})
            library = max(library_tok_s(model, banned) for _ in range(REPS))
        print(f"{name:10} {'library (1 seq)':18} {library:10.1f}")
        results = {"infer serve": run("infer", start_infer, path, banned)}
        theirs_failed = None
        if have_llama_cpp:
            try:
                results["llama_cpp.server"] = run("llama_cpp", start_llama_cpp, path, banned, usage_chunk=False)
            except RuntimeError as e:   # e.g. a model its chat handler cannot serve
                theirs_failed = str(e)
        for server, rows in results.items():
            ratio = rows[max(STREAMS)] / rows[STREAMS[0]]
            print(f"{name:10} {server:18} " + " ".join(f"{rows[n]:10.1f}" for n in STREAMS) + f" {ratio:10.2f}x")
        if theirs_failed:
            print(f"{name:10} {'llama_cpp.server':18} not measured: {theirs_failed}")
        elif have_llama_cpp:
            ours, theirs = results["infer serve"][max(STREAMS)], results["llama_cpp.server"][max(STREAMS)]
            print(f"{name:10} at {max(STREAMS)} streams: infer serve / llama_cpp.server = {ours / theirs:.2f}x")
    if not have_llama_cpp:
        print("llama_cpp.server: not measured (llama-cpp-python is not installed)")


if __name__ == "__main__":
    main()
