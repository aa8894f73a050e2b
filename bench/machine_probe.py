"""The machine's limits, for the bench scripts to print beside what infer reaches.

    python bench/machine_probe.py        # INFER_PROBE_MIB=96,235 INFER_THREADS=1,2

* read bandwidth: GB/s of `threads` threads each streaming its share of one buffer
  with 256-bit loads (best of several passes), over a buffer larger than the last-level
  cache, so the figure is DRAM's.  A decode step reads every weight byte once, so
  bandwidth / weight bytes bounds decode tokens/s.
* int8 peak: G multiply-adds per CPU second of one thread, independent chains of the
  instruction the kernels use for 8-bit dots: vpmaddubsw (summed in int16) on AVX2,
  vpdpbusd at 512 bits on AVX-512 VNNI.  A probe the CPU cannot execute is reported as unavailable, never
  estimated.

The probes are a throwaway C shim compiled with `cc` into a temp folder (as
bench/ggml_matvec.py does), so they measure the machine rather than numpy.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

SHIM_C = r"""
#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* the calling thread's CPU time: a compute peak is not lowered by other processes */
static double thread_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct { const uint8_t *p; size_t n; long long sink; } share;

__attribute__((target("avx2"))) static void *read_share(void *arg) {
    share *s = (share *)arg;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= s->n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(s->p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(s->p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(s->p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(s->p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    s->sink = _mm256_extract_epi64(a, 0);
    return 0;
}

/* Seconds of the fastest of `passes` reads of p[0, n) split over nth threads. */
double probe_read(const uint8_t *p, size_t n, int nth, int passes) {
    double best = 1e30;
    share s[64];
    pthread_t th[64];
    if (nth > 64) nth = 64;
    const size_t per = n / nth / 128 * 128;
    for (int r = 0; r < passes; r++) {
        const double t0 = now();
        for (int k = 0; k < nth; k++) {
            s[k].p = p + k * per, s[k].n = per;
            if (k) pthread_create(&th[k], 0, read_share, &s[k]);
        }
        read_share(&s[0]);
        for (int k = 1; k < nth; k++) pthread_join(th[k], 0);
        const double t = now() - t0;
        if (t < best) best = t;
    }
    return best * n / (per * nth);
}

int has_avx2(void) { return __builtin_cpu_supports("avx2"); }
int has_vnni(void) { return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"); }

/* CHAINS independent chains of 32 u8 x s8 products per step, each on its own
 * operands (the compiler would otherwise compute one product for all): returns
 * multiply-adds per CPU second.  The empty asm marks u as changed every step, so no
 * product is hoisted out of the loop: the multiplies' throughput is
 * measured, as in a mat-mul's inner loop.  AVX2 sums pairs in int16 (vpmaddubsw)
 * and accumulates in int16, as the kernels do within a block. */
#define CHAINS 6
#define INT8_PROBE(name, isa, step)                                                      \
    __attribute__((target(isa))) double name(long steps) {                               \
        __m256i u = _mm256_set1_epi8(3);                                                  \
        __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2); \
        __m256i a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5); \
        __m256i s0 = _mm256_set1_epi8(-3), s1 = _mm256_set1_epi8(-2), s2 = _mm256_set1_epi8(-1); \
        __m256i s3 = _mm256_set1_epi8(1), s4 = _mm256_set1_epi8(2), s5 = _mm256_set1_epi8(3); \
        const double t0 = thread_now();                                                   \
        for (long i = 0; i < steps; i++) {                                                \
            __asm__ volatile("" : "+x"(u));                                               \
            a0 = step(a0, u, s0); a1 = step(a1, u, s1); a2 = step(a2, u, s2);             \
            a3 = step(a3, u, s3); a4 = step(a4, u, s4); a5 = step(a5, u, s5);             \
        }                                                                                 \
        const double t = thread_now() - t0;                                               \
        const __m256i x = _mm256_xor_si256(_mm256_xor_si256(_mm256_xor_si256(a0, a1), a2), \
                                           _mm256_xor_si256(_mm256_xor_si256(a3, a4), a5)); \
        volatile int sink = _mm256_extract_epi32(x, 0);                                   \
        (void)sink;                                                                       \
        return (double)CHAINS * 32 * steps / t;                                           \
    }
#define MADDUBS_STEP(acc, u, s) _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s))
INT8_PROBE(probe_int8_avx2, "avx2", MADDUBS_STEP)

/* VNNI at the AVX-512 kernels' width (512 bits, 64 products a step) and with 12
 * chains: the accumulator is the chain, and vpdpbusd's latency at two a cycle needs
 * more than 6 in flight (6 chains of 256 bits read 175 G MAC/s on Zen 5, where these
 * read 235; 256 and 512 bits give the same rate there).  One product never serves
 * two chains, so they can share their operands. */
#define VNNI_CHAINS 12
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double probe_int8_vnni(long steps) {
    __m512i u = _mm512_set1_epi8(3);
    const __m512i s = _mm512_set1_epi8(-3);
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2);
    __m512i a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5);
    __m512i a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8);
    __m512i a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    const double t0 = thread_now();
    for (long i = 0; i < steps; i++) {
        __asm__ volatile("" : "+v"(u));
        a0 = _mm512_dpbusd_epi32(a0, u, s); a1 = _mm512_dpbusd_epi32(a1, u, s);
        a2 = _mm512_dpbusd_epi32(a2, u, s); a3 = _mm512_dpbusd_epi32(a3, u, s);
        a4 = _mm512_dpbusd_epi32(a4, u, s); a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s); a7 = _mm512_dpbusd_epi32(a7, u, s);
        a8 = _mm512_dpbusd_epi32(a8, u, s); a9 = _mm512_dpbusd_epi32(a9, u, s);
        a10 = _mm512_dpbusd_epi32(a10, u, s); a11 = _mm512_dpbusd_epi32(a11, u, s);
    }
    const double t = thread_now() - t0;
    const __m512i x = _mm512_xor_si512(
        _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)),
                         _mm512_xor_si512(_mm512_xor_si512(a4, a5), _mm512_xor_si512(a6, a7))),
        _mm512_xor_si512(_mm512_xor_si512(a8, a9), _mm512_xor_si512(a10, a11)));
    volatile int sink = _mm512_reduce_add_epi32(x);
    (void)sink;
    return (double)VNNI_CHAINS * 64 * steps / t;
}
"""


class ProbeUnavailable(RuntimeError):
    pass


class Probe:
    """The compiled shim: read_gbs(mib, threads) and int8_gmacs() -> {name: G MAC/s or None}."""

    def __init__(self):
        if not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "amd64"):
            raise ProbeUnavailable("the probes are written for x86-64 Linux")
        cc = shutil.which("cc")
        if cc is None:
            raise ProbeUnavailable("no C compiler (cc) on PATH")
        self._dir = tempfile.mkdtemp(prefix="infer_probe_")
        src, lib = os.path.join(self._dir, "probe.c"), os.path.join(self._dir, "probe.so")
        with open(src, "w") as f:
            f.write(SHIM_C)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", src, "-o", lib], check=True,
                       capture_output=True)
        self._lib = ctypes.CDLL(lib)
        self._lib.probe_read.restype = ctypes.c_double
        self._lib.probe_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
        for name in ("probe_int8_avx2", "probe_int8_vnni"):
            getattr(self._lib, name).restype = ctypes.c_double
            getattr(self._lib, name).argtypes = [ctypes.c_long]
        self._buffers = {}

    def read_gbs(self, mib, threads, passes=5):
        """GB/s reading a buffer of `mib` MiB (pages touched beforehand) with `threads` threads."""
        import numpy as np

        if mib not in self._buffers:
            raw = np.ones(mib * 2**20 + 64, np.uint8)
            off = (-raw.ctypes.data) % 64
            self._buffers[mib] = raw[off:off + mib * 2**20]
        buf = self._buffers[mib]
        seconds = self._lib.probe_read(buf.ctypes.data, buf.nbytes, threads, passes)
        return buf.nbytes / seconds / 1e9

    def int8_gmacs(self, steps=20_000_000):
        """One thread's 8-bit multiply-add peak per instruction family (None: not on this CPU)."""
        out = {"avx2 vpmaddubsw": None, "avx512 vnni vpdpbusd": None}
        if self._lib.has_avx2():
            out["avx2 vpmaddubsw"] = self._lib.probe_int8_avx2(steps) / 1e9
        if self._lib.has_vnni():
            out["avx512 vnni vpdpbusd"] = self._lib.probe_int8_vnni(steps) / 1e9
        return out


def main():
    sizes = [int(v) for v in os.environ.get("INFER_PROBE_MIB", "96,235").split(",")]
    threads = [int(v) for v in os.environ.get("INFER_THREADS", "1,2").split(",")]
    probe = Probe()
    print("| read bandwidth | " + " | ".join(f"{t} thr GB/s" for t in threads) + " |")
    print("| --- |" + " ---: |" * len(threads))
    for mib in sizes:
        print(f"| {mib} MiB | " + " | ".join(f"{probe.read_gbs(mib, t):.1f}" for t in threads) + " |")
    print()
    print("| int8 dot, one thread | G MAC/s |")
    print("| --- | ---: |")
    for name, g in probe.int8_gmacs().items():
        print(f"| {name} | {'unavailable on this CPU' if g is None else f'{g:.1f}'} |")


if __name__ == "__main__":
    main()
