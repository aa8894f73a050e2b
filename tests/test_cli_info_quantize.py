"""`infer info` and `infer quantize`.

References: the `gguf` package reads back everything we print or write (tensor
lists, types, shapes, metadata), its numpy dequantizers decode our quantized
output, and the expected type of every tensor is written out by hand below
from llama.cpp's rules.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from infer import cli
from infer.gguf import GGUFFile, GGUFWriter, ValueType, default_model_path
from infer.tensor import DType

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def smollm2():
    try:
        return default_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def kernels_ready(*dtypes) -> bool:
    try:
        from infer import kernels
    except ImportError:
        return False
    for dt in dtypes:
        try:
            kernels.quantize(np.zeros(dt.block_size, np.float32), int(dt), np.empty(dt.block_bytes, np.uint8))
            kernels.dequantize(np.zeros(dt.block_bytes, np.uint8), int(dt), np.empty(dt.block_size, np.float32))
        except (ValueError, AttributeError):
            return False
    return True


# ---- info ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2_reader():
    return gguf.GGUFReader(smollm2())  # slow (seconds): shared by the info tests


def test_info_text_on_default_model(capsys, smollm2_reader):
    code, out, err = run(capsys, "info")
    assert code == 0 and err == ""
    ref = smollm2_reader
    n_params = sum(int(np.prod(t.shape)) for t in ref.tensors)
    assert f"({n_params:,})" in out
    assert "architecture    llama" in out
    assert "context length  8192" in out
    assert "vocabulary      gpt2 (pre-tokenizer smollm), 49152 tokens" in out
    assert "bos 1 '<|im_start|>'" in out and "eos 2 '<|im_end|>'" in out
    assert "chat template   yes" in out
    table = out.split("\n\n", 1)[1].splitlines()[1:]
    assert len(table) == len(ref.tensors)
    for line, t in zip(table, ref.tensors):
        name, dtype = line.split()[:2]
        assert name == t.name and dtype == t.tensor_type.name
        assert line.rstrip().endswith(f"{int(t.n_bytes):,}")


def test_info_json_matches_gguf_package(capsys, smollm2_reader):
    code, out, _ = run(capsys, "info", str(smollm2()), "--json")
    assert code == 0
    info = json.loads(out)
    ref = smollm2_reader
    assert info["architecture"] == "llama" and info["gguf_version"] == 3
    assert info["vocabulary"] == {"kind": "gpt2", "pre": "smollm", "size": 49152}
    assert info["chat_template"] is True and info["fallback_chat_template"] is None
    assert info["special_tokens"]["eos"] == {"id": 2, "text": "<|im_end|>"}
    assert info["metadata"]["llama.block_count"] == 30
    assert info["metadata"]["tokenizer.ggml.tokens"] == {"array": "STRING", "length": 49152}
    assert [(t["name"], t["type"], t["shape"][::-1], t["bytes"]) for t in info["tensors"]] == \
        [(t.name, t.tensor_type.name, [int(d) for d in t.shape], int(t.n_bytes)) for t in ref.tensors]


def test_info_gemma3_has_no_template(capsys):
    from infer.gguf import gemma3_model_path

    try:
        path = gemma3_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    code, out, _ = run(capsys, "info", str(path))
    assert code == 0
    assert "architecture    gemma3" in out and "262144 tokens" in out and "chat template   no" in out
    # it says what that means and which template chat falls back to (the one chat warns of)
    assert "looks like a base model" in out and "built-in 'gemma' template" in out
    code, out, _ = run(capsys, "info", str(path), "--json")
    assert json.loads(out)["fallback_chat_template"] == "gemma"


def test_info_system(capsys):
    pytest.importorskip("infer.kernels")
    from infer import kernels

    import platform

    import infer

    code, out, _ = run(capsys, "info", "--system")
    caps = kernels.capabilities()
    assert code == 0 and f"kernel set   {caps['active']}" in out
    assert f"available    {', '.join(caps['available'])}" in out
    assert f"infer        {infer.__version__}\n" in out
    assert f"python       {platform.python_version()}  numpy {np.__version__}\n" in out
    code, out, _ = run(capsys, "info", "--system", "--json")
    system = json.loads(out)
    assert system["available"] == caps["available"] and system["active"] == caps["active"]
    assert system["machine"] == platform.machine() and system["version"] == infer.__version__
    if platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64"):
        with open("/proc/cpuinfo") as f:   # the first processor's model name, read here apart
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        assert system["cpu"] == names[0]


def test_info_damaged_file_is_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little") + bytes(8))
    code, out, err = run(capsys, "info", str(bad))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "tensor count" in err and err.startswith("infer: error:")


# ---- quantize: a tiny synthetic model -------------------------------------------------------
VOCAB, D = 40, 256


def tiny_model(path, tied=True, source=DType.F32):
    rng = np.random.default_rng(1)
    tensors = {
        "token_embd.weight": rng.standard_normal((VOCAB, D)),
        "blk.0.attn_norm.weight": 1 + 0.1 * rng.standard_normal(D),
        "blk.0.attn_q.weight": rng.standard_normal((D, D)) * 0.05,
        "blk.0.ffn_down.weight": rng.standard_normal((D, 96)) * 0.05,   # 96: not whole K blocks
        "blk.0.odd.weight": rng.standard_normal((4, 48)),               # 48: not whole 32-blocks
        "output_norm.weight": np.ones(D),
    }
    if not tied:
        tensors["output.weight"] = rng.standard_normal((VOCAB, D)) * 0.1
    w = GGUFWriter()
    w.add_metadata("general.architecture", "llama")
    w.add_metadata("general.name", "tiny")
    w.add_metadata("llama.context_length", 64, ValueType.UINT32)
    w.add_metadata("llama.rope.freq_base", 10000.0, ValueType.FLOAT32)
    w.add_metadata("tokenizer.ggml.tokens", [f"t{i}" for i in range(VOCAB)])
    w.add_metadata("tokenizer.ggml.scores", np.linspace(0, -1, VOCAB, dtype=np.float32))
    w.add_metadata("general.file_type", 0, ValueType.UINT32)
    for name, value in tensors.items():
        value = value.astype(np.float32)
        if source == DType.F32 or value.ndim == 1 or value.shape[-1] % source.block_size:
            w.add_tensor(name, value)
        else:
            raw = np.asarray(gq.quantize(value, gguf.GGMLQuantizationType(int(source)))).view(np.uint8)
            w.add_tensor(name, raw.reshape(-1), source, value.shape)
    w.write(path)
    return {k: v.astype(np.float32) for k, v in tensors.items()}


# Expected output type per tensor, by hand from llama.cpp's llama_tensor_get_type:
# tied token_embd = output head -> Q6_K (Q8_0 stays Q8_0; F16/BF16 no special case);
# 96-wide rows: Q4_K -> Q5_0, Q6_K -> Q8_0; 48-wide rows fit no quantized block -> F16.
EXPECTED = {
    #          token_embd  attn_q  ffn_down  odd   n_fallback
    "q4_0": ("Q6_K", "Q4_0", "Q4_0", "F16", 1),
    "q4_1": ("Q6_K", "Q4_1", "Q4_1", "F16", 1),
    "q5_0": ("Q6_K", "Q5_0", "Q5_0", "F16", 1),
    "q8_0": ("Q8_0", "Q8_0", "Q8_0", "F16", 1),
    "q4_k": ("Q6_K", "Q4_K", "Q5_0", "F16", 2),
    "q6_k": ("Q6_K", "Q6_K", "Q8_0", "F16", 2),
    # llama.cpp's tensor_type_fallback: Q2_K/Q3_K -> Q4_0, Q5_K -> Q5_1, IQ4_XS -> IQ4_NL;
    # the tiny model has no block_count, so no ffn_down layer counts as "early"
    "q5_1": ("Q6_K", "Q5_1", "Q5_1", "F16", 1),
    "q2_k": ("Q6_K", "Q2_K", "Q4_0", "F16", 2),      # ffn_down Q2_K -> Q3_K, then fallback
    "q3_k": ("Q6_K", "Q3_K", "Q4_0", "F16", 2),
    "q3_k_m": ("Q6_K", "Q3_K", "Q5_0", "F16", 2),    # ffn_down -> Q4_K -> Q5_0
    "q3_k_l": ("Q6_K", "Q3_K", "Q5_1", "F16", 2),    # ffn_down -> Q5_K -> Q5_1
    "q4_k_m": ("Q6_K", "Q4_K", "Q8_0", "F16", 2),    # ffn_down layer 0 of 0: use_more_bits -> Q6_K
    "q5_k": ("Q6_K", "Q5_K", "Q5_1", "F16", 2),
    "iq4_nl": ("Q6_K", "IQ4_NL", "IQ4_NL", "F16", 1),
    "iq4_xs": ("Q6_K", "IQ4_XS", "IQ4_NL", "F16", 2),
    "f16": ("F16", "F16", "F16", "F16", 0),
    "bf16": ("BF16", "BF16", "BF16", "BF16", 0),
    "f32": ("F32", "F32", "F32", "F32", 0),
}
# relative RMS error allowed after the round trip, per written type
TOLERANCE = {"Q4_0": 0.15, "Q4_1": 0.15, "Q5_0": 0.08, "Q8_0": 0.01, "Q4_K": 0.12, "Q6_K": 0.04,
             "Q5_1": 0.08, "Q2_K": 0.45, "Q3_K": 0.25, "Q5_K": 0.06, "IQ4_NL": 0.12, "IQ4_XS": 0.12,
             "F16": 1e-3, "BF16": 8e-3, "F32": 0.0}


def needed_kernels(qtype: str):
    return [DType[t] for t in EXPECTED[qtype][:4] if DType[t].is_quantized or t == "BF16"]


@pytest.mark.parametrize("qtype", list(EXPECTED))
def test_quantize_tiny_model(capsys, tmp_path, qtype):
    if not kernels_ready(*needed_kernels(qtype)):
        pytest.skip("quantization kernels not built yet")
    src, dst = tmp_path / "tiny.gguf", tmp_path / f"tiny-{qtype}.gguf"
    values = tiny_model(src)
    code, out, err = run(capsys, "quantize", str(src), str(dst), "--type", qtype)
    assert code == 0, err
    emb, q, down, odd, n_fallback = EXPECTED[qtype]
    ref = gguf.GGUFReader(dst)
    got_types = {t.name: t.tensor_type.name for t in ref.tensors}
    assert got_types == {"token_embd.weight": emb, "blk.0.attn_norm.weight": "F32", "blk.0.attn_q.weight": q,
                         "blk.0.ffn_down.weight": down, "blk.0.odd.weight": odd, "output_norm.weight": "F32"}
    fell_back = {1: "1 tensor fell back", 2: "2 tensors fell back"}
    assert (fell_back.get(n_fallback, "fell back") in out) == bool(n_fallback)
    assert "warning" not in err  # source was F32: nothing requantized
    for t in ref.tensors:
        x = values[t.name]
        y = gq.dequantize(t.data, t.tensor_type).reshape(x.shape)
        rms = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
        assert rms <= TOLERANCE[t.tensor_type.name], (t.name, t.tensor_type.name, rms)
    # metadata kept, with their types; file type updated
    with GGUFFile(src) as a, GGUFFile(dst) as b:
        for key, value in a.metadata.items():
            if key == "general.file_type":
                continue
            assert b.metadata_types[key] == a.metadata_types[key]
            assert np.array_equal(b.metadata[key], value) if isinstance(value, np.ndarray) else b.metadata[key] == value
        ftype = gguf.LlamaFileType[{"q4_k": "MOSTLY_Q4_K_S", "q3_k": "MOSTLY_Q3_K_S",
                                      "q5_k": "MOSTLY_Q5_K_S", "f32": "ALL_F32"}.get(qtype, f"MOSTLY_{qtype.upper()}")]
        assert b.metadata["general.file_type"] == int(ftype)
        assert b.metadata["general.quantization_version"] == gguf.GGML_QUANT_VERSION
        assert set(b.metadata) == set(a.metadata) | {"general.quantization_version"}
    assert sorted(os.listdir(tmp_path)) == sorted([src.name, dst.name])


# llama.cpp's description of files infer quantize wrote (llama_model_desc through
# llama-cpp-python 0.3.36's vendored llama.cpp 0c1e5709, tests/tiny_models.py's "llama"
# quantized to each type): the file-type part after "llama ?B ".
LLAMA_CPP_FILE_TYPE = {"q4_0": "Q4_0", "q2_k": "Q2_K - Medium", "q3_k_s": "Q3_K - Small",
                       "q3_k_l": "Q3_K - Large", "q5_k_s": "Q5_K - Small", "q5_k_m": "Q5_K - Medium",
                       "iq4_nl": "IQ4_NL - 4.5 bpw", "iq4_xs": "IQ4_XS - 4.25 bpw", "bf16": "BF16",
                       "f32": "all F32"}


def test_info_and_bench_name_the_file_type_as_llama_cpp(capsys, tmp_path):
    """`info` showed no file type, and bench's own table named Q2_K files "Q2_K" and
    Q3_K_S, Q3_K_L, Q5_K_S, IQ4_NL, IQ4_XS files "ftype N"."""
    from infer.cli.bench import _file_type_name

    src = tmp_path / "tiny.gguf"
    tiny_model(src)
    for qtype, want in LLAMA_CPP_FILE_TYPE.items():
        dst = tmp_path / f"tiny-{qtype}.gguf"
        code, _, err = run(capsys, "quantize", str(src), str(dst), qtype)
        assert code == 0, err
        code, out, err = run(capsys, "info", str(dst), "--json")
        assert code == 0, err
        summary = json.loads(out)
        assert summary["file_type"] == want, qtype
        assert _file_type_name(summary["metadata"]["general.file_type"]) == want
        code, out, err = run(capsys, "info", str(dst))
        assert f"\n  file type       {want}\n" in out
    for unnamed in (None, 99):
        assert _file_type_name(unnamed) == ("" if unnamed is None else "ftype 99")


def test_quantize_untied_output_and_embedding(capsys, tmp_path):
    if not kernels_ready(DType.Q4_0, DType.Q6_K):
        pytest.skip("quantization kernels not built yet")
    src, dst = tmp_path / "untied.gguf", tmp_path / "out.gguf"
    tiny_model(src, tied=False)
    assert run(capsys, "quantize", str(src), str(dst), "--type", "q4_0")[0] == 0
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(dst).tensors}
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_0"


def test_requantizing_warns_and_threads_agree(capsys, tmp_path):
    if not kernels_ready(DType.Q8_0, DType.Q4_1, DType.Q6_K):
        pytest.skip("quantization kernels not built yet")
    src = tmp_path / "q8.gguf"
    tiny_model(src, source=DType.Q8_0)
    outs = []
    for threads in ("1", "2"):
        dst = tmp_path / f"out{threads}.gguf"
        code, _, err = run(capsys, "quantize", str(src), str(dst), "--type", "q4_1", "-t", threads)
        assert code == 0 and "warning: requantizing" in err and "Q8_0" in err
        outs.append(dst.read_bytes())
    assert outs[0] == outs[1]


def test_quantize_interrupted_leaves_nothing(capsys, tmp_path, monkeypatch):
    if not kernels_ready(DType.Q8_0):
        pytest.skip("quantization kernels not built yet")
    from infer import quantize as qmod

    src, dst = tmp_path / "tiny.gguf", tmp_path / "out.gguf"
    tiny_model(src)
    real, calls = qmod.convert, []

    def convert_then_interrupt(step):
        calls.append(step.tensor.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(step)

    monkeypatch.setattr(qmod, "convert", convert_then_interrupt)
    code, _, _ = run(capsys, "quantize", str(src), str(dst), "--type", "q8_0", "-t", "1")
    assert code == 130
    assert os.listdir(tmp_path) == ["tiny.gguf"]


def test_quantize_misuse(capsys, tmp_path):
    src = tmp_path / "tiny.gguf"
    tiny_model(src)
    code, _, err = run(capsys, "quantize", str(src), str(src), "--type", "q8_0")
    assert code == 1 and "must differ from the input" in err
    code, _, err = run(capsys, "quantize", str(tmp_path / "none.gguf"), str(tmp_path / "o.gguf"), "--type", "q8_0")
    assert code == 1 and "is not a file" in err
    code, _, err = run(capsys, "quantize", str(src), str(tmp_path), "--type", "q8_0")
    assert code == 1 and f"output: {tmp_path} is a directory" in err
    code, _, err = run(capsys, "quantize", str(src), str(tmp_path / "no" / "o.gguf"), "--type", "q8_0")
    assert code == 1 and f"output: directory {tmp_path / 'no'} does not exist" in err
    assert sorted(os.listdir(tmp_path)) == ["tiny.gguf"]
    with pytest.raises(SystemExit):
        cli.main(["quantize", str(src), str(tmp_path / "o.gguf"), "--type", "q9_k"])


def test_quantize_takes_llama_quantizes_spelling(capsys, tmp_path):
    """`llama-quantize IN OUT Q4_0`: the type as the third positional, in capitals, as
    llama.cpp's docs write it (also `--type Q4_0` and `--model IN OUT TYPE`): the same
    file as `--type q4_0`, whose tensors gguf's reader sees as Q4_0."""
    if not kernels_ready(DType.Q4_0, DType.Q6_K):
        pytest.skip("quantization kernels not built yet")
    src = tmp_path / "tiny.gguf"
    tiny_model(src)
    spellings = {"lower": ["--type", "q4_0"], "positional": ["Q4_0"], "upper": ["--type", "Q4_0"]}
    files = {}
    for name, args in spellings.items():
        dst = tmp_path / f"{name}.gguf"
        code, _, err = run(capsys, "quantize", str(src), str(dst), *args)
        assert code == 0, err
        files[name] = dst.read_bytes()
    code, _, err = run(capsys, "quantize", "--model", str(src), str(tmp_path / "m.gguf"), "q4_0")
    assert code == 0, err
    files["model"] = (tmp_path / "m.gguf").read_bytes()
    assert len(set(files.values())) == 1
    assert {t.tensor_type.name for t in gguf.GGUFReader(tmp_path / "upper.gguf").tensors
            if t.name == "blk.0.attn_q.weight"} == {"Q4_0"}
    code, _, err = run(capsys, "quantize", str(src), str(tmp_path / "x.gguf"), "Q9_K")
    assert code == 2 and "unknown type 'q9_k'" in err
    code, _, err = run(capsys, "quantize", str(src), str(tmp_path / "x.gguf"), "q8_0", "--type", "q4_0")
    assert code == 2 and "two types given" in err
    code, _, err = run(capsys, "quantize", str(src), str(tmp_path / "x.gguf"))
    assert code == 2 and "usage" in err
    # llama-quantize's order after --model: a misspelt type is named as such (it was taken for a second input)
    code, _, err = run(capsys, "quantize", "--model", str(src), str(tmp_path / "x.gguf"), "Q9_K")
    assert code == 2 and "unknown type 'q9_k'" in err
    code, _, err = run(capsys, "quantize", "--model", str(src), str(tmp_path / "x.gguf"), str(tmp_path / "y.gguf"))
    assert code == 2 and "not both" in err


