"""llama.cpp's ggml CPU dot products as a mat-vec, for bench/kernels.py's `ggml` section.

ggml is loaded from a llama.cpp build at run time (never linked into infer): set
LLAMA_CPP_LIB_PATH to the folder holding libggml-base.so and libggml-cpu.so (llama.cpp's
build/bin).  A mat-vec is what ggml's CPU backend does per row of a weight matrix on x86:
quantize x once with the vec_dot_type's from_float, then one vec_dot per row.  The row
loop runs in a throwaway C shim compiled with `cc` into a temp folder (a ctypes call per
row would cost more than the dot product), calling the function pointers that
ggml_get_type_traits_cpu hands out.  Not measured: ggml's repacked layouts (Q4_0 8x8
gemv and the like), which llama.cpp uses for some types when it loads a model.
"""
import ctypes
import os
import shutil
import subprocess
import tempfile

SHIM_C = r"""
#include <stddef.h>
#include <stdint.h>
typedef void (*vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx,
                          const void *y, size_t by, int nrc);
typedef void (*from_float_t)(const float *x, void *y, int64_t k);

void shim_matvec(vec_dot_t dot, from_float_t quantize_x, const uint8_t *w, size_t row_bytes,
                 int64_t rows, int cols, const float *x, void *x_quant, float *out) {
    quantize_x(x, x_quant, cols);
    for (int64_t r = 0; r < rows; r++)
        dot(cols, out + r, 0, w + r * row_bytes, 0, x_quant, 0, 1);
}
"""


class TypeTraits(ctypes.Structure):
    """struct ggml_type_traits (ggml.h)."""
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


class TypeTraitsCpu(ctypes.Structure):
    """struct ggml_type_traits_cpu (ggml-cpu.h); enum ggml_type is an int."""
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


class GgmlUnavailable(RuntimeError):
    pass


class Ggml:
    """ggml's CPU vec_dot per ggml type id, wrapped as matvec(type_id, w, x, out)."""

    def __init__(self, lib_dir=None):
        lib_dir = lib_dir or os.environ.get("LLAMA_CPP_LIB_PATH")
        if not lib_dir:
            raise GgmlUnavailable("LLAMA_CPP_LIB_PATH is not set (the folder with llama.cpp's "
                                  "libggml-base.so and libggml-cpu.so, e.g. its build/bin)")
        paths = [os.path.join(lib_dir, name) for name in ("libggml-base.so", "libggml-cpu.so")]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise GgmlUnavailable(f"not found: {', '.join(missing)} (LLAMA_CPP_LIB_PATH={lib_dir})")
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            raise GgmlUnavailable("no C compiler (cc) to build the row-loop shim")
        self.base = ctypes.CDLL(paths[0], mode=ctypes.RTLD_GLOBAL)
        self.cpu = ctypes.CDLL(paths[1], mode=ctypes.RTLD_GLOBAL)
        self.base.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
        self.base.ggml_get_type_traits.argtypes = [ctypes.c_int]
        self.cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TypeTraitsCpu)
        self.cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
        self.cpu.ggml_cpu_init.restype = None
        self.cpu.ggml_cpu_init()   # fp16 tables and CPU feature detection
        self.tmp = tempfile.mkdtemp(prefix="infer-ggml-shim-")
        src, so = os.path.join(self.tmp, "shim.c"), os.path.join(self.tmp, "shim.so")
        with open(src, "w") as f:
            f.write(SHIM_C)
        try:
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, src], check=True,
                           capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            raise GgmlUnavailable(f"building the shim with {cc} failed: {e.stderr.strip()}") from e
        self.shim = ctypes.CDLL(so)
        self.shim.shim_matvec.restype = None
        self.shim.shim_matvec.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_size_t, ctypes.c_int64, ctypes.c_int,
                                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

    def features(self):
        """The SIMD sets ggml's CPU backend was built with and found (ggml_cpu_has_*)."""
        names = ["avx", "avx2", "fma", "f16c", "avx512", "avx512_vnni", "neon", "dotprod"]
        found = []
        for name in names:
            fn = getattr(self.cpu, f"ggml_cpu_has_{name}", None)
            if fn is not None and fn():
                found.append(name)
        return found

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def row_bytes(self, type_id, cols):
        t = self.base.ggml_get_type_traits(type_id).contents
        if cols % t.blck_size:
            raise ValueError(f"{t.type_name.decode()}: {cols} is not a multiple of {t.blck_size}")
        return cols // t.blck_size * t.type_size

    def matvec_fn(self, type_id, w, x, out):
        """A no-argument callable computing out = w @ x with ggml's kernels (w: rows x row
        bytes, uint8, in ggml's block layout; x float32; out float32 of rows)."""
        rows, cols = w.shape[0], x.shape[0]
        if w.shape[1] != self.row_bytes(type_id, cols) or out.shape[0] != rows:
            raise ValueError("w, x and out disagree with the type's row size")
        traits = self.cpu.ggml_get_type_traits_cpu(type_id).contents
        act = self.cpu.ggml_get_type_traits_cpu(traits.vec_dot_type).contents
        if not traits.vec_dot or not act.from_float:
            raise ValueError(f"ggml has no CPU vec_dot for type {type_id}")
        x_quant = ctypes.create_string_buffer(self.row_bytes(traits.vec_dot_type, cols))
        args = (traits.vec_dot, act.from_float, w.ctypes.data, w.shape[1], rows, cols,
                x.ctypes.data, ctypes.addressof(x_quant), out.ctypes.data)
        keep = (w, x, out, x_quant)   # the buffers live as long as the callable

        def run():
            self.shim.shim_matvec(*args)
            return keep
        return run
