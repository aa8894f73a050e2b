"""A tiny Llama model written in each weight format generates what its float64 reference does.

The model (2 layers, width 256, 4 heads of 64 with 2 KV heads, feed-forward 512,
vocabulary 256: every row a whole number of 256-element super-blocks) is drawn at
random, each matrix quantized by infer's own quantizer into the format under test and
written with infer's GGUFWriter.  The reference is tests/reference/numpy_llama.py: a
float64 forward pass over the same file read by the `gguf` package (its numpy
dequantizers), with ggml's activation rounding (act_quant=True).

The reference's greedy continuation is fed to infer token by token (teacher forcing,
so one near-tie cannot derail the rest), and infer's top-1 must equal the reference's
at every clear step: where the reference's best logit leads the second by more than
CLEAR_MARGIN.  Decode (one token at a time) and prefill (the whole sequence at once)
are both checked.
"""
import numpy as np
import pytest
from reference.numpy_llama import NumpyLlama

from infer.gguf import GGUFFile, GGUFWriter, ValueType
from infer.runtime import UnsupportedModelError
from infer.tensor import DType, Tensor
from infer.variants.llama import LlamaEngine
from scripted import GreedySampler

FORMATS = ["q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs", "q4_k", "q6_k", "mxfp4"]
DIM, N_HEAD, N_KV_HEAD, FFN, VOCAB, N_LAYER = 256, 4, 2, 512, 256, 2
PROMPT = [1, 17, 200, 33, 5, 99]
N_GENERATE = 10
CLEAR_MARGIN = 0.05


def write_tiny_llama(path, fmt, replace=None):
    rng = np.random.default_rng(7)
    dtype = DType.parse(fmt)

    def matrix(rows, cols, scale):
        return Tensor.quantize(rng.standard_normal((rows, cols)) * scale, dtype)

    w = GGUFWriter()
    for key, value, vt in [("general.architecture", "llama", None), ("general.name", "tiny", None),
                           ("llama.block_count", N_LAYER, ValueType.UINT32),
                           ("llama.embedding_length", DIM, ValueType.UINT32),
                           ("llama.feed_forward_length", FFN, ValueType.UINT32),
                           ("llama.attention.head_count", N_HEAD, ValueType.UINT32),
                           ("llama.attention.head_count_kv", N_KV_HEAD, ValueType.UINT32),
                           ("llama.context_length", 64, ValueType.UINT32),
                           ("llama.rope.freq_base", 10000.0, ValueType.FLOAT32),
                           ("llama.attention.layer_norm_rms_epsilon", 1e-5, ValueType.FLOAT32)]:
        w.add_metadata(key, value, vt) if vt is not None else w.add_metadata(key, value)
    w.add_metadata("tokenizer.ggml.tokens", [f"t{i}" for i in range(VOCAB)])
    tensors = {"token_embd.weight": matrix(VOCAB, DIM, 1.0), "output.weight": matrix(VOCAB, DIM, 0.2),
               "output_norm.weight": np.ones(DIM, np.float32)}
    kv = DIM // N_HEAD * N_KV_HEAD
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors.update({
            p + "attn_norm.weight": (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32),
            p + "ffn_norm.weight": (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32),
            p + "attn_q.weight": matrix(DIM, DIM, 0.1), p + "attn_k.weight": matrix(kv, DIM, 0.1),
            p + "attn_v.weight": matrix(kv, DIM, 0.1), p + "attn_output.weight": matrix(DIM, DIM, 0.06),
            p + "ffn_gate.weight": matrix(FFN, DIM, 0.1), p + "ffn_up.weight": matrix(FFN, DIM, 0.1),
            p + "ffn_down.weight": matrix(DIM, FFN, 0.06)})
    tensors.update(replace or {})
    for name, t in tensors.items():
        if isinstance(t, Tensor):
            w.add_tensor(name, t.data, t.dtype, t.shape)
        else:
            w.add_tensor(name, t)
    w.write(path)


@pytest.fixture(scope="module", params=FORMATS)
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / f"tiny-{request.param}.gguf"
    write_tiny_llama(path, request.param)
    ref = NumpyLlama(str(path))
    tokens = list(PROMPT)
    for _ in range(N_GENERATE):
        tokens.append(int(np.argmax(ref.forward(tokens, act_quant=True)[-1])))
    ref_logits = ref.forward(tokens, act_quant=True)
    with GGUFFile(path) as f:
        yield LlamaEngine(f), tokens, ref_logits


def clear_steps(ref_logits):
    top2 = np.sort(ref_logits, axis=1)[:, -2:]
    return np.nonzero(top2[:, 1] - top2[:, 0] > CLEAR_MARGIN)[0]


def test_decode_follows_the_reference(isa, model):
    engine, tokens, ref_logits = model
    ctx = engine.create_context(n_ctx=64, sampler=GreedySampler())
    got = []
    for tok in tokens:
        ctx.prefill([tok])
        got.append(int(np.argmax(ctx.logits)))
    steps = clear_steps(ref_logits)
    assert len(steps) >= len(tokens) // 2, "the reference has too few clear steps to test"
    want = np.argmax(ref_logits, axis=1)
    assert [got[s] for s in steps] == [int(want[s]) for s in steps]
    # the greedy continuation infer itself generates: the reference's, as far as steps are clear
    ctx = engine.create_context(n_ctx=64, sampler=GreedySampler())
    ctx.prefill(PROMPT)
    generated = [ctx.next() for _ in range(N_GENERATE)]
    for k, tok in enumerate(generated):
        step = len(PROMPT) - 1 + k
        if step not in steps:
            break
        assert tok == tokens[step + 1], f"greedy token {k} differs on a clear step"


def test_prefill_follows_the_reference(model):
    engine, tokens, ref_logits = model
    ctx = engine.create_context(n_ctx=64, sampler=GreedySampler())
    ctx.prefill(tokens)
    want = ref_logits[-1]
    cos = float(ctx.logits @ want / np.linalg.norm(ctx.logits) / np.linalg.norm(want))
    assert cos > 0.999, cos
    if len(clear_steps(ref_logits[-1:])):
        assert int(np.argmax(ctx.logits)) == int(np.argmax(want))


def test_unsupported_format_is_named_at_load_time(tmp_path):
    """An IQ1_M matrix stops the load, not the first token, naming tensor, type, id and the
    supported list (KERNEL_DTYPES, written out here by hand)."""
    path = tmp_path / "iq1m.gguf"
    iq1m = Tensor("blk.1.ffn_down.weight", DType.IQ1_M, (DIM, FFN), np.zeros(DIM * FFN // 256 * 56, np.uint8))
    write_tiny_llama(path, "q4_k", replace={"blk.1.ffn_down.weight": iq1m})
    supported = ("F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                 "IQ4_NL, IQ4_XS, BF16")
    with GGUFFile(path) as f, pytest.raises(UnsupportedModelError) as e:
        LlamaEngine(f)
    message = str(e.value)
    assert message.startswith("blk.1.ffn_down.weight: tensor type IQ1_M (29) is not supported; supported: ")
    assert all(name in message.split("supported: ")[1].split(", ") for name in supported.split(", "))
    assert isinstance(e.value, ValueError) and e.value.names == ["blk.1.ffn_down.weight"]
