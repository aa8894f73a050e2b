"""gpt-oss (GGUF ``gpt-oss``) on tiny random-weight files (tests/tiny_models.py
`write_gptoss`: 4 layers, a window of 32 on the even ones, YaRN, attention sinks,
q/k/v/output biases, 8 experts of width 512 with biases, 2 used, F16, Q8_0 and MXFP4
experts), against two independent references:

* tests/reference/numpy_gptoss.py, a float64 numpy forward pass;
* llama.cpp's teacher-forced logits on the same files (tests/data/llama_cpp_gptoss.npz,
  tests/data/README.md).

Each piece of the architecture is shown to matter: the reference without it
(sinks, biases, window, the SwiGLU's clamp, softmax over the chosen experts only)
moves far from llama.cpp's logits.  The prompts' seeds were chosen so that every
choice of experts is clear of a near-tie (checked below).
"""
import dataclasses
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import (LLAMA_CPP_MIN_COS, assert_batched_equals_alone, assert_scheduler_batches_like_alone,
                           cosines, recorded_logits, recording, tiny_file)
from reference.numpy_gptoss import GptOss
from scripted import GreedySampler

import infer
import infer.kernels as K
from infer import UnsupportedModelError
from infer.gguf import GGUFError

NAMES = list(tm.GPTOSS)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_gptoss.npz")
#: cosine of infer's logits to the float64 reference at every position: F16 experts
#: add float32 rounding only, Q8_0 experts quantize their inputs to Q8_0; the experts'
#: large gate and up values (gain 3, up to the clamp) amplify both (measured: F16
#: 0.999977 at worst, largest difference 0.066; Q8_0 0.9976, median 0.99989; MXFP4,
#: whose inputs are quantized to Q8_0, 0.9970, median 0.99988)
MIN_COS = {"f16": 0.99995, "q8_0": 0.995, "mxfp4": 0.995}
#: llama.cpp rounds activations to F16 before F16 products and to 8 bits before Q8_0
#: and MXFP4 ones (measured: F16 0.999991, Q8_0 0.99944, MXFP4 0.99986)
LLAMA_MIN_COS = {"f16": LLAMA_CPP_MIN_COS, "q8_0": 0.999, "mxfp4": 0.999}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_gptoss")


@pytest.fixture(scope="module")
def references(tiny_dir):
    """name -> (the reference, its logits of the prompt)."""
    out = {}
    for name in NAMES:
        ref = GptOss(tiny_file(name, tiny_dir))
        out[name] = (ref, ref.forward(tm.prompt(name)))
    return out


@pytest.fixture(scope="module")
def recorded():
    return recording(DATA)


def infer_logits(name, tiny_dir, tokens=None):
    t = tm.GPTOSS[name]
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert model.engine.architecture == "gpt-oss"
        ctx = model.engine.create_context(n_ctx=t.n_ctx)
        return np.array(ctx.prefill(tm.prompt(name) if tokens is None else tokens, all_logits=True), np.float64)


def test_the_spec_reads_every_piece(tiny_dir):
    with infer.load(tiny_file("gpt-oss", tiny_dir)) as model:
        spec = model.engine.spec
    assert spec.moe is not None and (spec.moe.n_experts, spec.moe.n_used) == (8, 2)
    assert spec.moe.gating == "softmax_weight" and spec.moe.router_bias and spec.moe.expert_biases
    assert not spec.moe.norm_weights
    assert spec.attn_sinks and spec.qkv_bias and spec.out_bias and spec.activation == "swiglu_oai"
    assert [layer.window for layer in spec.layers] == [tm.GPTOSS_WINDOW, 0, tm.GPTOSS_WINDOW, 0]
    assert all(layer.rope.neox and layer.rope.freq_factors is not None for layer in spec.layers)   # YaRN
    assert spec.head_dim == 64 and spec.q_dim == 256 != spec.dim


@pytest.mark.parametrize("name", NAMES)
def test_prefill_matches_reference_at_every_position(name, tiny_dir, references):
    ref, expected = references[name]
    assert min(float(g.min()) for g in ref.gaps.values()) > 0.04   # no near-tie in the routing
    cos = cosines(infer_logits(name, tiny_dir), expected)
    assert cos.min() >= MIN_COS[tm.GPTOSS[name].expert_type], (cos.min(), int(cos.argmin()))


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
def test_decode_matches_prefill(python, tiny_dir):
    """One token at a time, through the fused C step or the Python blocks, past 512
    positions (the fused step splits a span that long in two and merges the parts
    with the sinks; the Python attention splits it by thread): the logits of the
    batched prefill of the same tokens."""
    tokens = np.random.default_rng(5).integers(0, tm.VOCAB - len(tm.SPECIALS), 530)
    head = 520
    with infer.load(tiny_file("gpt-oss", tiny_dir)) as model:
        whole = np.array(model.engine.create_context(n_ctx=1024).prefill(tokens, all_logits=True))
        ctx = model.engine.create_context(n_ctx=1024, sampler=GreedySampler())
        ctx.fused_decode = not python
        ctx.prefill(tokens[:head])
        rows = []
        for tok in tokens[head:]:
            ctx.prefill([int(tok)])
            rows.append(ctx.logits.copy())
    np.testing.assert_allclose(np.array(rows), whole[head:], rtol=0, atol=1e-4)


