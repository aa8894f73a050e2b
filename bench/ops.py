"""Float ops and attention: time per call on each ISA, as a ratio to numpy doing the
same thing in the same run (numpy / kernel: above 1 means the kernel is faster).

Shapes are SmolLM2-135M's (d=576, ffn=1536, 9 heads / 3 KV heads of 64, vocab
49152).  Attention is one decoded token over a cache of N positions, all heads,
one layer; the last row is Gemma 3's shape over 24 layers' caches, which do not
fit in the last-level cache, as in a decode step at depth.

Environment: BENCH_SECONDS (per measurement, default 0.3), BENCH_THREADS (default
1), BENCH_CTX (attention contexts, default "512,2048").

    python bench/ops.py
"""
import os
import time

import numpy as np

from infer import kernels as K

SECONDS = float(os.environ.get("BENCH_SECONDS", "0.3"))
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
CONTEXTS = [int(c) for c in os.environ.get("BENCH_CTX", "512,2048").split(",")]
D, FFN, N_HEADS, N_KV, HEAD_DIM, VOCAB = 576, 1536, 9, 3, 64, 49152


def per_call(fn):
    """Seconds per call: the fastest of many short batches, which on a shared machine
    is the figure least disturbed by other processes."""
    fn()
    n = 1
    while True:                                   # a batch of about 0.2 ms
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 > 2e-4 or n > 1 << 16:
            break
        n *= 2
    best, deadline, batches = float("inf"), time.perf_counter() + SECONDS, 0
    while batches < 10 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
        batches += 1
    return best


# ---- numpy baselines ------------------------------------------------------------------

def np_rmsnorm(x, w, out):
    np.multiply(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5), w, out=out)


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def np_silu_mul(g, u, out):
    np.multiply(g / (1.0 + np.exp(-g)), u, out=out)


def np_gelu_mul(g, u, out):
    np.multiply(0.5 * g * (1.0 + np.tanh(0.7978845608 * (g + 0.044715 * g * g * g))), u, out=out)


def np_rope_norm(x, pos0, base=100000.0):
    n, _, d = x.shape
    theta = (np.arange(pos0, pos0 + n, dtype=np.float32)[:, None]
             * base ** (-np.arange(0, d, 2, dtype=np.float32) / d))[:, None, :]
    c, s = np.cos(theta), np.sin(theta)
    a, b = x[..., 0::2].copy(), x[..., 1::2].copy()
    x[..., 0::2] = a * c - b * s
    x[..., 1::2] = a * s + b * c


def np_attention(q, kc, vc, pos, out):
    """One token, all heads, float32 cache [n_kv, n_ctx, d]: GQA by reshaping q."""
    group = q.shape[1] // kc.shape[0]
    qg = q[0].reshape(kc.shape[0], group, -1)                 # (n_kv, group, d)
    s = np.matmul(qg, kc[:, :pos + 1].transpose(0, 2, 1)) * (1.0 / np.sqrt(q.shape[2]))
    s = np_softmax(s)
    out[0] = np.matmul(s, vc[:, :pos + 1]).reshape(q.shape[1], -1)


# ---- the table ------------------------------------------------------------------------

