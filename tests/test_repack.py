"""Weights repacked at load into 16-row groups (csrc/repack.h): the *_r16 formats.

References: the gguf package's quantizers and numpy dequantizers (weights and
activations) with float64 products; the file format's own kernels; the same model
run with INFER_REPACK=0.
"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

import infer.kernels as K
from _tok_models import load_installed

FILE_FORMATS = ["q4_0", "q4_1", "q5_0", "q8_0"]


def make_weights(fmt, rows, n, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, n)).astype(np.float32)
    w[:, ::7] *= 3
    return gq.quantize(w, getattr(T, fmt.upper())).view(np.uint8).reshape(rows, -1)


def activations(fmt, x):
    xq = np.empty(K.activation_bytes(fmt, x.shape[1], x.shape[0]), np.uint8)
    return K.quantize_activations(x, fmt, xq)


def reference(fmt, w, x, xq):
    """float64 products of the gguf-dequantized weights and the activations as the
    format pairs them: gguf's Q8_0 bytes, and for Q4_1 the s that Q8_1 stores (the
    fp16 of d * sum(q), which is what the format defines)."""
    rows = w.shape[0]
    wd = np.asarray(gq.dequantize(w.reshape(-1), getattr(T, fmt.upper())), np.float64).reshape(rows, -1)
    xq8 = gq.quantize(x, T.Q8_0).view(np.uint8).reshape(x.shape[0], -1, 34)
    d = xq8[:, :, :2].copy().view(np.float16).astype(np.float64)
    xd = (xq8[:, :, 2:].copy().view(np.int8).astype(np.float64) * d).reshape(x.shape[0], -1)
    if fmt != "q4_1":
        return xd @ wd.T
    # Q4_1: sum d*q*x + m * s, s = fp16(d_x * sum(q_x)) as Q8_1 stores it
    m = w.reshape(rows, -1, 20)[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
    q81 = xq.reshape(x.shape[0], -1, 36)
    np.testing.assert_array_equal(q81[:, :, 4:], xq8[:, :, 2:])
    s = q81[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
    return xd @ (wd - np.repeat(m, 32, axis=1)).T + s @ m.T


@pytest.mark.parametrize("fmt", FILE_FORMATS)
@pytest.mark.parametrize("rows,n,n_tok", [(16, 32, 1), (48, 576, 3), (64, 1536, 9), (32, 64, 33)])
def test_repacked_matmul_against_float64(isa, fmt, rows, n, n_tok):
    w = make_weights(fmt, rows, n, rows + n)
    x = np.random.default_rng(n_tok).standard_normal((n_tok, n)).astype(np.float32) * 4
    wr, rfmt = K.repack(w, fmt)
    assert rfmt == fmt + "_r16" and wr.shape == w.shape
    xq = activations(rfmt, x)
    if rfmt != "q4_1_r16":   # Q8_0S: Q8_0's bytes (as gguf makes them) and their exact sum
        blocks = xq.reshape(n_tok, -1, 36)
        want = gq.quantize(x, T.Q8_0).view(np.uint8).reshape(n_tok, -1, 34)
        np.testing.assert_array_equal(blocks[:, :, :2], want[:, :, :2])
        np.testing.assert_array_equal(blocks[:, :, 4:], want[:, :, 2:])
        np.testing.assert_array_equal(blocks[:, :, 2:4].copy().view(np.int16)[..., 0],
                                      want[:, :, 2:].copy().view(np.int8).astype(np.int64).sum(-1))
    out = np.full((n_tok, rows), np.nan, np.float32)
    K.matmul_q(wr, rfmt, xq, out)
    ref = reference(fmt, w, x, xq)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-6 * scale * np.sqrt(n / 32))
    # each token's results are the bits it gets alone
    for t in (0, n_tok - 1):
        one = np.empty((1, rows), np.float32)
        K.matmul_q(wr, rfmt, activations(rfmt, x[t:t + 1]), one)
        np.testing.assert_array_equal(one[0], out[t])
    # and the float entry points (matvec, matmul) agree
    vec = np.empty(rows, np.float32)
    K.matvec(wr, rfmt, x[0], vec)
    np.testing.assert_array_equal(vec, out[0])


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_every_kernel_set_gives_the_scalar_bits(fmt):
    w = make_weights(fmt, 48, 640, 5)
    x = np.random.default_rng(6).standard_normal((11, 640)).astype(np.float32)
    wr, rfmt = K.repack(w, fmt)
    previous = K.capabilities()["active"]
    results = {}
    try:
        for isa in K.capabilities()["available"]:
            K.set_isa(isa)
            out = np.empty((11, 48), np.float32)
            K.matmul_q(wr, rfmt, activations(rfmt, x), out)
            results[isa] = out
    finally:
        K.set_isa(previous)
    for isa, out in results.items():
        np.testing.assert_array_equal(out, results["scalar"], err_msg=isa)


def test_repack_type_follows_the_kernel_set():
    previous = K.capabilities()["active"]
    try:
        K.set_isa("scalar")     # the portable kernel is slower than the file's rows
        assert K.repack_type("q4_1") is None
        if "avx512" in K.capabilities()["available"]:
            K.set_isa("avx512")
            assert [K.repack_type(f) for f in FILE_FORMATS] == [f + "_r16" for f in FILE_FORMATS]
            assert K.repack_type("q4_k") is None
    finally:
        K.set_isa(previous)


def test_bad_arguments_are_refused():
    w = make_weights("q4_0", 32, 64, 1)
    with pytest.raises(ValueError, match="16 rows"):
        K.repack(w[:17], "q4_0")
    with pytest.raises(ValueError, match="no repacked format"):
        K.repack(w, "q4_k")
    with pytest.raises(ValueError, match="blocks"):
        K.repack(np.ascontiguousarray(w[:, :17]), "q4_0")
    with pytest.raises(ValueError, match="not contiguous"):
        K.repack(w[:, ::2], "q4_0")
    with pytest.raises(ValueError, match="uint8"):
        K.repack(w.view(np.int8), "q4_0")
    wr, rfmt = K.repack(w, "q4_0")
    xq = activations(rfmt, np.ones((1, 64), np.float32))
    with pytest.raises(ValueError, match="16 rows"):
        K.matmul_q(wr[:24], rfmt, xq, np.empty((1, 24), np.float32))
    with pytest.raises(ValueError):   # q8_0 activations are not what q4_0_r16 pairs with
        K.matmul_q(wr, rfmt, activations("q4_0", np.ones((1, 64), np.float32)), np.empty((1, 32), np.float32))


def test_smollm2_repacked_decodes_as_the_file_does(monkeypatch):
    """The model with its matrices repacked (the default where the kernel set has a
    faster kernel) against INFER_REPACK=0: the same greedy tokens and logits, the
    same state fingerprint."""
    from infer.state import fingerprint

    def run(repack):
        monkeypatch.setenv("INFER_REPACK", repack)
        with load_installed("smollm2") as model:
            w = model.engine.weights
            kinds = {K.TYPE_NAMES[w.output.qtype], K.TYPE_NAMES[w.layers[0].wq.qtype]}
            assert K.TYPE_NAMES[w.token_embd.qtype] == "q8_0"   # rows looked up: the file's
            ctx = model.create_context(n_ctx=96, temperature=0)
            ctx.prefill(model.tokenizer.encode("The three primary colors are"))
            first = np.array(ctx.logits)
            tokens = [ctx.next() for _ in range(16)]
            return kinds, first, tokens, fingerprint(model.engine)

    kinds_file, logits_file, tokens_file, fp_file = run("0")
    kinds, logits, tokens, fp = run("1")
    assert kinds_file == {"q8_0", "q4_1"}
    if K.repack_type("q4_1"):
        assert kinds == {"q8_0_r16", "q4_1_r16"}
    assert tokens == tokens_file
    # the *_r16 kernels do the x86 row kernels' operations in their order: same bits
    np.testing.assert_array_equal(logits, logits_file)
    assert fp == fp_file


def test_gemma3_repacked_decodes_as_the_file_does(monkeypatch):
    """Gemma 3 keeps attn_q/k and ffn_gate/up (and half its attn_v) in Q5_0: with
    them repacked (Q5_0_R16) against INFER_REPACK=0, the same greedy tokens, the
    same logits after a multi-token prefill and after each step, the same state
    fingerprint."""
    from infer.state import fingerprint

    def run(repack):
        monkeypatch.setenv("INFER_REPACK", repack)
        with load_installed("gemma3") as model:
            layer = model.engine.weights.layers[0]
            kinds = {K.TYPE_NAMES[getattr(layer, m).qtype] for m in ("wq", "wk", "w_gate", "w_up")}
            ctx = model.create_context(n_ctx=96, temperature=0)
            ctx.prefill(model.tokenizer.encode("The three primary colors are", add_special=True))
            logits = [np.array(ctx.logits)]
            tokens = []
            for _ in range(12):
                tokens.append(ctx.next())
                logits.append(np.array(ctx.logits))
            return kinds, logits, tokens, fingerprint(model.engine)

    kinds_file, logits_file, tokens_file, fp_file = run("0")
    kinds, logits, tokens, fp = run("1")
    assert kinds_file == {"q5_0"}
    if K.repack_type("q5_0"):
        assert kinds == {"q5_0_r16"}
    assert tokens == tokens_file
    for got, want in zip(logits, logits_file):   # the x86 row kernels' operations: same bits
        np.testing.assert_array_equal(got, want)
    assert fp == fp_file
