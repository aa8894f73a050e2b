"""Hostile GGUF files: only GGUFError, never another exception, a hang, a crash or a huge allocation.

A small valid file from our writer is truncated at every offset, has every
8-byte window overwritten with huge counts, and has random bytes flipped
(hypothesis).  Whatever opens must then be fully readable: every tensor's
bytes are summed, so a view outside the map would crash the test.
"""
from __future__ import annotations

import os
import struct
import tracemalloc

import numpy as np
import pytest
from _gguf_impls import STRINGS_IMPLS, use_strings_impl

from infer.gguf import GGUFError, GGUFFile, GGUFWriter, ValueType
from infer.tensor import DType

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import (  # noqa: E402
    HealthCheck,
    given,
    settings,
    strategies as st,
)

# Peak Python/numpy allocation allowed while opening one ~1 KB file.
MAX_ALLOC = 1 << 20


@pytest.fixture(scope="module")
def valid_blob(tmp_path_factory) -> bytes:
    w = GGUFWriter()
    w.add_metadata("general.architecture", "llama")
    w.add_metadata("llama.context_length", 128, ValueType.UINT32)
    w.add_metadata("tokenizer.ggml.tokens", ["<s>", "a", "bc", "Ġd"])
    w.add_metadata("tokenizer.ggml.scores", np.array([0, -1, -2, -3], np.float32))
    w.add_metadata("flag", True)
    w.add_metadata("nested", [np.array([1, 2], np.int32), ["x"]], ValueType.ARRAY)
    w.add_metadata("general.alignment", 32, ValueType.UINT32)
    w.add_tensor("norm", np.ones(32, np.float32))
    w.add_tensor("q8", np.zeros(2 * 34, np.uint8), DType.Q8_0, (2, 32))
    w.add_tensor("emb", np.arange(64, dtype=np.float16).reshape(2, 32))
    path = tmp_path_factory.mktemp("fuzz") / "valid.gguf"
    w.write(path)
    blob = path.read_bytes()
    assert len(blob) < 1024
    return blob


class Scratch:
    """One file rewritten in place (creating a file per case is ~50x slower than pwrite)."""

    def __init__(self, path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def set(self, blob: bytes) -> "Scratch":
        os.ftruncate(self.fd, len(blob))
        os.pwrite(self.fd, bytes(blob), 0)
        return self

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture(params=STRINGS_IMPLS, autouse=True)
def strings_impl(request, monkeypatch):
    """Every test runs with the compiled string-array decoder and with the Python loop."""
    return use_strings_impl(request.param, monkeypatch)


@pytest.fixture
def scratch(tmp_path):
    s = Scratch(tmp_path / "hostile.gguf")
    yield s
    s.close()


def open_hostile(path) -> None:
    """Open; anything but GGUFError fails the test; on success read everything."""
    try:
        f = GGUFFile(path)
    except GGUFError:
        return
    with f:
        for t in f.tensors.values():
            assert t.data.size == t.nbytes
            int(t.data.sum())  # touches every byte of the view
        for value in f.metadata.values():
            repr(value)


def measured_open(path) -> None:
    tracemalloc.start()
    try:
        open_hostile(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MAX_ALLOC, f"opening allocated {peak} bytes"


def test_valid_file_opens(valid_blob, tmp_path):
    path = tmp_path / "v.gguf"
    path.write_bytes(valid_blob)
    with GGUFFile(path) as f:
        assert f.metadata["tokenizer.ggml.tokens"] == ["<s>", "a", "bc", "Ġd"]
        assert list(f.tensors) == ["norm", "q8", "emb"]


def test_every_truncation_raises(valid_blob, scratch):
    for n in range(len(valid_blob)):
        scratch.set(valid_blob[:n])
        with pytest.raises(GGUFError):
            GGUFFile(scratch.path)


@pytest.mark.parametrize("width", [8, 4])
def test_every_count_inflated(valid_blob, scratch, width):
    """Every window of the header (aligned or not) overwritten by huge little-endian numbers."""
    fmt = "<Q" if width == 8 else "<I"
    top = (1 << (8 * width)) - 1
    huge = [top, 1 << (8 * width - 2), len(valid_blob) + 1, 0]
    scratch.set(valid_blob)
    with GGUFFile(scratch.path) as f:
        header_end = f.data_offset
    tracemalloc.start()
    try:
        for pos in range(0, header_end - width + 1):
            for value in huge:
                blob = bytearray(valid_blob)
                blob[pos:pos + width] = struct.pack(fmt, value)
                scratch.set(blob)
                tracemalloc.reset_peak()
                open_hostile(scratch.path)
                assert tracemalloc.get_traced_memory()[1] < MAX_ALLOC, (pos, value)
    finally:
        tracemalloc.stop()


@settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_byte_flips(valid_blob, scratch, data):
    blob = bytearray(valid_blob)
    n_flips = data.draw(st.integers(1, 8))
    for _ in range(n_flips):
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    measured_open(scratch.set(blob).path)


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(min_size=0, max_size=300), keep=st.integers(0, 200))
def test_valid_prefix_then_junk(valid_blob, scratch, junk, keep):
    measured_open(scratch.set(valid_blob[:keep] + junk).path)