def cases():
    r = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return r.standard_normal(shape).astype(np.float32)

    x1, x512, w = f(1, D), f(512, D), f(D)
    o1, o512 = np.empty_like(x1), np.empty_like(x512)
    g1, u1, h1 = f(FFN), f(FFN), np.empty(FFN, np.float32)
    g512, u512, h512 = f(512, FFN), f(512, FFN), np.empty((512, FFN), np.float32)
    logits = f(VOCAB) * 5
    logit_buf = logits.copy()
    q1, q512 = f(1, N_HEADS, HEAD_DIM), f(512, N_HEADS, HEAD_DIM)

    def ours_softmax():
        np.copyto(logit_buf, logits)
        K.softmax(logit_buf)

    yield "rmsnorm 1x576", lambda: K.rmsnorm(x1, w, o1, 1e-5), lambda: np_rmsnorm(x1, w, o1)
    yield "rmsnorm 512x576", lambda: K.rmsnorm(x512, w, o512, 1e-5), lambda: np_rmsnorm(x512, w, o512)
    yield ("softmax 49152 (+copy)", ours_softmax, lambda: np_softmax(logits))
    yield "silu_mul 1536", lambda: K.silu_mul(g1, u1, h1), lambda: np_silu_mul(g1, u1, h1)
    yield ("silu_mul 512x1536", lambda: K.silu_mul(g512, u512, h512),
           lambda: np_silu_mul(g512, u512, h512))
    yield ("gelu_mul 512x1536", lambda: K.gelu_mul(g512, u512, h512),
           lambda: np_gelu_mul(g512, u512, h512))
    yield "add 512x576", lambda: K.add(o512, x512), lambda: np.add(o512, x512, out=o512)
    yield ("rope 1x9x64 @ pos 1000", lambda: K.rope(q1, 1000, 100000.0),
           lambda: np_rope_norm(q1, 1000))
    yield ("rope 512x9x64", lambda: K.rope(q512, 0, 100000.0), lambda: np_rope_norm(q512, 0))
    for n_ctx in CONTEXTS:
        kc, vc = f(N_KV, n_ctx, HEAD_DIM), f(N_KV, n_ctx, HEAD_DIM)
        kh, vh = kc.astype(np.float16).view(np.uint16), vc.astype(np.float16).view(np.uint16)
        out = np.empty_like(q1)
        pos = n_ctx - 1
        yield (f"attention 1 tok, ctx {n_ctx}, f32 cache",
               lambda kc=kc, vc=vc, out=out, pos=pos: K.attention(q1, kc, vc, pos, out),
               lambda kc=kc, vc=vc, out=out, pos=pos: np_attention(q1, kc, vc, pos, out))
        yield (f"attention 1 tok, ctx {n_ctx}, f16 cache",
               lambda kh=kh, vh=vh, out=out, pos=pos: K.attention(q1, kh, vh, pos, out),
               lambda kc=kc, vc=vc, out=out, pos=pos: np_attention(q1, kc, vc, pos, out))
    kc, vc = f(N_KV, 512, HEAD_DIM), f(N_KV, 512, HEAD_DIM)
    kh, vh = kc.astype(np.float16).view(np.uint16), vc.astype(np.float16).view(np.uint16)
    out512 = np.empty_like(q512)

    def np_prefill():
        for t in range(512):
            np_attention(q512[t:t + 1], kc, vc, t, out512[t:t + 1])

    yield ("attention prefill 512 tok, f16 cache",
           lambda: K.attention(q512, kh, vh, 0, out512), np_prefill)

    # A decode step's attention at depth reads each layer's cache from memory (the
    # weights read since evicted it): Gemma 3's shape (4 heads / 1 KV head of 256),
    # one token over 4096 positions in each of 24 layers' caches (100 MB of f16).
    layers = [(f(1, 4096, 256).astype(np.float16), f(1, 4096, 256).astype(np.float16)) for _ in range(24)]
    qg, outg = f(1, 4, 256), np.empty((1, 4, 256), np.float32)

    def ours_layers():
        for kl, vl in layers:
            K.attention(qg, kl.view(np.uint16), vl.view(np.uint16), 4095, outg)

    def np_layers():
        for kl, vl in layers:
            np_attention(qg, kl, vl, 4095, outg)

    yield "attention 1 tok, ctx 4096, f16, 24 layers", ours_layers, np_layers


def main():
    K.set_num_threads(THREADS)
    isas = K.capabilities()["available"]
    previous = K.capabilities()["active"]
    rows = []
    for name, ours, base in cases():
        t_np = per_call(base)
        times = []
        for isa in isas:
            K.set_isa(isa)
            times.append(per_call(ours))
        rows.append((name, t_np, times))
    K.set_isa(previous)
    head = f"{'op':40s} {'numpy us':>10s}" + "".join(f" {i + ' us':>11s} {'x':>6s}" for i in isas)
    print(f"threads={THREADS}; x = numpy time / kernel time (higher is better)")
    print(head)
    print("-" * len(head))
    for name, t_np, times in rows:
        cells = "".join(f" {t * 1e6:11.2f} {t_np / t:6.1f}" for t in times)
        print(f"{name:40s} {t_np * 1e6:10.2f}{cells}")


if __name__ == "__main__":
    main()
