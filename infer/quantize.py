"""Requantize a GGUF model: the logic behind ``infer quantize``.

Which tensor gets which type follows llama-quantize (``quant_mixtures``: its
recipes such as ``q4_k_m``, their per-tensor exceptions and its fallbacks when a
row length is not a whole number of blocks; docs/gguf.md states the rules):

* Only weights are converted: tensors named ``*weight`` with 2 or more
  dimensions.  Norms, biases and other 1-D tensors are copied unchanged (F32).
* A tensor already in its chosen type is copied byte for byte; one in a format
  the kernels cannot decode is copied unchanged and reported.

All metadata are kept; ``general.file_type`` is set to the matching llama.cpp
file type and ``general.quantization_version`` to 2, as llama-quantize does.
Tensors are converted by a thread pool (the kernels release the GIL) a few at a
time, in chunks of rows, and streamed to a temp file renamed into place at the
end, so memory stays near a few tensors and an interrupted run leaves no output.
"""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
from numpy.typing import NDArray

from .gguf import GGUFFile, GGUFWriter, PathArg, ValueType, split_part
from .quant_mixtures import RECIPES, Recipe, TypeChooser, fall_back, processing_order
from .tensor import DType, Tensor, encode_f32

QUANTIZATION_VERSION = 2  # ggml's GGML_QNT_VERSION: the block layouts in use since 2023
# llama-quantize's exclusions by name; the small conv kernels (Mamba's ssm_conv1d, LFM2's
# shortconv.conv: rows of 3-4 taps), Gemma 4's small per-layer projection and norms (Mamba2's
# ssm_norm is (groups, d_inner / groups)) stay as they are
NOT_QUANTIZED = ("ffn_gate_inp.weight", "pos_embd", "token_types", "ssm_conv1d", "shortconv.conv.weight",
                 "per_layer_model_proj", "_norm.weight", "position_embd")  # BERT's position table too
# Elements converted per step of one tensor (bounds the float32 scratch to 16 MB).
CHUNK_ELEMENTS = 1 << 22


@dataclass
class Step:
    """What happens to one tensor."""

    tensor: Tensor
    dtype: DType               # type written
    wanted: Optional[DType] = None  # type chosen before a row-length fallback, if any
    unsupported: bool = False  # wanted a conversion the kernels cannot do

    @property
    def fallback(self) -> bool:
        return self.wanted is not None

    @property
    def copy(self) -> bool:
        return self.dtype == self.tensor.dtype

    @property
    def nbytes(self) -> int:
        return self.tensor.n_rows * self.dtype.row_bytes(self.tensor.n_cols)


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0

    @property
    def n_fallback(self) -> int:
        return sum(s.fallback for s in self.steps)

    @property
    def n_unsupported(self) -> int:
        return sum(s.unsupported for s in self.steps)

    def fallbacks(self) -> dict[str, int]:
        """{"Q4_K->Q5_0": count, ...} for the tensors that fell back."""
        counts: dict[str, int] = {}
        for s in self.steps:
            if s.wanted is not None:
                key = f"{s.wanted.name}->{s.dtype.name}"
                counts[key] = counts.get(key, 0) + 1
        return counts

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.dtype.name] = counts.get(s.dtype.name, 0) + 1
        return counts


def is_weight(t: Tensor) -> bool:
    return t.name.endswith("weight") and len(t.shape) >= 2 and not any(x in t.name for x in NOT_QUANTIZED)


def plan(f: GGUFFile, recipe: Recipe) -> list[Step]:
    """What happens to each tensor, in file order (chosen in llama-quantize's order)."""
    tensors = list(f.tensors.values())
    chooser = TypeChooser(recipe, [t.name for t in tensors], f.metadata)
    steps: list[Optional[Step]] = [None] * len(tensors)
    for k in processing_order([t.name for t in tensors]):
        t = tensors[k]
        if not is_weight(t):
            steps[k] = Step(t, t.dtype)
            continue
        chosen = chooser.choose(t.name, t.n_cols, t.shape[-3] if len(t.shape) >= 3 else 1)
        written = fall_back(chosen, t.n_cols)
        step = Step(t, written, chosen if written != chosen else None)
        if not step.copy and not t.dtype.kernel_supported:
            step.dtype, step.wanted, step.unsupported = t.dtype, None, True
        steps[k] = step
    return [s for s in steps if s is not None]


def recipe_for(target: Union[DType, str]) -> Recipe:
    """The recipe a ``--type`` name (or a DType: its plain name) stands for."""
    name = target.lower() if isinstance(target, str) else DType(target).name.lower()
    if name not in RECIPES:
        raise ValueError(f"type: cannot quantize to {name}; choose one of {', '.join(RECIPES)}")
    return RECIPES[name]


