"""Writes csrc/iquants_grids.c: the lookup tables of the IQ formats, from the gguf package.

The grids are published constants of ggml (ggml-common.h: iq2xxs_grid, iq2xs_grid,
iq2s_grid, iq3xxs_grid, iq3s_grid, iq1s_grid, ksigns_iq2xs).  The `gguf` package
(gguf.quants) carries the same tables, hex-packed, for its numpy dequantizers; this
script unpacks them into ggml's C form: one uint64 per grid point of 8 bytes (uint32 for
the 4-byte IQ3 points), byte j = element j, little-endian.  Each table's SHA-256 (over
its little-endian bytes) goes into the file, and tests/test_kernels_iquants.py checks
that the committed file is what this script writes.

    python scripts/gen_iquants_grids.py            rewrite csrc/iquants_grids.c
    python scripts/gen_iquants_grids.py --check    exit 1 if it differs
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
from gguf import quants as gq

OUT = Path(__file__).resolve().parent.parent / "csrc" / "iquants_grids.c"

# (C name, gguf class, bytes per point, C element type)
GRIDS = [
    ("infer_iq2xxs_grid", gq.IQ2_XXS, 8),
    ("infer_iq2xs_grid", gq.IQ2_XS, 8),
    ("infer_iq2s_grid", gq.IQ2_S, 8),
    ("infer_iq3xxs_grid", gq.IQ3_XXS, 4),
    ("infer_iq3s_grid", gq.IQ3_S, 4),
    ("infer_iq1s_grid", gq.IQ1_S, 8),
]


def grid_bytes(cls) -> np.ndarray:
    """The grid as its points' bytes (n_points x bytes per point); IQ1_S's -1 is 0xff."""
    cls.init_grid()
    values = np.asarray(cls.grid).reshape(cls.grid_shape)
    return values.astype(np.int8).view(np.uint8)


def tables() -> list[tuple[str, str, np.ndarray]]:
    """(C declaration type, name, little-endian bytes) of every table."""
    out = []
    for name, cls, width in GRIDS:
        b = grid_bytes(cls)
        assert b.shape[1] == width, (name, b.shape)
        out.append(("uint64_t" if width == 8 else "uint32_t", name, b))
    ksigns = np.frombuffer(gq.IQ2_XXS.ksigns, np.uint8)
    out.append(("uint8_t", "infer_ksigns_iq2xs", ksigns.reshape(-1, 1)))
    # Derived for the SIMD files: sign pattern k as 8 bytes of +1 / -1 (bit j of
    # ksigns[k] set: element j negative), ready for a byte-wise sign or multiply.
    bits = (ksigns[:, None] >> np.arange(8)) & 1
    out.append(("uint64_t", "infer_ksigns64_iq2xs", np.where(bits, 0xFF, 0x01).astype(np.uint8)))
    return out


def render() -> str:
    lines = [
        "/* iquants_grids.c: the lookup tables of the IQ formats (generated; do not edit).",
        " *",
        " * Written by scripts/gen_iquants_grids.py from the gguf package's copies (gguf.quants)",
        " * of ggml's tables in ggml-common.h, whose values and order they have: a grid point",
        " * of 8 (IQ3: 4) elements is one little-endian word, byte j = element j.  SHA-256 of",
        " * each table's little-endian bytes (the grids and ksigns were also compared, equal,",
        " * with ggml-common.h of the llama.cpp vendored by llama-cpp-python 0.3.36):",
    ]
    ts = tables()
    for _ctype, name, b in ts:
        lines.append(f" *   {name:<20} {hashlib.sha256(b.tobytes()).hexdigest()}")
    lines += [" */", '#include "iquants_grids.h"', ""]
    for ctype, name, b in ts:
        n = b.shape[0]
        lines.append(f"const {ctype} {name}[{n}] = {{")
        if ctype == "uint8_t":
            vals = [f"{v:3d}," for v in b[:, 0]]
            per_line = 16
        else:
            words = b.copy().view("<u8" if ctype == "uint64_t" else "<u4")[:, 0]
            digits = 16 if ctype == "uint64_t" else 8
            vals = [f"0x{int(w):0{digits}x}," for w in words]
            per_line = 4 if ctype == "uint64_t" else 8
        for i in range(0, n, per_line):
            lines.append("    " + " ".join(vals[i:i + per_line]))
        lines.append("};")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs from the gguf package tables'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
