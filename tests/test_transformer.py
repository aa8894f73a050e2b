"""The transformer family described as data (infer/variants/spec.py).

* Tiny random-weight models with every optional piece of the spec: the Python
  prefill and the fused C step (csrc/transformer_block.c) against a float64
  numpy forward pass (tests/reference/numpy_transformer.py), and against each
  other.
* Batched decode: B sequences at different positions in one step give the
  logits and greedy tokens of one-at-a-time decoding, on every ISA, on the tiny
  models and on SmolLM2 and Gemma 3.
* Misuse: the public TransformerDecoder checks every size of its config against
  the matrices, and token ids and positions, before the GIL is released;
  metadata that would load wrongly is refused at load naming the key; closing a
  model while another thread decodes gives that thread ModelClosedError.
"""
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from reference.numpy_transformer import forward as reference_forward

from infer import kernels as K
from infer.gguf import GGUFError, GGUFFile, GGUFWriter, default_model_path, gemma3_model_path
from infer.runtime import (ContextOverflowError, ModelClosedError, UnsupportedModelError, decode_batch,
                           next_batch)
from infer.tensor import Tensor
from infer.variants.gemma3 import Gemma3Engine
from infer.variants.llama import LlamaEngine
from infer.variants.spec import LayerSpec, Rope, TransformerSpec
from infer.variants.transformer import TransformerEngine, _build_decoder, decoder_arguments
from scripted import GreedySampler
from under_test import IMPORT_ROOT