@pytest.mark.parametrize("python", [False, True], ids=["fused", "python"])
def test_batched_decode_equals_one_at_a_time(python, tiny_dir):
    """Engine.forward_batch (what `infer serve` steps) over three conversations at
    different positions, fused or through the Python blocks, gives each the logits,
    bit for bit, and the greedy tokens of decoding it alone."""
    prompt = tm.prompt("gpt-oss")
    starts = [prompt[:5], prompt[20:61], prompt[60:96]]
    with infer.load(tiny_file("gpt-oss", tiny_dir)) as model:
        assert_batched_equals_alone(model.engine, starts, 8, 256, fused=not python)


def test_the_server_scheduler_decodes_them_together(tiny_dir):
    """`infer serve`'s scheduler: three requests decoded together (batched fused
    steps) give each the greedy tokens it gets alone."""
    prompt = tm.prompt("gpt-oss")
    prompts = [[int(t) for t in prompt[i * 30:i * 30 + 7 + 5 * i]] for i in range(3)]
    with infer.load(tiny_file("gpt-oss", tiny_dir)) as model:
        assert_scheduler_batches_like_alone(model, prompts, 128, 8)


def test_generate_chat_and_info(tiny_dir, capsys):
    """The user paths: generate, a chat session (the file has no template: chatml),
    and `infer info`'s active parameters, counted by hand from the tiny shape."""
    from infer.cli import main

    path = tiny_file("gpt-oss", tiny_dir)
    with infer.load(path) as model:
        text = "".join(infer.generate(model, "The quick brown fox", max_tokens=8, temperature=0))
        assert text == "".join(infer.generate(model, "The quick brown fox", max_tokens=8, temperature=0))
        with pytest.warns(Warning, match="no chat template"):
            session = infer.ChatSession(model, temperature=0)
        assert session.send("Hi", max_tokens=4).text is not None
    t = tm.GPTOSS["gpt-oss"]
    d, q, kv, f, e = t.dim, t.n_head * t.head_dim, t.n_kv_head * t.head_dim, t.ffn, t.n_expert
    per_layer = (d + (d * q + q) + 2 * (d * kv + kv) + (q * d + d) + t.n_head + d + (d * e + e)
                 + 2 * (2 * (d * f + f) + (f * d + d)))   # two experts of eight
    active = 2 * tm.VOCAB * d + d + t.n_layer * per_layer
    main(["info", path])
    out = capsys.readouterr().out
    assert f"{active / 1e6:.1f}M per token (2 of 8" in out, out


def test_gpt_oss_tokenizer_and_chat(tiny_dir):
    """The tiny file with gpt-oss's tokenizer metadata (pre-tokenizer "gpt-4o", harmony
    control tokens, the real chat template): infer's ids for harmony texts are
    llama.cpp's (tests/data/llama_cpp_gptoss_tokens.json), and a chat turn runs through
    the harmony format, its prompt ending in the assistant's opener."""
    import json

    path = tm.gptoss_harmony_file(str(tiny_dir / "gpt-oss-harmony.gguf"))
    with open(os.path.join(os.path.dirname(DATA), "llama_cpp_gptoss_tokens.json"), encoding="utf-8") as f:
        record = json.load(f)
    assert record["sha256"] == tm.sha256(path), "the file differs from the one llama.cpp read; re-record"
    with infer.load(path) as model:
        for text, ids in record["cases"]:
            assert model.tokenizer.encode(text, add_special=False, parse_special=True) == ids, text
        prompt = model.chat.render([{"role": "user", "content": "What is 17 x 23?"}], add_generation_prompt=True)
        assert prompt.endswith("<|start|>user<|message|>What is 17 x 23?<|end|><|start|>assistant"), prompt
        reply = infer.ChatSession(model, temperature=0).send("What is 17 x 23?", max_tokens=6)
        assert reply.finish_reason in ("stop", "length")


