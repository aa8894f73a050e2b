"""One block of memory for the weights infer copies at load (the repacked
matrices, `variants/weights.py`), on the OS's huge pages where it offers them.

A decode step streams every weight once.  On 4 KB pages that is one TLB entry
per 4 KB: SmolLM2's 96 MB are 24,000 page walks a token, and its small matrices
(under numpy's 4 MB threshold for asking for huge pages) each sat on pages of their
own.  In one 2 MB-aligned block with ``MADV_HUGEPAGE`` (Linux; transparent huge
pages in "madvise" or "always" mode), the same copies took SmolLM2's one-token step
0.79-0.93x the time and Gemma 3's 0.90-0.95x (Zen 5, alternated in one process).
Elsewhere, or where the OS declines, the block is ordinary memory.
"""
import mmap

import numpy as np
from numpy.typing import NDArray

HUGE_PAGE = 2 << 20
ALIGN = 64   # each part starts on a cache line


class Arena:
    """``nbytes`` of zeroed memory handed out in parts (`take`), freed when the
    arena and every part are gone."""

    def __init__(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"nbytes: expected >= 0, got {nbytes}")
        # anonymous and private (shared memory has its own huge-page policy, off by
        # default): zero pages on first touch
        try:
            if hasattr(mmap, "MAP_PRIVATE"):
                self._buf = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE)
            else:   # Windows
                self._buf = mmap.mmap(-1, nbytes + HUGE_PAGE)
        except (OSError, OverflowError) as e:
            raise MemoryError(f"arena: cannot map {nbytes / 2**20:,.1f} MiB for the weights' copies ({e})") from None
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._buf.madvise(mmap.MADV_HUGEPAGE)
            except OSError:   # a kernel without transparent huge pages
                pass
        raw = np.frombuffer(self._buf, np.uint8)   # the array keeps the map alive
        start = -raw.ctypes.data % HUGE_PAGE
        self._free = raw[start:start + nbytes]
        self._used = 0

    def take(self, shape: "tuple[int, int]") -> NDArray[np.uint8]:
        """A C-contiguous uint8 array of ``shape`` from the arena's next bytes."""
        n = shape[0] * shape[1]
        lo = self._used
        if lo + n > len(self._free):
            raise MemoryError(f"arena: {n} bytes asked, {len(self._free) - lo} left")
        self._used = lo + (n + ALIGN - 1) // ALIGN * ALIGN
        return self._free[lo:lo + n].reshape(shape)

    @staticmethod
    def size_of(shapes: "list[tuple[int, int]]") -> int:
        """Bytes an arena needs for parts of these shapes."""
        return sum((r * c + ALIGN - 1) // ALIGN * ALIGN for r, c in shapes)
