"""Record llama.cpp's logits on the dense family files of tests/tiny_models.py (``DENSE``).

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_dense_logits.py \
        --out tests/data/llama_cpp_dense.npz NAME [NAME ...]

record_family_logits.py with ``tiny_models.DENSE`` as its table: the same context
and keys (tests/data/README.md).  The dense files have a table of their own so
that tests/test_families.py, which reads llama_cpp_families.npz for every entry
of ``TINY``, is left as it is.
"""
from __future__ import annotations

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests"))
import tiny_models as tm  # noqa: E402

tm.TINY = dict(tm.DENSE)   # the recorder looks names up in TINY
import record_family_logits  # noqa: E402

if __name__ == "__main__":
    record_family_logits.main()
