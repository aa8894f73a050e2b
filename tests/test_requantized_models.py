"""SmolLM2 and Gemma 3 requantized by `infer quantize` to each new type still answer.

Each model is requantized with infer's quantizer (the recipes of infer.quant_mixtures,
as llama-quantize chooses per tensor), loaded, and asked "The capital of France is"
greedily: the answer must name Paris.  The check is loose on purpose (the source files
are already 4-bit, and Q2_K is coarse): it shows the files load through the same path
as the shipped ones and compute sensible logits.  SmolLM2 runs q2_k, iq4_xs and
q5_k_m by default (~40 s); INFER_SLOW_TESTS=1 runs every recipe on both models.
"""
import os

import pytest

import infer
from infer.gguf import default_model_path, gemma3_model_path
from infer.quantize import quantize_file

SLOW = pytest.mark.slow("slow on a 2-core machine")
RECIPES = ["q5_1", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_m", "q5_k", "q5_k_m", "iq4_nl", "iq4_xs"]
DEFAULT = {("smollm2", "q2_k"), ("smollm2", "iq4_xs"), ("smollm2", "q5_k_m")}
CASES = [pytest.param(m, r, marks=() if (m, r) in DEFAULT else SLOW)
         for m in ("smollm2", "gemma3") for r in RECIPES]


@pytest.mark.parametrize("model,recipe", CASES)
def test_requantized_model_answers(tmp_path, model, recipe):
    try:
        src = default_model_path() if model == "smollm2" else gemma3_model_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    dst = tmp_path / f"{model}-{recipe}.gguf"
    report = quantize_file(src, dst, recipe)
    written = report.type_counts()
    with infer.load(dst) as m:
        text = "".join(infer.generate(m, "The capital of France is", max_tokens=12, temperature=0))
    assert "Paris" in text, (recipe, written, text)
