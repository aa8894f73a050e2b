"""Weights repacked at load into 16-row groups (csrc/repack.h): the *_r16 formats.

References: the gguf package's quantizers and numpy dequantizers (weights and
activations) with float64 products; the file format's own kernels; the same model
run with INFER_REPACK=0.  (Q4_K and Q6_K weights come from infer's quantizer, and
are read back by gguf's dequantizer.)
"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq

import infer.kernels as K
from _tok_models import load_installed

BLOCK32_FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"]   # paired with Q8_0S or Q8_1
# super-block bytes of the K and IQ4_XS formats (infer quantizes them)
K_FORMATS = {"q2_k": 84, "q3_k": 110, "q4_k": 144, "q5_k": 176, "q6_k": 210, "iq4_xs": 136}
FILE_FORMATS = BLOCK32_FORMATS + list(K_FORMATS)
Q4_K_BYTES, Q8_K_BYTES = 144, 292


def make_weights(fmt, rows, n, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, n)).astype(np.float32)
    w[:, ::7] *= 3
    if fmt in K_FORMATS:
        w += rng.standard_normal((rows, 1)).astype(np.float32)   # rows off zero: Q4_K's mins of both signs
        return K.quantize(w.reshape(-1), fmt, np.empty(rows * n // 256 * K_FORMATS[fmt], np.uint8)).reshape(rows, -1)
    if fmt == "iq4_nl":   # gguf has no IQ4_NL quantizer: infer's, read back by gguf's dequantizer
        return K.quantize(w.reshape(-1), fmt, np.empty(rows * n // 32 * 18, np.uint8)).reshape(rows, -1)
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
    if fmt not in ("q4_1", "q5_1"):
        return xd @ wd.T
    # Q4_1, Q5_1: sum d*q*x + m * s, s = fp16(d_x * sum(q_x)) as Q8_1 stores it
    m = w.reshape(rows, -1, 20 if fmt == "q4_1" else 24)[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
    q81 = xq.reshape(x.shape[0], -1, 36)
    np.testing.assert_array_equal(q81[:, :, 4:], xq8[:, :, 2:])
    s = q81[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
    return xd @ (wd - np.repeat(m, 32, axis=1)).T + s @ m.T


def check_token_bits(wr, rfmt, x, out):
    """Each token's results are the bits it gets alone, and the float entry points
    (matvec) agree."""
    rows = out.shape[1]
    for t in (0, len(x) - 1):
        one = np.empty((1, rows), np.float32)
        K.matmul_q(wr, rfmt, activations(rfmt, x[t:t + 1]), one)
        np.testing.assert_array_equal(one[0], out[t])
    vec = np.empty(rows, np.float32)
    K.matvec(wr, rfmt, x[0], vec)
    np.testing.assert_array_equal(vec, out[0])


@pytest.mark.parametrize("fmt", BLOCK32_FORMATS)
# n_tok <= 8 with up to 256 blocks a row takes the kernels' converted-scales path;
# more tokens, or longer rows (8224 = 257 blocks), the path that converts per group
@pytest.mark.parametrize("rows,n,n_tok", [(16, 32, 1), (48, 576, 3), (48, 640, 8), (64, 1536, 9), (32, 64, 33),
                                         (16, 8224, 5)])
def test_repacked_matmul_against_float64(isa, fmt, rows, n, n_tok):
    w = make_weights(fmt, rows, n, rows + n)
    x = np.random.default_rng(n_tok).standard_normal((n_tok, n)).astype(np.float32) * 4
    wr, rfmt = K.repack(w, fmt)
    assert rfmt == fmt + "_r16" and wr.shape == w.shape
    xq = activations(rfmt, x)
    if rfmt not in ("q4_1_r16", "q5_1_r16"):   # Q8_0S: Q8_0's bytes (as gguf makes them) and their exact sum
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
    check_token_bits(wr, rfmt, x, out)
    if K.capabilities()["active"] == "avx512" or (K.capabilities()["active"] == "avx2" and fmt != "iq4_nl"):
        # the x86 vec_dot_4xn kernels' operations in their order (csrc/repack.h; IQ4_NL's
        # needs VNNI)
        file_out = np.empty_like(out)
        K.matmul_q(w, fmt, activations(fmt, x), file_out)
        np.testing.assert_array_equal(out, file_out)


def parse_q8_k(xq, n_tok):
    """Q8_K blocks: float32 d, int8 qs[256], int16 bsums[16] (sums of 16 qs)."""
    blocks = xq.reshape(n_tok, -1, Q8_K_BYTES)
    d = blocks[:, :, 0:4].copy().view(np.float32)[..., 0]
    qs = blocks[:, :, 4:260].copy().view(np.int8)
    bsums = blocks[:, :, 260:292].copy().view(np.int16)
    return d, qs, bsums


def q4_k_parts(w, fmt="q4_k"):
    """gguf's dequantization of Q4_K (or Q5_K, Q2_K) rows as float64, and the magnitude of its
    two terms d*sc*q and dmin*m (each dequantized alone, the other scale zeroed): the
    kernel sums them separately, so its rounding follows them, not their difference."""
    rows = w.shape[0]

    def deq(blocks):
        return np.asarray(gq.dequantize(blocks.reshape(-1), getattr(T, fmt.upper())), np.float64).reshape(rows, -1)

    blocks = w.reshape(rows, -1, K_FORMATS[fmt])
    d_at = 80 if fmt == "q2_k" else 0            # d, then dmin (Q2_K keeps them last)
    no_min, no_scale = blocks.copy(), blocks.copy()
    no_min[:, :, d_at + 2:d_at + 4] = 0
    no_scale[:, :, d_at:d_at + 2] = 0
    return deq(blocks), np.abs(deq(no_min)) + np.abs(deq(no_scale))


@pytest.mark.parametrize("fmt", list(K_FORMATS))
@pytest.mark.parametrize("rows", [16, 48])
@pytest.mark.parametrize("n", [256, 512, 2304])
@pytest.mark.parametrize("n_tok", [1, 3, 8, 9, 33])
def test_repacked_k_formats_against_float64(isa, fmt, rows, n, n_tok):
    w = make_weights(fmt, rows, n, rows + n)
    x = np.random.default_rng(n_tok).standard_normal((n_tok, n)).astype(np.float32) * 4
    wr, rfmt = K.repack(w, fmt)
    assert rfmt == fmt + "_r16" and wr.shape == w.shape
    xq = activations(rfmt, x)
    d, qs, bsums = parse_q8_k(xq, n_tok)
    np.testing.assert_array_equal(bsums, qs.astype(np.int64).reshape(n_tok, -1, 16, 16).sum(-1))
    xd = (d[..., None].astype(np.float64) * qs).reshape(n_tok, n)
    out = np.full((n_tok, rows), np.nan, np.float32)
    K.matmul_q(wr, rfmt, xq, out)
    if fmt in ("q2_k", "q4_k", "q5_k"):   # two terms, each exact in int32 and scaled by its own fma
        wd, magnitude = q4_k_parts(w, fmt)
        tol = 1e-5 * (np.abs(xd) @ magnitude.T) + 1e-30
    else:   # exact integers, one rounding of d_w * d_x and one fma a super-block
        wd = np.asarray(gq.dequantize(w.reshape(-1), getattr(T, fmt.upper())), np.float64).reshape(rows, n)
        tol = 1e-6 * (n // 256) * (np.abs(xd) @ np.abs(wd).T) + 1e-30
    err = np.abs(out - xd @ wd.T)
    assert np.all(err <= tol), np.max(err / tol)
    check_token_bits(wr, rfmt, x, out)
    if K.capabilities()["active"] == "avx512":
        # the operations of the AVX-512 row kernels in their order (csrc/repack_k.h)
        file_out = np.empty_like(out)
        K.matmul_q(w, fmt, xq, file_out)
        np.testing.assert_array_equal(out, file_out)


def check_extremes(w, fmt, wd, rtol, magnitude=None):
    """Repacked w (format fmt, float64 values wd) against activations at +-127 (all
    +1000, all -1000, alternating): within rtol of |x| . magnitude (|wd| by default)."""
    rows, n = wd.shape
    wr, rfmt = K.repack(w, fmt)
    x = np.full((3, n), 1000.0, np.float32)
    x[1] = -1000.0
    x[2, 1::2] = -1000.0
    xq = activations(rfmt, x)
    d, qs, _ = parse_q8_k(xq, 3)
    assert np.abs(qs).min() >= 127
    xd = (d[..., None].astype(np.float64) * qs).reshape(3, n)
    out = np.empty((3, rows), np.float32)
    K.matmul_q(wr, rfmt, xq, out)
    err = np.abs(out - xd @ wd.T)
    assert np.all(err <= rtol * (np.abs(xd) @ np.abs(wd if magnitude is None else magnitude).T)), err


@pytest.mark.parametrize("fmt", ["q4_k", "q5_k"])
def test_repacked_q4_k_extremes(isa, fmt):
    """Every nibble 15 (Q5_K: every fifth bit set, so q = 31), every scale and min 63,
    activations at +-127: the largest integer sums the kernel forms (repack_k.h: below
    2^25, Q5_K 2^26), against float64."""
    rows, n = 16, 512
    qs = 48 if fmt == "q5_k" else 16             # Q5_K: qh[32] before qs
    blocks = np.zeros((rows, n // 256, K_FORMATS[fmt]), np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(2.0 ** -10).tobytes(), np.uint8)
    blocks[:, :, 2:4] = np.frombuffer(np.float16(2.0 ** -9).tobytes(), np.uint8)
    blocks[:, :, 4:16] = 0xFF
    blocks[:, :, 16:] = 0xFF
    blocks[1::2, :, qs:] = 0xF0                  # odd rows: nibble 0 in the even sub-blocks
    if fmt == "q5_k":
        blocks[2::4, :, 16:48] = 0               # rows 2, 6, ...: no fifth bits
    w = blocks.reshape(rows, -1)
    wd, magnitude = q4_k_parts(w, fmt)
    top = 31 if fmt == "q5_k" else 15         # the largest q present: d*sc*q - dmin*m
    assert np.isclose(wd.max(), 63 * (top * 2.0 ** -10 - 2.0 ** -9))
    check_extremes(w, fmt, wd, 1e-5, magnitude)


def test_repacked_q6_k_extremes(isa):
    """Every q 63 or 0, scales at -128 and 127, activations at +-127 (and -128 where
    Q8_K rounds there): the largest integer sums the kernel forms (repack_k.h: below
    2^29), against float64 of gguf's dequantization."""
    rows, n = 32, 512
    blocks = np.zeros((rows, n // 256, 210), np.uint8)
    blocks[:, :, 0:192] = 0xFF                    # ql, qh: q = 63 everywhere
    blocks[1::2, :, 0:128] = 0xF0                 # odd rows: the low nibbles 0 (q = 48)
    blocks[2::4, :, 128:192] = 0x00               # rows 2, 6, ...: top bits 0 (q = 15)
    blocks[3::4, :, 128:192] = 0x00               # rows 3, 7, ...: q = 0 for the low nibbles
    blocks[:, :, 192:208] = np.frombuffer(np.int8([127, -128] * 8).tobytes(), np.uint8)
    blocks[3::4, :, 192:208] = np.frombuffer(np.int8([-128] * 16).tobytes(), np.uint8)
    blocks[:, :, 208:210] = np.frombuffer(np.float16(2.0 ** -12).tobytes(), np.uint8)
    w = blocks.reshape(rows, -1)
    wd = np.asarray(gq.dequantize(w.reshape(-1), T.Q6_K), np.float64).reshape(rows, n)
    assert np.abs(wd).max() == 128 * 32 * 2.0 ** -12   # scale -128 and q - 32 = -32
    check_extremes(w, "q6_k", wd, 1e-6)


def test_repacked_q2_k_extremes(isa):
    """q at 3 and 0, every scale and min 15, activations at +-127, against float64."""
    rows, n = 16, 512
    blocks = np.zeros((rows, n // 256, 84), np.uint8)
    blocks[:, :, 0:16] = 0xFF                    # scale and min 15
    blocks[:, :, 16:80] = 0xFF                   # q = 3
    blocks[1::2, :, 16:80] = 0x00                # odd rows: q = 0
    blocks[:, :, 80:82] = np.frombuffer(np.float16(2.0 ** -10).tobytes(), np.uint8)
    blocks[:, :, 82:84] = np.frombuffer(np.float16(2.0 ** -9).tobytes(), np.uint8)
    w = blocks.reshape(rows, -1)
    wd, magnitude = q4_k_parts(w, "q2_k")
    assert np.isclose(wd.max(), 15 * 3 * 2.0 ** -10 - 15 * 2.0 ** -9)
    check_extremes(w, "q2_k", wd, 1e-5, magnitude)


def test_repacked_q3_k_extremes(isa):
    """u at 7 (q = 3, hmask set) and 0 (q = -4), scales at -32 and 31, activations at
    +-127: the largest integer sums the kernel forms, against float64 of gguf's
    dequantization."""
    rows, n = 16, 512
    blocks = np.zeros((rows, n // 256, 110), np.uint8)
    blocks[:, :, 0:96] = 0xFF                    # hmask and qs: u = 7 everywhere
    blocks[1::2, :, 0:96] = 0x00                 # odd rows: u = 0 (q - 4 = -4)
    blocks[:, :, 96:108] = 0xFF                  # scales: 63 - 32 = 31
    blocks[2::4, :, 96:108] = 0x00               # rows 2, 6, ...: 0 - 32 = -32
    blocks[3::4, :, 96:108] = 0x00               # rows 3, 7, ...: -32 with u = 0
    blocks[:, :, 108:110] = np.frombuffer(np.float16(2.0 ** -10).tobytes(), np.uint8)
    w = blocks.reshape(rows, -1)
    wd = np.asarray(gq.dequantize(w.reshape(-1), T.Q3_K), np.float64).reshape(rows, n)
    assert np.abs(wd).max() == 32 * 4 * 2.0 ** -10
    check_extremes(w, "q3_k", wd, 1e-6)


def test_repacked_iq4_xs_extremes(isa):
    """Levels at -127 (nibble 0) and 113 (nibble 15), scales at -32 and 31, activations
    at +-127: the largest integer sums the kernel forms (its level + 128 products, and
    the offset it takes back), against float64 of gguf's dequantization."""
    rows, n = 16, 512
    blocks = np.zeros((rows, n // 256, 136), np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(2.0 ** -12).tobytes(), np.uint8)
    blocks[:, :, 2:4] = 0xFF                     # scales_h: ls = 63 - (0 or 48) ...
    blocks[:, :, 4:8] = 0xFF                     # ... scales_l: every ls 63, scale 31
    blocks[1::2, :, 2:8] = 0x00                  # odd rows: every ls 0, scale -32
    blocks[:, :, 8:] = 0x00                      # nibble 0: level -127
    blocks[2::4, :, 8:] = 0xFF                   # rows 2, 6, ...: nibble 15, level 113
    w = blocks.reshape(rows, -1)
    wd = np.asarray(gq.dequantize(w.reshape(-1), T.IQ4_XS), np.float64).reshape(rows, n)
    assert np.abs(wd).max() == 32 * 127 * 2.0 ** -12
    check_extremes(w, "iq4_xs", wd, 1e-6)


@pytest.mark.parametrize("fmt", FILE_FORMATS)
@pytest.mark.parametrize("n_tok", [8, 11])
def test_every_kernel_set_gives_the_scalar_bits(fmt, n_tok):
    w = make_weights(fmt, 48, 1280, 5)
    x = np.random.default_rng(6).standard_normal((n_tok, 1280)).astype(np.float32)
    wr, rfmt = K.repack(w, fmt)
    previous = K.capabilities()["active"]
    results = {}
    try:
        for isa in K.capabilities()["available"]:
            K.set_isa(isa)
            out = np.empty((n_tok, 48), np.float32)
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
            assert K.repack_type("iq2_xxs") is None
    finally:
        K.set_isa(previous)


def test_bad_arguments_are_refused():
    w = make_weights("q4_0", 32, 64, 1)
    with pytest.raises(ValueError, match="16 rows"):
        K.repack(w[:17], "q4_0")
    with pytest.raises(ValueError, match="no repacked format"):
        K.repack(w, "iq2_xxs")
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


def decode_with_repack(monkeypatch, name, repack, matrix):
    """The installed model `name` loaded with INFER_REPACK=repack: the file's and the
    loaded format of layer 0's `matrix` and the output head, the logits after a prompt,
    16 greedy tokens and the state fingerprint."""
    from infer.state import fingerprint

    monkeypatch.setenv("INFER_REPACK", repack)
    with load_installed(name) as model:
        w = model.engine.weights
        kinds = {K.TYPE_NAMES[w.output.qtype], K.TYPE_NAMES[getattr(w.layers[0], matrix).qtype]}
        assert K.TYPE_NAMES[w.token_embd.qtype] == "q8_0"   # rows looked up: the file's
        ctx = model.create_context(n_ctx=96, temperature=0)
        ctx.prefill(model.tokenizer.encode("The three primary colors are"))
        first = np.array(ctx.logits)
        tokens = [ctx.next() for _ in range(16)]
        return kinds, first, tokens, fingerprint(model.engine)


def test_smollm2_repacked_decodes_as_the_file_does(monkeypatch):
    """SmolLM2 with its matrices repacked (the default where the kernel set has a
    faster kernel) against INFER_REPACK=0: the same greedy tokens and logits, the
    same state fingerprint."""
    kinds_file, logits_file, tokens_file, fp_file = decode_with_repack(monkeypatch, "smollm2", "0", "wq")
    kinds, logits, tokens, fp = decode_with_repack(monkeypatch, "smollm2", "1", "wq")
    file_kinds = {"q8_0", "q4_1"}
    assert kinds_file == file_kinds
    assert kinds == {K.repack_type(f) or f for f in file_kinds}
    assert tokens == tokens_file
    # the *_r16 kernels do the x86 row kernels' operations in their order: same bits
    np.testing.assert_array_equal(logits, logits_file)
    assert fp == fp_file


@pytest.mark.parametrize("ftype,k_kinds", [
    ("q5_k_m", {"q5_k", "q6_k"}),
    ("q2_k", {"q3_k"}),
    pytest.param("iq4_xs", {"iq4_xs", "q5_k"}, marks=pytest.mark.slow("IQ4_XS quantizing takes 11 s")),
])
def test_k_requantized_decodes_as_the_file_does(tmp_path, monkeypatch, ftype, k_kinds):
    """SmolLM2 requantized to Q5_K_M (its 1536-wide ffn_down rows in Q5_K and Q6_K,
    the rest in the fallbacks Q5_1 and Q8_0), Q2_K (ffn_down in Q3_K, the rest Q4_0) or
    IQ4_XS (ffn_down in IQ4_XS and Q5_K, the rest IQ4_NL),
    with its matrices repacked against INFER_REPACK=0: the same greedy tokens and logits."""
    from _tok_models import installed_path
    from infer.quantize import quantize_file

    import infer

    path = tmp_path / f"smollm2-{ftype}.gguf"
    quantize_file(installed_path("smollm2"), path, ftype)

    def run(repack):
        monkeypatch.setenv("INFER_REPACK", repack)
        with infer.load(str(path)) as model:
            kinds = {K.TYPE_NAMES[lw.w_down.qtype] for lw in model.engine.weights.layers}
            ctx = model.create_context(n_ctx=96, temperature=0)
            ctx.prefill(model.tokenizer.encode("The three primary colors are"))
            logits = [np.array(ctx.logits)]
            tokens = []
            for _ in range(8):
                tokens.append(ctx.next())
                logits.append(np.array(ctx.logits))
            return kinds, logits, tokens

    kinds_file, logits_file, tokens_file = run("0")
    kinds, logits, tokens = run("1")
    assert k_kinds <= kinds_file
    assert kinds == {K.repack_type(f) or f for f in kinds_file}
    assert tokens == tokens_file
    for got, want in zip(logits, logits_file):
        np.testing.assert_array_equal(got, want)


def test_gemma3_repacked_decodes_as_the_file_does(monkeypatch):
    """Gemma 3 keeps attn_q/k and ffn_gate/up (and half its attn_v) in Q5_0, attn_output
    in Q4_K, half its ffn_down in Q6_K and its head in Q8_0: with them repacked against
    INFER_REPACK=0, the same
    greedy tokens, the same logits after a multi-token prefill and after each step,
    the same state fingerprint."""
    from infer.state import fingerprint

    def run(repack):
        monkeypatch.setenv("INFER_REPACK", repack)
        with load_installed("gemma3") as model:
            w = model.engine.weights
            layer = w.layers[0]
            kinds = ({K.TYPE_NAMES[getattr(layer, m).qtype] for m in ("wq", "wk", "w_gate", "w_up")},
                     {K.TYPE_NAMES[w.output.qtype], K.TYPE_NAMES[layer.wo.qtype]},
                     {K.TYPE_NAMES[lw.w_down.qtype] for lw in w.layers})
            assert K.TYPE_NAMES[w.token_embd.qtype] == "q8_0"   # rows looked up: the file's
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
    assert kinds_file == ({"q5_0"}, {"q8_0", "q4_k"}, {"q4_k", "q6_k"})
    assert kinds == tuple({K.repack_type(f) or f for f in group} for group in kinds_file)
    assert tokens == tokens_file
    for got, want in zip(logits, logits_file):   # the x86 row kernels' operations: same bits
        np.testing.assert_array_equal(got, want)
    assert fp == fp_file


def test_release_pages_leaves_the_bytes_readable():
    """GGUFFile.release_pages drops the process's pages of a tensor: reading it again
    gives the same bytes (from the page cache or the file); a copy is left alone."""
    from _tok_models import installed_path
    from infer.gguf import GGUFFile

    g = GGUFFile(installed_path("smollm2"))
    try:
        view = g.tensors["blk.0.ffn_up.weight"].data
        before = np.array(view, copy=True)
        g.release_pages(view)
        np.testing.assert_array_equal(view, before)
        g.release_pages(before)   # not the map's memory: a no-op
        np.testing.assert_array_equal(view, before)
    finally:
        g.close()


@pytest.mark.parametrize("fmt", FILE_FORMATS)
def test_repack_into_a_given_array_gives_the_same_bytes(fmt):
    w = make_weights(fmt, 32, 256, 7)
    fresh, name = K.repack(w, fmt)
    out = np.full(w.shape, 0xA5, np.uint8)
    into, name2 = K.repack(w, fmt, out)
    assert into is out and name2 == name
    assert np.array_equal(into, fresh)


def test_repack_refuses_a_bad_out():
    w = make_weights("q4_0", 32, 64, 1)
    with pytest.raises(ValueError, match="out: expected"):
        K.repack(w, "q4_0", np.empty((16, w.shape[1]), np.uint8))
    with pytest.raises(ValueError, match="out: expected"):
        K.repack(w, "q4_0", np.empty(w.shape, np.int8))
    with pytest.raises(ValueError, match="out: expected"):
        K.repack(w, "q4_0", np.empty((w.shape[0], 2 * w.shape[1]), np.uint8)[:, ::2])
    frozen = np.empty(w.shape, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out: expected"):
        K.repack(w, "q4_0", frozen)
    with pytest.raises(ValueError, match="overlaps"):
        K.repack(w, "q4_0", w)


def test_arena_parts_are_aligned_and_apart():
    from infer.arena import HUGE_PAGE, Arena
    shapes = [(16, 18), (48, 100), (32, 3)]
    arena = Arena(Arena.size_of(shapes))
    assert Arena.size_of(shapes) == 320 + 4800 + 128   # each part rounded up to 64 bytes
    parts = [arena.take(s) for s in shapes]
    starts = [p.ctypes.data for p in parts]
    assert starts[0] % HUGE_PAGE == 0
    assert [s - starts[0] for s in starts] == [0, 320, 320 + 4800]
    for p, s in zip(parts, shapes):
        assert p.shape == s and p.dtype == np.uint8 and p.flags.c_contiguous and p.flags.writeable
        assert not p.any()   # fresh memory reads as zeros
        p[...] = 1
    assert sum(int(p.sum()) for p in parts) == 16 * 18 + 48 * 100 + 32 * 3
    with pytest.raises(MemoryError, match="arena"):
        arena.take((1, 1))
    with pytest.raises(MemoryError, match="cannot map"):
        Arena(1 << 62)   # more address space than any machine maps
    with pytest.raises(ValueError, match="nbytes"):
        Arena(-1)