# ---- llama.cpp ---------------------------------------------------------------------------
def test_reference_agrees_with_llama_cpp_and_each_piece_matters(recorded, tiny_dir, references):
    """The float64 reference against llama.cpp on F16 experts validates both
    readings of the architecture; with any one piece taken out of the reference,
    the agreement drops far below (so the data tells each piece apart)."""
    name = "gpt-oss"
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    ref, expected = references[name]
    cos = cosines(expected[positions], theirs)
    assert cos.min() >= LLAMA_CPP_MIN_COS, (cos.min(), int(positions[int(np.argmin(cos))]))
    for piece in ("sinks", "biases", "window", "clamp", "softmax_weight"):
        other = GptOss(tiny_file(name, tiny_dir))
        setattr(other, piece, False)
        worse = cosines(other.forward(tm.prompt(name))[positions], theirs).min()
        assert worse < 0.999, (piece, worse)


@pytest.mark.parametrize("name", NAMES)
def test_infer_agrees_with_llama_cpp(name, recorded, tiny_dir):
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    ours = infer_logits(name, tiny_dir)[positions]
    cos = cosines(ours, theirs)
    assert cos.min() >= LLAMA_MIN_COS[tm.GPTOSS[name].expert_type], (cos.min(), int(positions[int(np.argmin(cos))]))
    clear = np.sort(theirs, -1)[:, -1] - np.sort(theirs, -1)[:, -2] > 0.05
    assert (np.argmax(ours, -1)[clear] == np.argmax(theirs, -1)[clear]).all()


def test_the_mxfp4_file_agrees_with_llama_cpp(recorded, tiny_dir, references):
    """The tiny MXFP4 file (the gguf package's quantizer) read by the reference through
    the gguf package's dequantizer against llama.cpp, which quantizes the experts'
    inputs to Q8_0 (measured: 0.99960): the file, its recording and the reference agree
    on MXFP4's layout, which infer's comparisons with both rest on."""
    name = "gpt-oss-mxfp4"
    positions, theirs = recorded_logits(recorded, name, tiny_file(name, tiny_dir))
    cos = cosines(references[name][1][positions], theirs)
    assert cos.min() >= 0.999, cos.min()


# ---- hostile files -----------------------------------------------------------------------
def hostile(tmp_path, drop=(), more_tensors=None, **extra):
    t = tm.GPTOSS["gpt-oss"]
    t = dataclasses.replace(t, extra={**t.extra, **extra})
    return tm.write_gptoss(t, str(tmp_path / "hostile.gguf"), more_tensors, drop=drop)


@pytest.mark.parametrize("missing", ["blk.1.attn_sinks.weight", "blk.0.attn_output.bias",
                                     "blk.2.ffn_gate_inp.bias", "blk.3.ffn_down_exps.bias",
                                     "blk.0.post_attention_norm.weight"])
def test_a_missing_piece_is_named(tmp_path, missing):
    with pytest.raises(GGUFError, match=missing.replace(".", r"\.") + " is missing"):
        infer.load(hostile(tmp_path, drop=(missing,)))


@pytest.mark.parametrize("name, value, match", [
    ("blk.0.attn_sinks.weight", np.zeros(8, np.float32), r"attn_sinks\.weight: expected F32 of 4 values"),
    ("blk.0.attn_sinks.weight", np.zeros(4, np.float16), r"attn_sinks\.weight: expected F32"),
    ("blk.1.ffn_up_exps.bias", np.zeros((8, 256), np.float32), r"ffn_up_exps\.bias: expected F32 of shape \(8, 512\)"),
    ("blk.1.ffn_gate_inp.bias", np.zeros(7, np.float32), r"ffn_gate_inp\.bias: expected F32 of 8 values"),
])
def test_a_piece_of_the_wrong_shape_or_type_is_named(tmp_path, name, value, match):
    with pytest.raises(GGUFError, match=match):
        infer.load(hostile(tmp_path, more_tensors={name: value}))


@pytest.mark.parametrize("extra, error, match", [
    ({"expert_gating_func": 3}, UnsupportedModelError, r"gpt-oss\.expert_gating_func"),
    ({"rope.freq_base_swa": 10000.0}, UnsupportedModelError, r"rope\.freq_base_swa"),
    ({"attention.sliding_window": 0}, GGUFError, r"attention\.sliding_window"),   # llama.cpp masks all
    ({"expert_used_count": 9}, UnsupportedModelError, r"expert_used_count"),
    ({"rope.scaling.type": "su"}, UnsupportedModelError, r"rope\.scaling\.type"),
])
def test_metadata_infer_does_not_implement_is_refused(tmp_path, extra, error, match):
    with pytest.raises(error, match=match):
        infer.load(hostile(tmp_path, **extra))