# ---- quantize: the default model to every type --------------------------------------------------
# Each case takes 5-12 s here (gguf.GGUFReader alone needs 2-5 s for SmolLM2's vocabulary).
# By default one type per family runs (32-element, K-quant with fallbacks, plain float);
# INFER_SLOW_TESTS=1 runs all eight.  The tiny-model tests above cover all eight every time.
SLOW = pytest.mark.slow("slow on a 2-core machine")
DEFAULT_SWEEP = ("q4_0", "q4_k", "bf16")


PLAIN_TARGETS = ("q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q6_k", "f16", "bf16")


@pytest.mark.parametrize("qtype", [q if q in DEFAULT_SWEEP else pytest.param(q, marks=SLOW)
                                   for q in PLAIN_TARGETS])
def test_quantize_default_model_reads_back(capsys, tmp_path, qtype):
    path = smollm2()
    if not kernels_ready(DType.Q4_1, DType.Q8_0, *needed_kernels(qtype)):
        pytest.skip("quantization kernels not built yet")
    dst = tmp_path / f"smol-{qtype}.gguf"
    code, out, err = run(capsys, "quantize", str(path), str(dst), "--type", qtype)
    assert code == 0, err
    # SmolLM2 is Q4_1 with a Q8_0 embedding: only a q4_1 target has nothing to requantize
    # ... and a float target loses nothing: no warning either
    assert ("warning: requantizing" in err) == (qtype not in ("q4_1", "f16", "bf16"))
    # the tied output head: 32-element targets want Q6_K, whose blocks 576 columns do not fit
    # (Q8_0 then); K-quant targets go to Q8_0 directly; Q8_0, F16, BF16 have no special case
    assert bool(re.search(r"Q6_K->Q8_0 x1\b", out)) == (qtype in ("q4_0", "q4_1", "q5_0"))
    code, info_out, _ = run(capsys, "info", str(dst), "--json")
    assert code == 0
    info = json.loads(info_out)
    ref = gguf.GGUFReader(dst)
    assert [t["name"] for t in info["tensors"]] == [t.name for t in ref.tensors]
    target = {"q4_k": "Q4_K", "q6_k": "Q6_K"}.get(qtype, qtype.upper())
    for t in ref.tensors:
        if len(t.shape) == 1:
            assert t.tensor_type.name == "F32", t.name
        elif t.name == "token_embd.weight":  # tied output head, 576 columns
            assert t.tensor_type.name == ("Q8_0" if target not in ("F16", "BF16") else target)
        elif target == "Q4_K":  # 576- and 1536-wide rows: 1536 fits, 576 falls back
            assert t.tensor_type.name == ("Q4_K" if int(t.shape[0]) % 256 == 0 else "Q5_0"), t.name
        elif target == "Q6_K":
            assert t.tensor_type.name == ("Q6_K" if int(t.shape[0]) % 256 == 0 else "Q8_0"), t.name
        else:
            assert t.tensor_type.name == target, t.name
    assert ref.fields["tokenizer.ggml.tokens"].contents()[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


LLAMA_QUANTIZE_TYPES = Path(__file__).resolve().parent / "data" / "llama_quantize_types.json"


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_type_choices_are_llama_quantizes(model):
    """Every recipe's per-tensor types on SmolLM2 (30 layers, GQA 3, 576-wide rows that
    fall back) and Gemma 3 270M (18 layers, GQA 4), against what llama-quantize wrote
    (scripts/record_llama_quantize.py recorded them).  Only the plan runs: no data."""
    from infer.gguf import gemma3_model_path
    from infer.quant_mixtures import RECIPES
    from infer.quantize import plan

    try:
        path = smollm2() if model == "smollm2" else gemma3_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    record = json.loads(LLAMA_QUANTIZE_TYPES.read_text())[model]
    assert Path(path).name == record["source"]
    with GGUFFile(path) as f:
        assert list(f.tensors) == record["tensors"]
        assert len(record["types"]) >= 18
        for recipe, types in record["types"].items():
            got = [s.dtype.name for s in plan(f, RECIPES[recipe])]
            want = types.split()
            diff = [(n, g, w) for n, g, w in zip(record["tensors"], got, want) if g != w]
            assert not diff, (recipe, diff[:5])


def test_unconvertible_source_tensor_is_kept(capsys, tmp_path):
    if not kernels_ready(DType.Q8_0):
        pytest.skip("quantization kernels not built yet")
    src, dst = tmp_path / "iq1m.gguf", tmp_path / "out.gguf"
    raw = np.random.default_rng(0).integers(0, 256, 2 * 56, dtype=np.uint8)
    w = GGUFWriter()
    w.add_metadata("general.architecture", "llama")
    w.add_tensor("blk.0.ffn_up.weight", raw, DType.IQ1_M, (2, 256))
    w.add_tensor("blk.0.attn_q.weight", np.ones((2, 64), np.float32))
    w.write(src)
    code, out, err = run(capsys, "quantize", str(src), str(dst), "--type", "q8_0")
    assert code == 0 and "kept 1 tensor unchanged" in err and "its format" in err and "IQ1_M" in err
    ref = {t.name: t for t in gguf.GGUFReader(dst).tensors}
    assert ref["blk.0.ffn_up.weight"].tensor_type.name == "IQ1_M"
    assert np.array_equal(np.asarray(ref["blk.0.ffn_up.weight"].data).reshape(-1), raw)
    assert ref["blk.0.attn_q.weight"].tensor_type.name == "Q8_0"


@SLOW
def test_quantize_gemma3_from_k_quants(capsys, tmp_path):
    """A real K-quant/Q5_0 source (Gemma 3) through the dequantize -> quantize pipeline."""
    from infer.gguf import gemma3_model_path

    try:
        path = gemma3_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    if not kernels_ready(DType.Q8_0, DType.Q4_K, DType.Q6_K, DType.Q5_0):
        pytest.skip("quantization kernels not built yet")
    dst = tmp_path / "gemma-q8_0.gguf"
    code, _, err = run(capsys, "quantize", str(path), str(dst), "--type", "q8_0")
    assert code == 0 and "warning: requantizing" in err
    with GGUFFile(path) as a, GGUFFile(dst) as b:
        assert list(a.tensors) == list(b.tensors)
        assert a.metadata["tokenizer.ggml.tokens"] == b.metadata["tokenizer.ggml.tokens"]
        assert b.metadata["general.file_type"] == 7
        seen = set()
        for name, t in a.tensors.items():
            out = b.tensors[name]
            assert out.dtype == (DType.Q8_0 if len(t.shape) >= 2 else t.dtype), name
            if t.dtype in seen or len(t.shape) < 2:
                continue
            seen.add(t.dtype)  # one tensor of each source type, decoded by gguf-py on both sides
            x = gq.dequantize(t.data.reshape(t.n_rows, -1), gguf.GGMLQuantizationType(int(t.dtype)))
            y = gq.dequantize(out.data.reshape(out.n_rows, -1), gguf.GGMLQuantizationType.Q8_0)
            rms = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
            assert rms < 0.01, (name, t.dtype.name, rms)
        assert seen == {DType.Q8_0, DType.Q5_0, DType.Q4_K, DType.Q6_K}


def test_quantize_progress_stays_out_of_logs_and_reaches_100(capsys, tmp_path):
    import io

    from infer.quantize import ProgressBar

    src, dst = tmp_path / "tiny.gguf", tmp_path / "out.gguf"
    tiny_model(src)
    code, out, err = run(capsys, "quantize", str(src), str(dst), "--type", "f16")
    assert code == 0 and "\r" not in err and "%" not in err and "it/s" not in err  # not a tty
    assert "warning" not in err

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for tqdm_missing in (False, True):
        term = Terminal()
        bar = ProgressBar(1000, "quantize to f16", stream=term)
        if tqdm_missing:
            bar._start = lambda: setattr(bar, "_started", True)   # the plain-line fallback
        bar.update(900)                # tensor bytes; the header is the other 100
        bar.finish()
        shown = term.getvalue()
        assert "100%" in shown or "100.0%" in shown, shown
        assert shown.endswith("\n")    # the finished bar stays on screen


def test_requantizing_to_a_float_type_does_not_warn(capsys, tmp_path):
    src, mid, dst = tmp_path / "tiny.gguf", tmp_path / "q8.gguf", tmp_path / "f16.gguf"
    tiny_model(src)
    assert run(capsys, "quantize", str(src), str(mid), "--type", "q8_0")[0] == 0
    code, out, err = run(capsys, "quantize", str(mid), str(dst), "--type", "f16")
    assert code == 0 and "warning" not in err
    code, out, err = run(capsys, "quantize", str(mid), str(tmp_path / "q4.gguf"), "--type", "q4_0")
    assert code == 0 and "warning: requantizing" in err and "quality is lower" in err