def convert(step: Step) -> NDArray[Any]:
    """The bytes of ``step.tensor`` in ``step.dtype`` (a zero-copy view when unchanged)."""
    t = step.tensor
    if step.copy:
        return t.data
    out = np.empty(step.nbytes, dtype=np.uint8)
    row_out = step.dtype.row_bytes(t.n_cols)
    rows = max(1, CHUNK_ELEMENTS // t.n_cols)
    scratch = np.empty(min(rows, t.n_rows) * t.n_cols, dtype=np.float32)
    for i in range(0, t.n_rows, rows):
        j = min(i + rows, t.n_rows)
        f32 = t.dequantize_rows(i, j, out=scratch[:(j - i) * t.n_cols])
        encode_f32(f32.reshape(-1), step.dtype, out[i * row_out:j * row_out])
    return out


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def quantize_file(src: PathArg, dst: PathArg, target: Union[DType, str],
                  threads: Optional[int] = None,
                  progress: Optional[Callable[[int], None]] = None,
                  warn: Callable[[str], None] = lambda msg: None) -> Report:
    """Write ``src`` requantized to ``target`` at ``dst`` (atomically).

    ``progress(nbytes)`` is called as each tensor is written, with the bytes of
    the source tensor; ``warn(message)`` receives warnings before work starts.
    """
    recipe = recipe_for(target)
    threads = default_threads() if threads is None else threads
    if threads < 1:
        raise ValueError(f"threads: must be >= 1, got {threads}")
    if Path(src).resolve() == Path(dst).resolve():
        raise ValueError("output: must differ from the input file")
    # Found now, not after the whole file is converted (the rename at the end would fail).
    if Path(dst).is_dir():
        raise ValueError(f"output: {dst} is a directory")
    if not Path(dst).parent.is_dir():
        raise ValueError(f"output: directory {Path(dst).parent} does not exist")
    t0 = time.perf_counter()
    report = Report()
    with GGUFFile(src) as f:
        split = split_part(f.metadata, src)
        if split is not None:  # quantizing one part would write a model missing the others' tensors
            raise ValueError(split)
        steps = report.steps = plan(f, recipe)
        # Only a quantized destination loses quality: rounding Q4_1's values to F16
        # or BF16 costs far less than their quantization already did.
        requantized = [s for s in steps if not s.copy and s.tensor.dtype.is_quantized
                       and s.dtype.is_quantized]
        if requantized:
            kinds = sorted({s.tensor.dtype.name for s in requantized})
            warn(f"requantizing {len(requantized)} tensors that are already quantized "
                 f"({', '.join(kinds)}): quality is lower than quantizing from F16/F32")
        if report.n_unsupported:
            first = next(s.tensor for s in steps if s.unsupported)
            n = report.n_unsupported
            warn(f"kept {n} tensor{'s' if n != 1 else ''} unchanged: infer cannot decode "
                 f"{'their' if n != 1 else 'its'} format "
                 f"(e.g. {first.name} is {first.dtype.name})")

        writer = GGUFWriter(alignment=f.alignment)
        writer.copy_metadata(f, exclude=("general.file_type", "general.quantization_version"))
        writer.add_metadata("general.file_type", recipe.file_type, ValueType.UINT32)
        # as llama-quantize writes them: the file type, and ggml's quantization format version
        writer.add_metadata("general.quantization_version", QUANTIZATION_VERSION, ValueType.UINT32)

        window = 2 * threads  # tensors converted ahead of the writer
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="quantize") as pool:
            futures: dict[int, Future[NDArray[Any]]] = {}

            def producer(k: int) -> Callable[[], NDArray[Any]]:
                def produce() -> NDArray[Any]:
                    for m in range(k, min(k + window, len(steps))):
                        if m not in futures:
                            futures[m] = pool.submit(convert, steps[m])
                    return futures.pop(k).result()
                return produce

            for k, s in enumerate(steps):
                writer.add_tensor(s.tensor.name, producer(k), s.dtype, s.tensor.shape)
            try:
                writer.write(dst, progress=(lambda name, n: progress(f.tensors[name].nbytes))
                             if progress else None)
            finally:
                for fut in futures.values():
                    fut.cancel()
        report.bytes_in = f.size
    report.bytes_out = os.path.getsize(dst)
    report.seconds = time.perf_counter() - t0
    return report


class ProgressBar:
    """tqdm when installed, else one self-overwriting stderr line; nothing at all
    when stderr is not a terminal (a log would get every redraw)."""

    def __init__(self, total: int, desc: str, stream: Any = None) -> None:
        self.total, self.done, self.desc = total, 0, desc
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self._last = 0.0
        self._bar: Any = None
        self._started = False

    def _start(self) -> None:
        # drawn at the first update, so that warnings printed before work starts stay readable
        self._started = True
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=self.total, desc=self.desc, unit="B", unit_scale=True,
                         unit_divisor=1024, file=self.stream, leave=True)

    def finish(self) -> None:
        """Show 100%: the work is done (the header and metadata are not counted
        in the tensors' updates), then close."""
        if self.done < self.total:
            self.update(self.total - self.done)
        self.close()

    def update(self, n: int) -> None:
        if not self.enabled:
            self.done += n
            return
        if not self._started:
            self._start()
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last > 0.2 or self.done >= self.total:
            self._last = now
            pct = 100.0 * self.done / max(1, self.total)
            print(f"\r{self.desc}: {pct:5.1f}% ({self.done >> 20}/{self.total >> 20} MiB)",
                  end="", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.enabled and self._started:
            print(file=self.stream, flush=True)  # keep the last line, end it
        self._started = False