def test_a_file_without_the_window_is_refused(tmp_path):
    t = tm.GPTOSS["gpt-oss"]
    t = dataclasses.replace(t, extra={k: v for k, v in t.extra.items() if k != "attention.sliding_window"})
    with pytest.raises(GGUFError, match=r"gpt-oss\.attention\.sliding_window is missing"):
        infer.load(tm.write_gptoss(t, str(tmp_path / "nowindow.gguf")))


@pytest.mark.parametrize("key, value, match", [
    ("sinks", np.zeros(3, np.float32), r"layers\[1\]\.sinks: vector: expected 4 values"),
    ("o_bias", np.zeros(8, np.float32), r"layers\[1\]\.o_bias"),
    ("router_bias", np.zeros(9, np.float32), r"layers\[1\]\.router_bias"),
    ("up_exps_bias", np.zeros(8 * 256, np.float32), r"layers\[1\]\.up_exps_bias"),
    ("gate_exps_bias", None, "gate_exps_bias and up_exps_bias come together"),
])
def test_the_fused_step_checks_the_new_pieces(tiny_dir, key, value, match):
    """kernels.TransformerDecoder refuses a sink vector, bias or expert bias table of
    the wrong size (before any C code reads it), and an unknown gating."""
    from infer.variants.transformer import decoder_arguments

    with infer.load(tiny_file("gpt-oss", tiny_dir)) as model:
        spec, weights = model.engine.spec, model.engine.live_weights()
        embd, output, norm, layers = decoder_arguments(spec, weights)
        layers[1] = {**layers[1], key: value}
        with pytest.raises(ValueError, match=match):
            K.TransformerDecoder(spec, embd, output, norm, layers)
        bad = dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, gating="softmax"))
        object.__setattr__(bad.moe, "gating", "sigmoid_weight")   # past the spec's own check
        with pytest.raises(ValueError, match="gating"):
            K.TransformerDecoder(bad, *decoder_arguments(spec, weights))


def test_sinks_of_the_attention_kernel(tiny_dir):
    """kernels.attention's sinks against a hand-written softmax with the sink in
    its denominator (three positions; 600 split over two threads), its argument
    checks, and swiglu_oai_mul against its formula about the clamps."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 4)).astype(np.float32)
    k = rng.standard_normal((1, 3, 4)).astype(np.float32)
    v = rng.standard_normal((1, 3, 4)).astype(np.float32)
    sinks = np.array([1.5, -30.0], np.float32)
    out = K.attention(q, k, v, 2, np.empty_like(q), sinks=sinks)
    for h in range(2):
        s = k[0].astype(np.float64) @ q[0, h] / 2.0
        e = np.exp(s - s.max())
        want = e @ v[0] / (e.sum() + np.exp(sinks[h] - s.max()))
        np.testing.assert_allclose(out[0, h], want, rtol=2e-6, atol=2e-6)
    with pytest.raises(ValueError, match="sinks"):
        K.attention(q, k, v, 2, np.empty_like(q), sinks=np.zeros(3, np.float32))
    # one token over 600 positions of one KV head on two threads: the kernel splits the
    # span in two and merges the parts, adding each sink once (attention.c, merge_splits)
    q = rng.standard_normal((1, 2, 64)).astype(np.float32)
    k = rng.standard_normal((1, 600, 64)).astype(np.float32)
    v = rng.standard_normal((1, 600, 64)).astype(np.float32)
    sinks = np.array([4.0, -1.0], np.float32)
    threads = K.get_num_threads()
    K.set_num_threads(2)
    try:
        out = K.attention(q, k, v, 599, np.empty_like(q), sinks=sinks)
    finally:
        K.set_num_threads(threads)
    for h in range(2):
        s = k[0].astype(np.float64) @ q[0, h] / 8.0
        e = np.exp(s - s.max())
        want = e @ v[0] / (e.sum() + np.exp(sinks[h] - s.max()))
        np.testing.assert_allclose(out[0, h], want, rtol=1e-5, atol=1e-5)
    g = np.array([-9.0, -1.0, 0.5, 6.9, 7.0, 12.0], np.float32)
    u = np.array([-12.0, -7.0, 0.25, 1.0, 7.5, 3.0], np.float32)
    gc, uc = np.minimum(g, 7.0).astype(np.float64), np.clip(u, -7.0, 7.0).astype(np.float64)
    want = gc / (1 + np.exp(-1.702 * gc)) * (uc + 1)
    np.testing.assert_allclose(K.swiglu_oai_mul(g, u, np.empty_like(g)), want, rtol=1e-6, atol=1e-6)
