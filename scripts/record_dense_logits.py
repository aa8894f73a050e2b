"""Record llama.cpp's logits on the dense family files of tests/tiny_models.py (``DENSE``).

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_dense_logits.py \
        --out tests/data/llama_cpp_dense.npz NAME [NAME ...]

record_family_logits.py with ``tiny_models.DENSE`` (or ``DENSE2``) as its table: the same context
and keys (tests/data/README.md).  The dense files have a table of their own so
that tests/test_families.py, which reads llama_cpp_families.npz for every entry
of ``TINY``, is left as it is.  Besides the logits, each file's vocabulary
(with its ``tokenizer.ggml.pre``) tokenizes ``tiny_models.TOKENIZE_TEXTS`` in
llama.cpp (``llama_tokenize``, no specials added or parsed): ``<name>/tokens/<i>``.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests"))
import tiny_models as tm  # noqa: E402

import record_family_logits  # noqa: E402


def main() -> None:
    record_family_logits.main()
    out = sys.argv[sys.argv.index("--out") + 1]
    names = [a for a in sys.argv[1:] if a in tm.DENSE or a in tm.DENSE2]
    arrays = dict(np.load(out))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = tm.write(name, os.path.join(tmp, f"{name}.gguf"))
            for i, ids in enumerate(record_family_logits.llama_tokenize(path, tm.TOKENIZE_TEXTS)):
                arrays[f"{name}/tokens/{i}"] = np.array(ids, dtype=np.int32)
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main()
