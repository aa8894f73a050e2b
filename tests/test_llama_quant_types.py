"""A tiny Llama written entirely in one of the grid or ternary formats (IQ2_XXS, IQ2_XS,
IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, TQ1_0, TQ2_0) runs through the whole stack, prefill (the
matrix-matrix kernels) and the fused decode step, and generates the tokens its float64
reference picks.

The reference is tests/reference/numpy_llama.py on the same file: the gguf package's
reader and numpy dequantizers, float64 throughout.  infer quantizes each product's input
to Q8_K (as ggml does) and keeps K/V in F16, so its logits differ from the exact ones by
up to ~0.2 of their standard deviation here.  So: close to the exact reference (cosine),
very close to the reference run with those roundings (act_quant=True), its tokens where
that one is not a near tie, and the exact reference's tokens on clear steps, where its
lead exceeds twice what the roundings move a logit by.
The weights are random valid blocks (see random_matrix) scaled to the element RMS of a
trained model's matrices.
"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gq
from reference.numpy_llama import NumpyLlama

from infer.gguf import GGUFFile, GGUFWriter, ValueType
from infer.tensor import DType
from infer.variants.llama import LlamaEngine
from scripted import GreedySampler

FORMATS = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "TQ1_0", "TQ2_0"]
DIM, N_HEADS, N_KV_HEADS, FFN, VOCAB, N_LAYERS = 256, 4, 2, 512, 256, 2
D_OFFSET = {"TQ1_0": 52, "TQ2_0": 64}   # byte offset of the fp16 d in a block
PROMPT_LEN, N_GENERATED = 8, 16


def random_matrix(rng, fmt, rows, cols, rms):
    """rows x cols of format fmt with an element RMS of about `rms`.  Grid formats: random
    bytes, one fp16 d for the whole matrix chosen through the gguf package's dequantizer.
    Ternary formats: random -1/0/1 times a scale, through the gguf package's quantizer
    (random TQ2_0 bytes would hold the value 2, which no quantizer writes, and give every
    row a large common offset)."""
    dt = DType[fmt]
    if fmt.startswith("TQ"):
        trits = rng.integers(-1, 2, (rows, cols)).astype(np.float32)
        trits[:, 0] = 1                          # |x| = the scale in every block
        return np.asarray(gq.quantize(trits * np.float32(rms * np.sqrt(1.5)), T[fmt])).reshape(-1)
    n_blocks = rows * cols // dt.block_size
    raw = rng.integers(0, 256, (n_blocks, dt.block_bytes), dtype=np.uint8)
    at = D_OFFSET.get(fmt, 0)

    def with_d(d):
        raw[:, at:at + 2] = np.array([d], np.float16).view(np.uint8)
        return raw.reshape(-1)

    unit = gq.dequantize(with_d(1.0), T[fmt])
    return with_d(rms / np.sqrt(np.mean(unit.astype(np.float64) ** 2))).copy()


def write_model(path, fmt, seed=0):
    rng = np.random.default_rng(seed)
    w = GGUFWriter()
    w.add_metadata("general.architecture", "llama")
    w.add_metadata("general.name", f"tiny-{fmt.lower()}")
    w.add_metadata("llama.context_length", 64, ValueType.UINT32)
    w.add_metadata("llama.embedding_length", DIM, ValueType.UINT32)
    w.add_metadata("llama.block_count", N_LAYERS, ValueType.UINT32)
    w.add_metadata("llama.feed_forward_length", FFN, ValueType.UINT32)
    w.add_metadata("llama.attention.head_count", N_HEADS, ValueType.UINT32)
    w.add_metadata("llama.attention.head_count_kv", N_KV_HEADS, ValueType.UINT32)
    w.add_metadata("llama.rope.freq_base", 10000.0, ValueType.FLOAT32)
    w.add_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5, ValueType.FLOAT32)
    w.add_metadata("tokenizer.ggml.tokens", [f"t{i}" for i in range(VOCAB)])
    dt = DType[fmt]

    def matrix(name, rows, cols, rms):
        w.add_tensor(name, random_matrix(rng, fmt, rows, cols, rms), dt, (rows, cols))

    kv = DIM // N_HEADS * N_KV_HEADS
    matrix("token_embd.weight", VOCAB, DIM, 1.0)
    # An untied head: a tied one mostly maps a token onto itself (x is near its embedding)
    matrix("output.weight", VOCAB, DIM, 1.0)
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(DIM)).astype(np.float32))
        matrix(p + "attn_q.weight", DIM, DIM, 2.0 / np.sqrt(DIM))
        matrix(p + "attn_k.weight", kv, DIM, 2.0 / np.sqrt(DIM))
        matrix(p + "attn_v.weight", kv, DIM, 1.0 / np.sqrt(DIM))
        matrix(p + "attn_output.weight", DIM, DIM, 1.0 / np.sqrt(DIM))
        matrix(p + "ffn_gate.weight", FFN, DIM, 2.0 / np.sqrt(DIM))
        matrix(p + "ffn_up.weight", FFN, DIM, 2.0 / np.sqrt(DIM))
        matrix(p + "ffn_down.weight", DIM, FFN, 2.0 / np.sqrt(FFN))
    w.add_tensor("output_norm.weight", np.ones(DIM, np.float32))
    w.write(path)


def cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def margin(logits):
    top2 = np.sort(logits)[-2:]
    return top2[1] - top2[0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_tiny_model_generates_the_reference_tokens(isa, tmp_path, fmt):
    path = tmp_path / f"tiny-{fmt}.gguf"
    write_model(path, fmt)
    prompt = list(np.random.default_rng(1).integers(0, VOCAB, PROMPT_LEN))
    with GGUFFile(path) as f:
        assert {t.dtype.name for t in f.tensors.values() if t.n_rows > 1} == {fmt}
        engine = LlamaEngine(f)
        ctx = engine.create_context(n_ctx=32, sampler=GreedySampler())
        ctx.prefill(prompt)                      # several tokens: the prefill kernels
        logits = [ctx.logits.copy()]
        generated = []
        for _ in range(N_GENERATED):
            generated.append(ctx.next())         # one token: the fused decode step
            logits.append(ctx.logits.copy())
        engine.close()
    reference = NumpyLlama(str(path))
    exact = reference.forward(prompt + generated)[PROMPT_LEN - 1:]
    rounded = reference.forward(prompt + generated, act_quant=True)[PROMPT_LEN - 1:]
    clear = 0
    for step, (ours, want, want_q) in enumerate(zip(logits, exact, rounded)):
        scale = np.std(want_q)
        assert cosine(ours, want) >= 0.99, (step, cosine(ours, want))
        # ggml's numerics, as the reference computes them: only float summation order
        # (and an activation on a rounding boundary, now and then) is left
        assert np.max(np.abs(ours - want_q)) <= 0.1 * scale, (step, np.max(np.abs(ours - want_q)) / scale)
        if step == N_GENERATED:
            break
        if margin(want_q) > 0.1 * scale:
            assert generated[step] == int(np.argmax(want_q)), f"step {step}, rounded reference"
        # Clear: the exact reference's lead is more than twice what rounding the
        # activations moves any logit by (the two references measure that, not infer).
        if margin(want) > 2 * np.max(np.abs(want_q - want)):
            clear += 1
            assert generated[step] == int(np.argmax(want)), f"step {step}, exact reference"
    assert clear >= 4, f"only {clear} clear steps: the test says little"
