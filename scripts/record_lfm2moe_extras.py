"""Record which type llama-quantize gives each tensor of the tiny ``lfm2moe`` file of
tests/tiny_models.py, into tests/data/llama_cpp_lfm2moe.npz (its logits are
scripts/record_family_logits.py's):

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_lfm2moe_extras.py tests/data/llama_cpp_lfm2moe.npz

Keys: ``quantize/names`` (the tensors) and ``quantize/<recipe>`` (the type name of each,
``llama_model_quantize`` with the recipe's llama.cpp file type, no imatrix), as
scripts/record_lfm2_extras.py records them for ``lfm2``.  Other keys are kept.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_lfm2_extras import llama_quantize_types  # noqa: E402


def main() -> None:
    out = sys.argv[1]
    arrays = dict(np.load(out)) if os.path.exists(out) else {}
    with tempfile.TemporaryDirectory() as tmp:
        path = tm.write("lfm2moe", os.path.join(tmp, "lfm2moe.gguf"))
        for key, values in llama_quantize_types(path, tmp).items():
            arrays[f"quantize/{key}"] = np.array(values)
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main()
