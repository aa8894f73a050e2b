"""A token's result does not depend on the batch it was computed in.

A server reuses a slot's cached prefix, which was written by whatever calls filled it
(a chunked prefill, a previous reply decoded token by token), so the same request
gives the same greedy text only if a token's attention output is the same bits in
any batch.  The SIMD attention kernels group a call's queries (up to four per pass)
and walk the cache in chunks sized by the call's last position, so a query's rows
fell into blocks or a tail, and its softmax weights into vector lanes or a scalar
exp, by how many other queries shared its call: on AVX2 the greedy continuation of
a SmolLM2 chat prompt changed after 6 tokens when the prompt was prefilled one
token at a time instead of in one call (logits up to 0.70 apart).

Checked here: `K.attention` over a batch equals the same queries in any split and
one at a time, bit for bit, on every kernel set of this machine (and matches a
float64 numpy attention, so the invariant output is also the right one); and a
Context's logits and greedy tokens do not depend on how its prompt was split.
"""
import numpy as np
import pytest

import infer.kernels as K

from _tok_models import load_installed

CASES = [  # n_heads, n_kv_heads, head_dim, n_tokens, window, n_ctx
    (9, 3, 64, 40, 0, 64),      # SmolLM2's heads: 3 query heads per KV head, 5 tokens per pass
    (4, 1, 64, 70, 50, 256),    # a sliding window
    (4, 1, 256, 30, 0, 128),    # Gemma 3's head_dim
    (8, 4, 32, 23, 0, 300),
]


def numpy_attention(q, k, v, pos0, window):
    """float64 causal (optionally windowed) attention; k, v F16 bits."""
    k = k.view(np.float16).astype(np.float64)
    v = v.view(np.float16).astype(np.float64)
    n, h, d = q.shape
    group = h // k.shape[0]
    out = np.zeros(q.shape)
    for t in range(n):
        p = pos0 + t
        lo = max(0, p - window + 1) if window else 0
        for head in range(h):
            s = k[head // group, lo:p + 1] @ q[t, head].astype(np.float64) / np.sqrt(d)
            w = np.exp(s - s.max())
            out[t, head] = w @ v[head // group, lo:p + 1] / w.sum()
    return out


def attend(q, k, v, pos0, window):
    out = np.zeros_like(q)
    K.attention(np.ascontiguousarray(q), k, v, pos0, out, window=window)
    return out


@pytest.fixture
def one_thread():
    previous = K.get_num_threads()
    K.set_num_threads(1)  # a one-token call on several threads splits its positions
    try:
        yield
    finally:
        K.set_num_threads(previous)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "h{}kv{}d{}n{}w{}".format(*c[:5]))
def test_attention_is_the_same_bits_in_any_split(isa, one_thread, case):
    n_heads, n_kv, d, n, window, n_ctx = case
    rng = np.random.default_rng(n * d)
    q = rng.standard_normal((n, n_heads, d)).astype(np.float32)
    k = rng.standard_normal((n_kv, n_ctx, d)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((n_kv, n_ctx, d)).astype(np.float16).view(np.uint16)
    pos0 = n_ctx - n
    whole = attend(q, k, v, pos0, window)
    np.testing.assert_allclose(whole, numpy_attention(q, k, v, pos0, window), atol=2e-5, rtol=0)
    for split in (1, 2, 3, 5, 7, 13):
        parts = np.concatenate([attend(q[:split], k, v, pos0, window),
                                attend(q[split:], k, v, pos0 + split, window)])
        assert np.array_equal(parts, whole), f"split at {split}: {np.abs(parts - whole).max()}"
    singles = np.concatenate([attend(q[t:t + 1], k, v, pos0 + t, window) for t in range(n)])
    assert np.array_equal(singles, whole), f"one at a time: {np.abs(singles - whole).max()}"


def test_smollm2_logits_do_not_depend_on_how_the_prompt_was_split(one_thread):
    with load_installed("smollm2") as model:
        prompt = model.tokenizer.encode(
            "The number 4 is a magical number in the realm of mathematics, often associated with the concept")

        def run(splits):
            ctx = model.create_context(n_ctx=128, temperature=0)
            start = 0
            for end in [*splits, len(prompt)]:
                ctx.prefill(prompt[start:end])
                start = end
            logits = np.array(ctx.logits)
            return logits, [ctx.next() for _ in range(8)]

        whole, greedy = run([])
        for splits in ([1], [5, 6], [10, 11], list(range(1, len(prompt)))):
            logits, tokens = run(splits)
            assert np.array_equal(logits, whole), f"{splits[:4]}: {np.abs(logits - whole).max()}"
            assert tokens == greedy