DIM, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 4, 2, 16, 96, 200
FACTORS = tuple(float(f) for f in np.linspace(1.0, 8.0, HEAD_DIM // 2))

#: every optional piece on, separate tensors
EVERYTHING = TransformerSpec(
    dim=DIM, n_layers=3, n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM, ffn_dim=FFN,
    vocab_size=VOCAB, max_seq_len=64, rms_eps=1e-5,
    layers=(LayerSpec(rope=Rope("neox", 10000.0, 0.5, FACTORS, 1.1), window=5),
            LayerSpec(rope=None),
            LayerSpec(rope=Rope("norm", 500.0, rot_dim=HEAD_DIM // 2))),
    qkv_bias=True, qk_norm=True, post_attn_norm=True, post_ffn_norm=True, activation="gelu_tanh",
    query_scale=0.3, attn_softcap=3.0, final_softcap=5.0, embd_scale=2.0, residual_scale=0.7,
    logit_scale=1.5, tied_head=False)
#: fused tensors (Phi-3's attn_qkv and gate|up ffn_up), tied head, SwiGLU
FUSED = TransformerSpec(
    dim=DIM, n_layers=2, n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM, ffn_dim=FFN,
    vocab_size=VOCAB, max_seq_len=64, rms_eps=1e-6,
    layers=(LayerSpec(rope=Rope("neox", 10000.0)), LayerSpec(rope=Rope("neox", 10000.0), window=3)),
    fused_qkv=True, fused_gate_up=True, tied_head=True)
SPECS = {"everything": EVERYTHING, "fused": FUSED}


def random_weights(spec, seed):
    """GGUF-named float32 tensors for spec: scaled so the logits have a std of a few units."""
    r = np.random.default_rng(seed)
    d, q_dim, kv_dim = spec.dim, spec.q_dim, spec.kv_dim

    def mat(rows, cols):
        return (r.standard_normal((rows, cols)) / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * r.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": r.standard_normal((spec.vocab_size, d)).astype(np.float32),
         "output_norm.weight": norm(d)}
    if not spec.tied_head:
        w["output.weight"] = 3.0 * mat(spec.vocab_size, d)
    for i in range(spec.n_layers):
        b = f"blk.{i}."
        w[b + "attn_norm.weight"], w[b + "ffn_norm.weight"] = norm(d), norm(d)
        if spec.fused_qkv:
            w[b + "attn_qkv.weight"] = mat(q_dim + 2 * kv_dim, d)
        else:
            w[b + "attn_q.weight"], w[b + "attn_k.weight"] = 2.0 * mat(q_dim, d), 2.0 * mat(kv_dim, d)
            w[b + "attn_v.weight"] = mat(kv_dim, d)
        if spec.qkv_bias:
            for part, n in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
                w[b + part + ".bias"] = (0.5 * r.standard_normal(n)).astype(np.float32)
        if spec.qk_norm:
            w[b + "attn_q_norm.weight"], w[b + "attn_k_norm.weight"] = norm(spec.head_dim), norm(spec.head_dim)
        w[b + "attn_output.weight"] = mat(d, q_dim)
        if spec.post_attn_norm:
            w[b + "post_attention_norm.weight"] = norm(d)
        if spec.post_ffn_norm:
            w[b + "post_ffw_norm.weight"] = norm(d)
        if spec.fused_gate_up:
            w[b + "ffn_up.weight"] = mat(2 * spec.ffn_dim, d)
        else:
            w[b + "ffn_gate.weight"], w[b + "ffn_up.weight"] = mat(spec.ffn_dim, d), mat(spec.ffn_dim, d)
        w[b + "ffn_down.weight"] = mat(d, spec.ffn_dim)
    return w


def reference_logits(spec, weights, tokens):
    dense = {name.removesuffix(".weight").replace(".bias", "_bias"): a.astype(np.float64)
             for name, a in weights.items()}
    layers = [(None if L.rope is None else (L.rope.layout, L.rope.base, L.rope.scale, L.rope.freq_factors,
                                            L.rope.attn_factor, L.rope.rot_dim), L.window)
              for L in spec.layers]
    options = dict(n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads, head_dim=spec.head_dim,
                   rms_eps=spec.rms_eps, layers=layers, activation=spec.activation,
                   query_scale=spec.query_scale, attn_softcap=spec.attn_softcap,
                   final_softcap=spec.final_softcap, embd_scale=spec.embd_scale,
                   residual_scale=spec.residual_scale, logit_scale=spec.logit_scale)
    return reference_forward(dense, options, tokens)


def tiny_engine(spec, seed=0, qtype="f32"):
    weights = random_weights(spec, seed)
    tensors = {}
    for name, a in weights.items():
        kind = qtype if a.ndim == 2 else "f32"
        tensors[name] = Tensor.quantize(a, kind, name) if kind != "f32" else Tensor(name, "f32", a.shape, a)
    return TransformerEngine(spec, SimpleNamespace(metadata={}, tensors=tensors)), weights


@pytest.fixture(scope="module", params=sorted(SPECS))
def tiny(request):
    spec = SPECS[request.param]
    engine, weights = tiny_engine(spec)
    tokens = list(np.random.default_rng(7).integers(0, VOCAB, 12))
    return SimpleNamespace(spec=spec, engine=engine, weights=weights, tokens=tokens,
                           ref=reference_logits(spec, weights, tokens))


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def decode_one_at_a_time(engine, tokens, fused=True, kv_type="f32"):
    ctx = engine.create_context(n_ctx=32, kv_type=kv_type)
    ctx.fused_decode = fused
    out = []
    for t in tokens:
        ctx.prefill([t])
        out.append(ctx.logits.copy())
    return np.array(out)


# ---- the spec's pieces against the float64 reference ----------------------------------

FLIPS = {  # each piece switched off in turn
    "everything": [dict(attn_softcap=0.0), dict(final_softcap=0.0), dict(residual_scale=1.0),
                   dict(embd_scale=1.0), dict(logit_scale=1.0), dict(query_scale=None),
                   dict(layers=(LayerSpec(rope=Rope("neox", 10000.0, 0.5, FACTORS)),) + EVERYTHING.layers[1:]),
                   dict(layers=(LayerSpec(rope=Rope("neox", 10000.0, 0.5, None, 1.1), window=5),)
                        + EVERYTHING.layers[1:]),
                   dict(layers=EVERYTHING.layers[:2] + (LayerSpec(rope=Rope("norm", 500.0)),))],
    "fused": [dict(layers=(FUSED.layers[0], LayerSpec(rope=FUSED.layers[1].rope)))],
}


def test_reference_is_sensitive_to_every_piece(tiny):
    """The options matter on these tiny models: each one moves the reference logits."""
    name = "everything" if tiny.spec is EVERYTHING else "fused"
    for flip in FLIPS[name]:
        other = reference_logits(replace(tiny.spec, **flip), tiny.weights, tiny.tokens)
        assert np.abs(other - tiny.ref).max() > 1e-3, flip


def test_prefill_matches_reference(tiny):
    ctx = tiny.engine.create_context(n_ctx=32, kv_type="f32")
    for i in range(len(tiny.tokens)):   # one prefill per prefix: every position's logits
        ctx.truncate_to(0)
        ctx.prefill(tiny.tokens[:i + 1])
        assert cosine(ctx.logits, tiny.ref[i]) > 0.99999, i
        np.testing.assert_allclose(ctx.logits, tiny.ref[i], atol=2e-3 * np.abs(tiny.ref[i]).max())


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_fused_step_matches_reference_and_python_block(tiny, isa, kv_type):
    fused = decode_one_at_a_time(tiny.engine, tiny.tokens, True, kv_type)
    python = decode_one_at_a_time(tiny.engine, tiny.tokens, False, kv_type)
    min_cos = 0.99999 if kv_type == "f32" else 0.9999
    for i in range(len(tiny.tokens)):
        assert cosine(fused[i], tiny.ref[i]) > min_cos, i
        assert int(np.argmax(fused[i])) == int(np.argmax(tiny.ref[i])), i
    # the same kernels on the same inputs: equal up to float rounding (RoPE angles
    # by angle addition in prefill, tanh of float32 against tanhf)
    np.testing.assert_allclose(fused, python, rtol=0, atol=1e-4 * np.abs(python).max())


def test_fused_step_splits_long_attention(isa):
    """From 512 positions on, the fused step splits a sequence's attention in two
    position ranges and merges them by their softmax maxima and sums (csrc
    transformer_block.c, flash-decoding); its logits still match the Python block's,
    which attends in one pass, and a batch still gives each sequence its own logits.
    (ffn_dim 192 leaves room for the parts; layer 0's window of 5 is never split.)"""
    spec = replace(EVERYTHING, ffn_dim=192, max_seq_len=1024)
    engine, _ = tiny_engine(spec, seed=5)
    rng = np.random.default_rng(11)
    prompt = [int(t) for t in rng.integers(0, VOCAB, 600)]
    fused, python = (engine.create_context(n_ctx=700, kv_type="f32") for _ in range(2))
    python.fused_decode = False
    for c in (fused, python):
        c.prefill(prompt)
    for t in rng.integers(0, VOCAB, 4):
        fused.prefill([int(t)])
        python.prefill([int(t)])
        np.testing.assert_allclose(fused.logits, python.logits, rtol=0,
                                   atol=1e-4 * np.abs(python.logits).max())
    # spans on both sides of 512 in one batch
    check_batch_equals_singles(engine, [prompt[:505], prompt[:530], prompt[:9]], steps=12, n_ctx=700)


# ---- batched decode ------------------------------------------------------------------

def check_batch_equals_singles(engine, prompts, steps, n_ctx=32, rtol=1e-4):
    """Contexts holding `prompts` (different lengths: different positions) decode
    `steps` greedy tokens together and one at a time; logits and tokens agree."""
    batch = [engine.create_context(n_ctx=n_ctx, sampler=GreedySampler()) for _ in prompts]
    single = [engine.create_context(n_ctx=n_ctx, sampler=GreedySampler()) for _ in prompts]
    for b, s, p in zip(batch, single, prompts):
        b.prefill(p)
        s.prefill(p)
    for _ in range(steps):
        chosen = next_batch(batch)
        assert chosen == [s.next() for s in single]
        for b, s in zip(batch, single):
            assert b.tokens == s.tokens
            np.testing.assert_allclose(b.logits, s.logits, rtol=0, atol=rtol * np.abs(s.logits).max())
            assert int(np.argmax(b.logits)) == int(np.argmax(s.logits))


@pytest.mark.parametrize("n_seqs", [1, 2, 3, 8])
def test_batched_decode_tiny(tiny, isa, n_seqs):
    prompts = [tiny.tokens[:1 + (3 * i) % 9] for i in range(n_seqs)]
    check_batch_equals_singles(tiny.engine, prompts, steps=3)


def test_batched_decode_quantized_and_beyond_one_step(isa):
    """Q8_0 weights (the four-token kernels), and more sequences than one C step
    takes (split into several steps)."""
    engine, _ = tiny_engine(EVERYTHING, seed=3, qtype="q8_0")
    n = K.MAX_BATCH + 3
    prompts = [[(7 * i + j) % VOCAB for j in range(1 + i % 5)] for i in range(n)]
    check_batch_equals_singles(engine, prompts, steps=2)


def test_decode_batch_forced_tokens_and_rollback(tiny):
    """decode_batch appends the given tokens; a failing step leaves every context as it was."""
    a, b = (tiny.engine.create_context(n_ctx=8) for _ in range(2))
    a.prefill(tiny.tokens[:3])
    b.prefill(tiny.tokens[:7])
    decode_batch([a, b], [5, 6])
    assert a.tokens[-1] == 5 and b.tokens[-1] == 6 and a.n_past == 4 and b.n_past == 8
    before = (list(a.tokens), list(b.tokens), a.logits.copy())
    with pytest.raises(ContextOverflowError):
        decode_batch([a, b], [1, 2])   # b is full
    assert (a.tokens, b.tokens) == before[:2]
    np.testing.assert_array_equal(a.logits, before[2])


@pytest.fixture(scope="module")
def smollm2():
    if not default_model_path().exists():
        pytest.skip("SmolLM2 is not installed")
    f = GGUFFile(default_model_path())
    yield LlamaEngine(f)
    f.close()


@pytest.fixture(scope="module")
def gemma3():
    try:
        path = gemma3_model_path()
    except FileNotFoundError:
        pytest.skip("Gemma 3 270M is not installed")
    f = GGUFFile(path)
    yield Gemma3Engine(f)
    f.close()


PROMPT = [504, 3458, 282, 4649, 314, 7042, 30, 378, 3953]   # SmolLM2 ids; any ids do for Gemma


def skip_scalar_batch_of_8(isa, n_seqs):
    """The scalar set has no 4-row or 4x4 kernels, so csrc/matmul.c runs it one row and
    one token at a time whatever the batch: on a real model a batch of 8 there is the
    code of a batch of 3 at three times the cost (~30 s).  The SIMD sets, whose kernels
    take four tokens at a time, run 8 here, and test_batched_decode_tiny runs 8 on
    scalar too."""
    if isa == "scalar" and n_seqs > 3:
        pytest.skip("scalar runs a batch of 8 as it runs 3 (no vec_dot_4/4x4); the SIMD sets run 8")


@pytest.mark.parametrize("n_seqs", [1, 2, 3])
def test_batched_decode_smollm2(smollm2, isa, n_seqs):
    check_batch_equals_singles(smollm2, [PROMPT[:1 + (2 * i) % 9] for i in range(n_seqs)], steps=2)


def test_batched_decode_smollm2_of_8(smollm2):
    """A batch of 8 on the machine's own kernels (the other sets' run in the slow pass:
    ~16 s on AVX2)."""
    check_batch_equals_singles(smollm2, [PROMPT[:1 + (2 * i) % 9] for i in range(8)], steps=2)


@pytest.mark.parametrize("n_seqs", [1, 2, 3])
def test_batched_decode_gemma3(gemma3, n_seqs):
    """Gemma 3's batches on the machine's own kernels; every kernel set's below, in the
    slow pass (~35 s on the scalar and AVX2 sets; SmolLM2 runs them all by default)."""
    check_batch_equals_singles(gemma3, [[2] + PROMPT[:(2 * i) % 9] for i in range(n_seqs)], steps=2)


@pytest.mark.slow("a batch of 8 on every kernel set (Gemma 3: ~45 s per set), and Gemma 3's smaller batches "
                  "on the scalar and AVX2 sets (~35 s); the machine's own set runs them by default")
@pytest.mark.parametrize("model, n_seqs", [("smollm2", 8), ("gemma3", 2), ("gemma3", 3), ("gemma3", 8)])
def test_batched_decode_on_every_kernel_set(request, isa, model, n_seqs):
    skip_scalar_batch_of_8(isa, n_seqs)
    m = request.getfixturevalue(model)
    first = [2] if model == "gemma3" else []
    check_batch_equals_singles(m, [first + PROMPT[:(0 if first else 1) + (2 * i) % 9] for i in range(n_seqs)],
                               steps=2)


# ---- misuse of the public decoder (issue 15 item 3) -----------------------------------

@pytest.mark.parametrize("field, delta, match", [
    ("vocab_size", 1, "embd"), ("vocab_size", -1, "embd"), ("ffn_dim", 16, "gate"),
    ("dim", 32, "embd"), ("n_layers", 1, "layers"), ("n_heads", -2, "q_bias|wq"),
    ("n_kv_heads", -1, "k_bias|wk"), ("head_dim", -8, "q_norm|wq"),
])
def test_decoder_checks_config_against_matrices(tiny, field, delta, match):
    spec = tiny.spec
    bad = SimpleNamespace(**{f: getattr(spec, f) for f in (
        "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab_size", "rms_eps",
        "activation", "attn_scale", "attn_softcap", "final_softcap", "embd_scale",
        "residual_scale", "logit_scale")})
    setattr(bad, field, getattr(spec, field) + delta)
    args = decoder_arguments(spec, tiny.engine.live_weights())
    assert K.TransformerDecoder(spec, *args).max_batch == K.MAX_BATCH   # the engine's is accepted
    with pytest.raises(ValueError, match=match):
        K.TransformerDecoder(bad, *args)


def test_decoder_checks_tokens_positions_and_caches(tiny):
    eng = tiny.engine
    dec = _build_decoder(tiny.spec, eng.live_weights())
    ctx = eng.create_context(n_ctx=16)
    kc, vc, logits = ctx.k_cache, ctx.v_cache, ctx.logits
    for token in (VOCAB, -1, 2**32 + 3):
        with pytest.raises((ValueError, OverflowError), match="tokens|int"):
            dec.decode(token, 0, kc, vc, logits)
    for pos in (16, -1):
        with pytest.raises(ValueError, match="positions"):
            dec.decode(3, pos, kc, vc, logits)
    with pytest.raises(ValueError, match="shape"):
        dec.decode(3, 0, kc[:, :1], vc[:, :1], logits)
    with pytest.raises(ValueError, match="logits"):
        dec.decode(3, 0, kc, vc, logits[:-1])
    with pytest.raises(ValueError, match=r"k_caches\[1\]: shares memory with k_caches\[0\]"):
        dec.step([kc, kc], [vc, vc], [1, 2], [0, 0], [logits, logits.copy()])
    with pytest.raises(ValueError, match="1 to"):
        dec.step([], [], [], [], [])
    dec.release()
    with pytest.raises(RuntimeError, match="closed"):
        dec.decode(3, 0, kc, vc, logits)


def test_decoder_step_refuses_overlaps_misalignment_and_non_integers(tiny):
    """step checked only that no cache's start address appeared twice: a V cache
    overlapping its K cache, logits inside a cache or given to two sequences were
    written over each other; caches and logits at odd addresses reached the C step;
    a token or position of 1.5 (or True) was truncated to 1."""
    eng = tiny.engine
    dec = _build_decoder(tiny.spec, eng.live_weights())
    ctx = eng.create_context(n_ctx=16)
    kc, vc, logits = ctx.k_cache, ctx.v_cache, ctx.logits
    flat = np.zeros(2 * kc.size, kc.dtype)
    k_over, v_over = flat[:kc.size].reshape(kc.shape), flat[8:kc.size + 8].reshape(kc.shape)
    with pytest.raises(ValueError, match=r"v_caches\[0\]: shares memory with k_caches\[0\]"):
        dec.step([k_over], [v_over], [1], [0], [logits])
    inside = kc.reshape(-1).view(np.uint8)[:logits.nbytes].view(np.float32)
    with pytest.raises(ValueError, match=r"logits\[0\]: shares memory with k_caches\[0\]"):
        dec.step([kc], [vc], [1], [0], [inside])
    with pytest.raises(ValueError, match=r"logits\[1\]: shares memory with logits\[0\]"):
        dec.step([kc, kc.copy()], [vc, vc.copy()], [1, 2], [0, 0], [logits, logits])
    odd = np.frombuffer(bytearray(kc.nbytes + 1), np.uint8)[1:].view(kc.dtype).reshape(kc.shape)
    with pytest.raises(ValueError, match="aligned"):
        dec.step([odd], [vc], [1], [0], [logits])
    with pytest.raises(ValueError, match=r"logits\[0\]: starts at an address"):
        dec.step([kc], [vc], [1], [0], [np.frombuffer(bytearray(logits.nbytes + 1), np.uint8)[1:].view(np.float32)])
    for bad in (1.5, np.float64(2.0), True, "1"):
        with pytest.raises(TypeError, match=r"tokens\[0\]: expected an integer"):
            dec.step([kc], [vc], [bad], [0], [logits])
        with pytest.raises(TypeError, match=r"positions\[0\]: expected an integer"):
            dec.step([kc], [vc], [1], [bad], [logits])
        with pytest.raises(TypeError, match=r"tokens\[0\]: expected an integer"):
            dec.decode(bad, 0, kc, vc, logits)
    assert not logits.any() and not kc.any()   # nothing ran
    halves = np.zeros((2,) + kc.shape, kc.dtype)   # one buffer, disjoint halves: fine
    dec.step([halves[0]], [halves[1]], [np.int64(1)], [np.uint8(0)], [logits])
    assert logits.any()


REINIT_SCRIPT = """
import sys
sys.path[:0] = [sys.argv[1]]
import test_transformer as T
from infer import kernels as K
from infer.variants.transformer import decoder_arguments
spec = T.SPECS[sorted(T.SPECS)[0]]
engine, _ = T.tiny_engine(spec)
embd, output, output_norm, layers = decoder_arguments(spec, engine.live_weights())
dec = K.TransformerDecoder(spec, embd, output, output_norm, layers)
ctx = engine.create_context(n_ctx=16)
dec.decode(3, 0, ctx.k_cache, ctx.v_cache, ctx.logits)
bad = [dict(layer) for layer in layers]
bad[-1]["window"] = -1   # refused after the first binding was dropped
try:
    dec.__init__(spec, embd, output, output_norm, bad)
except RuntimeError as e:
    print(e)
dec.decode(3, 1, ctx.k_cache, ctx.v_cache, ctx.logits)
del dec, layers, embd, output, output_norm, engine
import gc; gc.collect()
print("ok")
"""


def test_decoder_cannot_be_initialised_twice():
    """A second __init__ replaced the list holding the scratch buffers and weights the
    C step points to: when it then failed (or succeeded), the next step or the garbage
    collector read freed memory (a segfault).  It is refused; the first binding stays."""
    r = subprocess.run([sys.executable, "-c", REINIT_SCRIPT, os.path.dirname(os.path.abspath(__file__))],
                       capture_output=True, text=True, timeout=300, cwd=IMPORT_ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["TransformerDecoder: already initialised; build a new one", "ok"], r.stdout


# ---- metadata checked at load (issue 15 items 8 and 12) --------------------------------

#: what the tiny files of write_tiny_file are, by the llama and gemma3 rules
_TINY = dict(dim=DIM, n_layers=2, n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM, ffn_dim=FFN,
             vocab_size=VOCAB, max_seq_len=64, rms_eps=float(np.float32(1e-5)))
TINY_FILE_SPECS = {
    "llama": TransformerSpec(**_TINY, layers=(LayerSpec(rope=Rope("norm", 10000.0)),) * 2),
    # 2 layers: both local (global is l % 6 == 5), window 4, RoPE base 10000
    "gemma3": TransformerSpec(**_TINY, layers=(LayerSpec(rope=Rope("neox", 10000.0), window=4),) * 2,
                              qk_norm=True, post_attn_norm=True, post_ffn_norm=True,
                              activation="gelu_tanh", query_scale=0.25, embd_scale=8.0),
}


def write_tiny_file(path, arch="llama", overrides=(), extra_tensors=()):
    """A 2-layer model file of architecture arch with random F32 weights (tied head)."""
    md = {"general.architecture": arch, f"{arch}.block_count": 2, f"{arch}.embedding_length": DIM,
          f"{arch}.feed_forward_length": FFN, f"{arch}.attention.head_count": HEADS,
          f"{arch}.attention.head_count_kv": KV_HEADS, f"{arch}.context_length": 64,
          f"{arch}.attention.layer_norm_rms_epsilon": 1e-5, f"{arch}.rope.freq_base": 10000.0}
    if arch == "gemma3":
        md[f"{arch}.attention.sliding_window"] = 4
        md[f"{arch}.attention.key_length"] = HEAD_DIM
    md.update(overrides)
    w = GGUFWriter()
    for key, value in md.items():
        w.add_metadata(key, value)
    for name, a in list(random_weights(TINY_FILE_SPECS[arch], 1).items()) + list(extra_tensors):
        w.add_tensor(name, a)
    w.write(path)
    return path


BAD_METADATA = [
    ("attention.head_count", 0), ("attention.head_count", float("nan")),
    ("attention.head_count", -4), ("attention.head_count_kv", 3),
    ("block_count", 1.9), ("block_count", 0), ("block_count", 3), ("block_count", 2**32 - 1),
    ("block_count", float("inf")), ("embedding_length", "64"),
    ("context_length", -5), ("attention.layer_norm_rms_epsilon", -1e-5),
    ("attention.layer_norm_rms_epsilon", float("nan")), ("rope.freq_base", -1.0),
    ("rope.freq_base", 0.0), ("feed_forward_length", float("inf")),
    ("rope.scaling.type", "dynamic"), ("rope.dimension_count", 7), ("rope.dimension_count", 64),
]


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("key, value", BAD_METADATA, ids=[f"{k}={v}" for k, v in BAD_METADATA])
def test_bad_metadata_is_refused_at_load_naming_the_key(tmp_path, arch, key, value):
    path = write_tiny_file(tmp_path / "m.gguf", arch, {f"{arch}.{key}": value})
    engine_class = {"llama": LlamaEngine, "gemma3": Gemma3Engine}[arch]
    with GGUFFile(path) as f:
        t0 = time.perf_counter()
        # GGUFError for a malformed value, UnsupportedModelError for maths infer lacks
        with pytest.raises((GGUFError, UnsupportedModelError), match=key.replace(".", r"\.")):
            engine_class(f)
        assert time.perf_counter() - t0 < 2.0   # nothing is built per claimed layer first


def test_huge_sliding_window_is_refused_at_load(tmp_path):
    path = write_tiny_file(tmp_path / "m.gguf", "gemma3", {"gemma3.attention.sliding_window": 2**40})
    with GGUFFile(path) as f, pytest.raises(GGUFError, match=r"sliding_window"):
        Gemma3Engine(f)


def test_the_tiny_files_load_and_match_their_reference(tmp_path):
    """The files the metadata tests damage are valid as written: each loads as the
    spec its family's rules give (written out here by hand) and decodes to the
    float64 reference's logits."""
    for arch in ("llama", "gemma3"):
        path = write_tiny_file(tmp_path / f"{arch}.gguf", arch)
        with GGUFFile(path) as f:
            engine = (LlamaEngine if arch == "llama" else Gemma3Engine)(f)
            assert engine.spec == TINY_FILE_SPECS[arch]
            tokens = [3, 1, 4, 1, 5, 9, 2, 6]
            logits = decode_one_at_a_time(engine, tokens)
            engine.close()
        spec = TINY_FILE_SPECS[arch]
        ref = reference_logits(spec, random_weights(spec, 1), tokens)
        assert min(cosine(a, b) for a, b in zip(logits, ref)) > 0.9999


def test_unknown_tensor_is_refused_naming_it(tmp_path):
    """q biases on a llama file (llama.cpp allows them, infer's llama spec has none)
    change the maths: refused, not ignored."""
    path = write_tiny_file(tmp_path / "m.gguf", "llama",
                           extra_tensors=[("blk.0.attn_q.bias", np.ones(HEADS * HEAD_DIM, np.float32))])
    with GGUFFile(path) as f, pytest.raises(UnsupportedModelError, match="blk.0.attn_q.bias"):
        LlamaEngine(f)


# ---- closing while another thread decodes (issue 15 item 1) --------------------------

CLOSE_WHILE_DECODING = """
import threading, time, infer
m = infer.load(n_threads=2)
ctx = m.create_context(n_ctx=128)
ctx.prefill(m.tokenizer.encode("Once upon a time"))
errors, steps = [], [0]
def loop():
    try:
        while True:
            if ctx.n_past >= 120:
                ctx.truncate_to(4)
            ctx.next()
            steps[0] += 1
    except BaseException as exc:
        errors.append(exc)
t = threading.Thread(target=loop)
t.start()
time.sleep(0.5)
m.close()
t.join(30)
print(steps[0] > 0, type(errors[0]).__name__, errors[0])
"""


def test_close_while_another_thread_decodes_is_a_typed_error():
    if not default_model_path().exists():
        pytest.skip("SmolLM2 is not installed")
    proc = subprocess.run([sys.executable, "-c", CLOSE_WHILE_DECODING], cwd=IMPORT_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[:2] == ["True", "ModelClosedError"], proc.stdout
    assert issubclass(ModelClosedError, RuntimeError)


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (False, TypeError), (-1, ValueError)])
def test_n_ctx_zero_or_false_is_refused_not_the_trained_length(bad, exc):
    """``n_ctx or max_seq_len`` made 0 and False mean "the trained length" (8192 positions
    for SmolLM2, 32768 for Gemma 3) where the Context refuses them; None is the default."""
    engine, _ = tiny_engine(SPECS[sorted(SPECS)[0]])
    with pytest.raises(exc, match="n_ctx"):
        engine.create_context(n_ctx=bad)
    assert engine.create_context(n_ctx=None).n_ctx == engine.max_seq_len
