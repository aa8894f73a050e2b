/* selftest.c: every SIMD kernel against the scalar one, in C, with no Python.
 *
 * For each ISA this CPU can run other than scalar, every table entry that the ISA
 * overrides (its function pointer differs from the scalar table's) is run on random
 * inputs of awkward lengths and compared with the scalar entry.  It runs the same
 * natively and under qemu-user (the aarch64 cross build checks the NEON files).
 *
 *   usage: selftest [-v] [seed]        prints "N passed, M failed"; exit 1 on failure
 *
 * Tolerances (stated per kernel below) allow only what differs legitimately between
 * a SIMD and a scalar implementation: float summation order, FMA contraction, and a
 * quantizer's rounding of an element lying on a rounding boundary.  Outputs are also
 * checked for writes past their end (guard zones), and every buffer is only as
 * aligned as its C type requires (rows of quantized blocks start at any even offset
 * in a GGUF file; float arrays are 4-byte aligned).
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L  /* nanosleep */
#endif
#include "../infer_kernels.h"
#include "../atomics.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The checks below name every field of the table; a field appended to
 * infer_kernel_table must get its check here too, or it would go untested. */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(infer_kernel_table) ==
                   offsetof(infer_kernel_table, repack_to) +
                       sizeof(unsigned char[INFER_TYPE_COUNT]),
               "infer_kernel_table has a field the self-test does not check");
#endif

/* Block counts that straddle every SIMD width and unroll factor. */
static const int BLOCK_COUNTS[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97};
#define N_BLOCK_COUNTS ((int)(sizeof BLOCK_COUNTS / sizeof BLOCK_COUNTS[0]))
/* Element counts for the float ops (any length is legal there). */
static const int OP_LENGTHS[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65,
                                 127, 576, 1000, 1536};
#define N_OP_LENGTHS ((int)(sizeof OP_LENGTHS / sizeof OP_LENGTHS[0]))

#define GUARD 64            /* bytes checked after every output */
#define GUARD_BYTE 0xA5
/* Buffers start this far past malloc's (16-byte) alignment: the least alignment their
 * C type allows, so SIMD code that assumes more (aligned loads) fails here. */
#define ALIGN_F32 4         /* float arrays (numpy guarantees no more) */
#define ALIGN_BLOCK 2       /* rows of 18/20/22/34-byte blocks start at any even offset */

static int verbose;
static int n_passed, n_failed;
static const char *cur_isa;

/* ---- random inputs -------------------------------------------------------- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}
static double uniform(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
static float gaussian(void) {
    double u = uniform() + 1e-300, v = uniform();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Floats whose scale changes from block to block (ten orders of magnitude, signed
 * offsets, occasional all-zero and constant blocks) so per-block scales are exercised. */
static void random_floats(float *x, int64_t n, int block) {
    for (int64_t b = 0; b < n; b += block) {
        int64_t len = n - b < block ? n - b : block;
        double scale = pow(10.0, -4.0 + 6.0 * uniform());
        double offset = uniform() < 0.3 ? scale * 2.0 * (uniform() - 0.5) : 0.0;
        int kind = (int)(next_u64() % 16);
        for (int64_t i = 0; i < len; i++) {
            if (kind == 0) x[b + i] = 0.0f;
            else if (kind == 1) x[b + i] = (float)scale;
            else x[b + i] = (float)(offset + scale * gaussian());
        }
    }
}

static infer_half random_scale_half(void) {
    /* |d| in [2^-10, 2^2), either sign: finite, normal, and far from overflow. */
    float mag = (float)ldexp(1.0 + uniform(), -10 + (int)(next_u64() % 12));
    return infer_fp32_to_fp16(next_u64() & 1 ? -mag : mag);
}

/* Byte offsets of the fp16 scale fields of weight formats whose other bytes may hold
 * any bit pattern; -1 ends a list.  Random bytes then cover every quant value. */
typedef struct { int type; int half_offsets[3]; } raw_layout;
static const raw_layout RAW_LAYOUTS[] = {
    {INFER_TYPE_Q4_0, {0, -1}},
    {INFER_TYPE_Q4_1, {0, 2, -1}},
    {INFER_TYPE_Q5_0, {0, -1}},
    {INFER_TYPE_Q8_0, {0, -1}},
    {INFER_TYPE_Q4_K, {0, 2, -1}},
    {INFER_TYPE_Q6_K, {208, -1}},
    {INFER_TYPE_Q5_1, {0, 2, -1}},
    {INFER_TYPE_Q2_K, {80, 82, -1}},
    {INFER_TYPE_Q3_K, {108, -1}},
    {INFER_TYPE_Q5_K, {0, 2, -1}},
    {INFER_TYPE_IQ4_NL, {0, -1}},
    {INFER_TYPE_IQ4_XS, {0, -1}},
    /* the grid and ternary formats: every index, sign and scale pattern is valid */
    {INFER_TYPE_IQ2_XXS, {0, -1}},
    {INFER_TYPE_IQ2_XS, {0, -1}},
    {INFER_TYPE_IQ2_S, {0, -1}},
    {INFER_TYPE_IQ3_XXS, {0, -1}},
    {INFER_TYPE_IQ3_S, {0, -1}},
    {INFER_TYPE_IQ1_S, {0, -1}},
    {INFER_TYPE_TQ1_0, {52, -1}},
    {INFER_TYPE_TQ2_0, {64, -1}},
};

static const raw_layout *raw_layout_of(int t) {
    for (size_t i = 0; i < sizeof RAW_LAYOUTS / sizeof RAW_LAYOUTS[0]; i++)
        if (RAW_LAYOUTS[i].type == t) return &RAW_LAYOUTS[i];
    return NULL;
}

/* Fills n elements of type t.  `as_weight` prefers random bit patterns (all quant
 * values); activation formats come from the scalar quantizer, which also makes
 * their derived fields (Q8_1 s, Q8_K bsums) consistent.  Returns 0 if this type
 * cannot be generated (no scalar quantizer and no known layout). */
static int make_input(const infer_kernel_table *ref, int t, void *dst, int64_t n, int as_weight) {
    int bs = infer_type_block_size(t);
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) abort();
    random_floats(x, n, bs > 1 ? bs : 32);
    int ok = 1;
    const raw_layout *raw = raw_layout_of(t);
    if (t == INFER_TYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof *x);
    } else if (t == INFER_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) ((infer_half *)dst)[i] = infer_fp32_to_fp16(x[i]);
    } else if (t == INFER_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = infer_fp32_to_bf16(x[i]);
    } else if (t == INFER_TYPE_MXFP4 && as_weight) {
        /* every nibble (the quantizer never writes 8, -0), E8M0 exponents 2^-8..2^7 */
        uint8_t *p = dst;
        for (int64_t b = 0; b < n / bs; b++, p += sizeof(block_mxfp4)) {
            for (size_t i = 0; i < sizeof(block_mxfp4); i++) p[i] = (uint8_t)next_u64();
            p[0] = (uint8_t)(119 + next_u64() % 16);
        }
    } else if (raw && (as_weight || !ref->quantize[t])) {
        size_t bb = infer_type_block_bytes(t);
        uint8_t *p = dst;
        for (size_t i = 0; i < (size_t)(n / bs) * bb; i++) p[i] = (uint8_t)next_u64();
        for (int64_t b = 0; b < n / bs; b++)
            for (int k = 0; raw->half_offsets[k] >= 0; k++) {
                infer_half h = random_scale_half();
                memcpy(p + (size_t)b * bb + raw->half_offsets[k], &h, sizeof h);
            }
    } else if (ref->quantize[t]) {
        ref->quantize[t](x, dst, n);
    } else {
        ok = 0;
    }
    free(x);
    return ok;
}

/* ---- bookkeeping ------------------------------------------------------------- */
static size_t row_bytes(int t, int64_t n) {
    return (size_t)(n / infer_type_block_size(t)) * infer_type_block_bytes(t);
}

/* Alignment a row of type t is guaranteed: 4 for f32 and Q8_K (f32 d), none for
 * MXFP4 (17-byte blocks, no wider field), else 2. */
static size_t row_align(int t) {
    if (t == INFER_TYPE_MXFP4) return 1;
    return (t == INFER_TYPE_F32 || t == INFER_TYPE_Q8_K) ? ALIGN_F32 : ALIGN_BLOCK;
}

/* An output buffer with a guard zone after `bytes`; returns the (misaligned) start. */
static uint8_t *alloc_out(size_t bytes, uint8_t **base, size_t off) {
    *base = malloc(bytes + GUARD + off);
    if (!*base) abort();
    memset(*base, GUARD_BYTE, bytes + GUARD + off);
    return *base + off;
}
static int guard_intact(const uint8_t *out, size_t bytes) {
    for (size_t i = 0; i < GUARD; i++)
        if (out[bytes + i] != GUARD_BYTE) return 0;
    return 1;
}
/* A misaligned copy of an input. */
static uint8_t *misaligned_copy(const void *src, size_t bytes, uint8_t **base, size_t off) {
    *base = malloc(bytes + off + 1);
    if (!*base) abort();
    memcpy(*base + off, src, bytes);
    return *base + off;
}

static void report(int ok, const char *kernel, int t, int64_t n, const char *fmt, double got,
                   double want, double tol) {
    if (ok) {
        n_passed++;
        if (verbose)
            printf("ok   %-12s %-15s %-5s n=%-6lld\n", cur_isa, kernel,
                   t >= 0 ? infer_type_name(t) : "", (long long)n);
        return;
    }
    n_failed++;
    if (tol < 0) {  /* a finding without numbers */
        printf("FAIL %-12s %-15s %-5s n=%-6lld %s\n", cur_isa, kernel,
               t >= 0 ? infer_type_name(t) : "", (long long)n, fmt);
        return;
    }
    printf("FAIL %-12s %-15s %-5s n=%-6lld %s: got %.9g want %.9g (tolerance %.3g)\n", cur_isa,
           kernel, t >= 0 ? infer_type_name(t) : "", (long long)n, fmt, got, want, tol);
}

/* A SIMD entry with no scalar counterpart cannot be checked, and INFER_ISA=scalar
 * would lack it: a failure of the table, reported once per entry. */
static int has_reference(int present, const char *kernel, int t) {
    if (!present) report(0, kernel, t, 0, "SIMD entry has no scalar reference", 0, 0, -1);
    return present;
}

static float read_float(int t, const void *p, int64_t i) {
    if (t == INFER_TYPE_F16) return infer_fp16_to_fp32(((const infer_half *)p)[i]);
    return ((const float *)p)[i];
}

/* Per-element tolerance for dequantized values: `rel` of the largest magnitude in the
 * element's block (1 for f16/bf16/f32), so an FMA-vs-mul+add difference in the last
 * bit passes but a wrong nibble (an error of a whole scale step) does not. */
static int compare_blocks(const char *kernel, int t, int64_t n, int bs, int out_type,
                          const void *got, const void *want, double rel) {
    for (int64_t b = 0; b < n; b += bs) {
        double amax = 0.0;
        for (int i = 0; i < bs; i++) amax = fmax(amax, fabs(read_float(out_type, want, b + i)));
        for (int i = 0; i < bs; i++) {
            double g = read_float(out_type, got, b + i), w = read_float(out_type, want, b + i);
            double tol = rel * amax + 1e-30;
            if (!(fabs(g - w) <= tol) && !(isnan(g) && isnan(w))) {
                char where[64];
                snprintf(where, sizeof where, "element %lld", (long long)(b + i));
                report(0, kernel, t, n, where, g, w, tol);
                return 0;
            }
        }
    }
    return 1;
}

/* ---- quantized-format kernels ------------------------------------------------ */
/* The SIMD table replaces this entry (inherited scalar entries need no test). */
#define OVERRIDES(field) (simd->field && simd->field != ref->field)

static void check_dequantize(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    const int to_f32 = OVERRIDES(dequantize[t]) && has_reference(ref->dequantize[t] != NULL,
                                                                 "dequantize", t);
    const int to_f16 = OVERRIDES(dequantize_f16[t]) &&
                       has_reference(ref->dequantize_f16[t] != NULL, "dequantize_f16", t);
    if (!to_f32 && !to_f16) return;
    int bs = infer_type_block_size(t);
    for (int k = 0; k < N_BLOCK_COUNTS; k++) {
        int64_t n = (int64_t)BLOCK_COUNTS[k] * (bs > 1 ? bs : 32) + (bs > 1 ? 0 : k);
        size_t in_bytes = row_bytes(t, n);
        uint8_t *src = malloc(in_bytes + 1), *src_base, *got_base, *want_base;
        if (!src || !make_input(ref, t, src, n, 1)) { free(src); return; }
        uint8_t *in = misaligned_copy(src, in_bytes, &src_base, row_align(t));
        if (to_f32) {
            float *got = (float *)alloc_out((size_t)n * 4, &got_base, ALIGN_F32);
            float *want = (float *)alloc_out((size_t)n * 4, &want_base, ALIGN_F32);
            ref->dequantize[t](in, want, n);
            simd->dequantize[t](in, got, n);
            /* 2^-22 of the block's largest value: the last bit or two of an FMA. */
            if (compare_blocks("dequantize", t, n, bs, INFER_TYPE_F32, got, want, 0x1p-22)) {
                int guard = guard_intact((uint8_t *)got, (size_t)n * 4);
                report(guard, "dequantize", t, n, "guard zone overwritten", 0, 0, -1);
            }
            free(got_base); free(want_base);
        }
        if (to_f16) {
            infer_half *got = (infer_half *)alloc_out((size_t)n * 2, &got_base, ALIGN_BLOCK);
            infer_half *want = (infer_half *)alloc_out((size_t)n * 2, &want_base, ALIGN_BLOCK);
            ref->dequantize_f16[t](in, want, n);
            simd->dequantize_f16[t](in, got, n);
            /* One fp16 rounding step (2^-11 relative) either way. */
            if (compare_blocks("dequantize_f16", t, n, bs, INFER_TYPE_F16, got, want, 0x1p-10)) {
                int guard = guard_intact((uint8_t *)got, (size_t)n * 2);
                report(guard, "dequantize_f16", t, n, "guard zone overwritten", 0, 0, -1);
            }
            free(got_base); free(want_base);
        }
        free(src_base); free(src);
    }
}

/* Quantizers: a SIMD quantizer may round an element on a rounding boundary the
 * other way, or get a scale one fp16 step apart, so the outputs are compared as
 * values: every element within one quantization step of the scalar result, where a
 * step is the scalar block's largest |value| / `levels`.  Derived fields are checked
 * for consistency with the quants the SIMD quantizer itself wrote. */
static double quant_levels(int t) {
    switch (t) {
    case INFER_TYPE_Q4_0: return 8.0;
    case INFER_TYPE_Q4_1: return 7.5;     /* (max - min) / 15 <= 2 amax / 15 */
    case INFER_TYPE_Q5_0: return 16.0;
    case INFER_TYPE_Q8_0: case INFER_TYPE_Q8_1: case INFER_TYPE_Q8_K: return 127.0;
    case INFER_TYPE_F16: return 1024.0;
    case INFER_TYPE_BF16: return 128.0;
    default: return 0.0;    /* unknown: compare only if the bytes are identical */
    }
}

static void check_derived_fields(int t, int64_t n, const void *q) {
    if (t == INFER_TYPE_Q8_1) {
        const block_q8_1 *b = q;
        for (int64_t i = 0; i < n / QK8_1; i++) {
            int sum = 0;
            for (int j = 0; j < QK8_1; j++) sum += b[i].qs[j];
            double want = (double)infer_fp16_to_fp32(b[i].d) * sum;
            /* s comes from the unrounded d: allow d's fp16 rounding (absolute 2^-25
             * once d is subnormal) times |sum|, plus the rounding of s itself. */
            double got = infer_fp16_to_fp32(b[i].s);
            double tol = fabs(want) * 0x1p-10 + (abs(sum) + 1) * 0x1p-24;
            if (!(fabs(got - want) <= tol)) {
                report(0, "quantize", t, n, "s != d * sum(qs)", got, want, tol);
                return;
            }
        }
    } else if (t == INFER_TYPE_Q8_K) {
        const block_q8_K *b = q;
        for (int64_t i = 0; i < n / QK_K; i++)
            for (int g = 0; g < QK_K / 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) sum += b[i].qs[16 * g + j];
                if (sum != b[i].bsums[g]) {
                    report(0, "quantize", t, n, "bsums != sum of 16 qs", b[i].bsums[g], sum, 0);
                    return;
                }
            }
    }
    report(1, "quantize", t, n, "", 0, 0, 0);
}

static void check_quantize(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(quantize[t])) return;
    if (!has_reference(ref->quantize[t] != NULL, "quantize", t)) return;
    int bs = infer_type_block_size(t);
    for (int k = 0; k < N_BLOCK_COUNTS; k++) {
        int64_t n = (int64_t)BLOCK_COUNTS[k] * (bs > 1 ? bs : 32) + (bs > 1 ? 0 : k);
        size_t qbytes = row_bytes(t, n);
        float *x = malloc((size_t)n * sizeof *x);
        uint8_t *x_base, *got_base, *want_base;
        if (!x) abort();
        random_floats(x, n, bs > 1 ? bs : 32);
        const float *xin = (const float *)misaligned_copy(x, (size_t)n * 4, &x_base, ALIGN_F32);
        uint8_t *got = alloc_out(qbytes, &got_base, row_align(t)),
                *want = alloc_out(qbytes, &want_base, row_align(t));
        ref->quantize[t](xin, want, n);
        simd->quantize[t](xin, got, n);
        if (!guard_intact(got, qbytes)) {
            report(0, "quantize", t, n, "guard zone overwritten", 0, 0, -1);
        } else if (memcmp(got, want, qbytes) == 0) {
            check_derived_fields(t, n, got);
        } else if (quant_levels(t) == 0.0 || !ref->dequantize[t]) {
            report(0, "quantize", t, n, "bytes differ (no value tolerance known)", 0, 0, -1);
        } else {
            float *dg = malloc((size_t)n * 4), *dw = malloc((size_t)n * 4);
            if (!dg || !dw) abort();
            ref->dequantize[t](got, dg, n);
            ref->dequantize[t](want, dw, n);
            int ok = compare_blocks("quantize", t, n, bs, INFER_TYPE_F32, dg, dw,
                                    1.0 / quant_levels(t) * 1.001);
            if (ok) check_derived_fields(t, n, got);
            free(dg); free(dw);
        }
        free(x); free(x_base); free(got_base); free(want_base);
    }
}

/* Non-finite input is garbage in, but a quantizer must stay memory-safe and keep the
 * garbage inside the blocks that hold it: the middle block of [bad | good | bad] must
 * come out as the good block quantized alone.  (A NaN once sent the NEON Q8_K
 * quantizer searching past its super-block for a maximum FMAX had made NaN.) */
static void check_quantize_non_finite(const infer_kernel_table *simd, int t) {
    if (!simd->quantize[t]) return;
    /* not static: MSVC's INFINITY and NAN are no constant initializers */
    const float bad[2][3] = {{INFINITY, -INFINITY, NAN}, {3e38f, -3e38f, 1e-45f}};
    const int64_t bs = infer_type_block_size(t) > 1 ? infer_type_block_size(t) : 32;
    const size_t one = row_bytes(t, bs);
    float *x = malloc(3 * (size_t)bs * sizeof *x);
    uint8_t *alone_base, *q_base;
    uint8_t *q = alloc_out(3 * one, &q_base, row_align(t));
    uint8_t *alone = alloc_out(one, &alone_base, row_align(t));
    if (!x) abort();
    for (int p = 0; p < 2; p++) {
        for (int64_t i = 0; i < bs; i++) {
            x[i] = bad[p][i % 3];
            x[bs + i] = (float)(i % 17) - 8.25f;
            x[2 * bs + i] = bad[p][(i + 1) % 3];
        }
        simd->quantize[t](x, q, 3 * bs);
        simd->quantize[t](x + bs, alone, bs);
        int ok = guard_intact(q, 3 * one) && memcmp(q + one, alone, one) == 0;
        report(ok, "quantize", t, 3 * bs,
               p ? "huge neighbours changed a finite block" : "inf/nan neighbours changed a finite block",
               0, 0, -1);
    }
    free(x); free(q_base); free(alone_base);
}

/* sum |w_i a_i| of one weight row and one activation row (dequantized, in double):
 * the scale of a dot product's rounding.  fallback when there is no dequantizer. */
static double dot_magnitude(const infer_kernel_table *ref, int t, int at, const void *w,
                            const void *a, int64_t n, double fallback) {
    if (!ref->dequantize[t] || (at != INFER_TYPE_F32 && !ref->dequantize[at])) return fallback;
    float *dw = malloc((size_t)n * 4), *da = malloc((size_t)n * 4);
    if (!dw || !da) abort();
    ref->dequantize[t](w, dw, n);
    if (at == INFER_TYPE_F32) memcpy(da, a, (size_t)n * 4);
    else ref->dequantize[at](a, da, n);
    double mag = 0.0;
    for (int64_t i = 0; i < n; i++) mag += fabs((double)dw[i] * da[i]);
    free(dw); free(da);
    return mag;
}

/* Dot products: the integer part is exact in every implementation; what differs
 * is the order the per-block float terms are summed in.  Tolerance: 1e-5 of
 * sum |w_i * a_i| (dequantized, in double), far below one quant step of any block. */
static void check_vec_dot(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(vec_dot[t])) return;
    if (!has_reference(ref->vec_dot[t] != NULL, "vec_dot", t)) return;
    int at = infer_type_vec_dot_type(t);
    if (at < 0) return;
    int bs = infer_type_block_size(t);
    for (int k = 0; k < N_BLOCK_COUNTS; k++) {
        int64_t n = (int64_t)BLOCK_COUNTS[k] * (bs > 1 ? bs : 32) + (bs > 1 ? 0 : k);
        size_t wb = row_bytes(t, n), ab = row_bytes(at, n);
        uint8_t *w0 = malloc(wb + 1), *a0 = malloc(ab + 1), *w_base, *a_base;
        if (!w0 || !a0) abort();
        if (!make_input(ref, t, w0, n, 1) || !make_input(ref, at, a0, n, 0)) {
            report(0, "vec_dot", t, n, "cannot generate inputs (no scalar quantizer)", 0, 0, -1);
            free(w0); free(a0);
            return;
        }
        const uint8_t *w = misaligned_copy(w0, wb, &w_base, row_align(t)),
                      *a = misaligned_copy(a0, ab, &a_base, row_align(at));
        float want = ref->vec_dot[t](n, w, a), got = simd->vec_dot[t](n, w, a);
        /* With no dequantizer to size the terms: 8x the result. */
        double tol = 1e-5 * dot_magnitude(ref, t, at, w, a, n, fabs(want) * 8.0) + 1e-30;
        report(fabs((double)got - want) <= tol, "vec_dot", t, n, "dot", got, want, tol);
        free(w0); free(a0); free(w_base); free(a_base);
    }
}

/* vec_dot_4x4 (optional): four weight rows (row_bytes apart) against four activation
 * rows (a_stride apart), out[t * out_stride + k].  Reference: sixteen scalar vec_dots,
 * tolerance as vec_dot's.  Rows are one block further apart than packed and
 * out_stride is 5, so the fifth float of each output row must stay untouched. */
static void check_vec_dot_4x4(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(vec_dot_4x4[t])) return;
    int at = infer_type_vec_dot_type(t);
    if (at < 0 || !has_reference(ref->vec_dot[t] != NULL, "vec_dot_4x4", t)) return;
    int bs = infer_type_block_size(t);
    for (int c = 0; c < N_BLOCK_COUNTS; c++) {
        int64_t n = (int64_t)BLOCK_COUNTS[c] * (bs > 1 ? bs : 32) + (bs > 1 ? 0 : c);
        size_t stride = row_bytes(t, n) + infer_type_block_bytes(t) * (bs > 1 ? 1 : 4);
        size_t a_stride = row_bytes(at, n) + infer_type_block_bytes(at) * (infer_type_block_size(at) > 1 ? 1 : 4);
        uint8_t *w0 = malloc(4 * stride + 1), *a0 = malloc(4 * a_stride + 1), *w_base, *a_base;
        if (!w0 || !a0) abort();
        for (int k = 0; k < 4; k++) {
            if (!make_input(ref, t, w0 + k * stride, n, 1) || !make_input(ref, at, a0 + k * a_stride, n, 0)) {
                report(0, "vec_dot_4x4", t, n, "cannot generate inputs (no scalar quantizer)", 0, 0, -1);
                free(w0); free(a0);
                return;
            }
        }
        const uint8_t *w = misaligned_copy(w0, 4 * stride, &w_base, row_align(t));
        const uint8_t *a = misaligned_copy(a0, 4 * a_stride, &a_base, row_align(at));
        const float sentinel = -12345.0f;
        float got[4 * 5];
        for (int i = 0; i < 20; i++) got[i] = sentinel;
        simd->vec_dot_4x4[t](n, w, stride, a, a_stride, got, 5);
        int ok = 1;
        for (int tok = 0; tok < 4 && ok; tok++) {
            ok = got[tok * 5 + 4] == sentinel;
            if (!ok) report(0, "vec_dot_4x4", t, n, "wrote past 4 outputs of a token", 0, 0, -1);
            for (int k = 0; k < 4 && ok; k++) {
                const uint8_t *wr = w + k * stride, *ar = a + tok * a_stride;
                const float want = ref->vec_dot[t](n, wr, ar);
                const double tol = 1e-5 * dot_magnitude(ref, t, at, wr, ar, n, fabs(want) * 8.0) + 1e-30;
                if (!(fabs((double)got[tok * 5 + k] - want) <= tol)) {
                    char where[48];
                    snprintf(where, sizeof where, "row %d token %d", k, tok);
                    report(0, "vec_dot_4x4", t, n, where, got[tok * 5 + k], want, tol);
                    ok = 0;
                }
            }
        }
        if (ok) report(1, "vec_dot_4x4", t, n, "", 0, 0, 0);
        free(w0); free(a0); free(w_base); free(a_base);
    }
}

/* vec_dot_4xn (optional): four weight rows against n_tok = 1..INFER_DOT_4XN_MAX
 * activation rows.  Two references: the scalar vec_dot (tolerance as vec_dot's), and
 * the kernel itself with one token, which every result must equal bit for bit: that
 * is what lets a batched decode step give each sequence the logits it gets alone.  Layout as vec_dot_4x4's check (spaced rows, out_stride 5),
 * and outputs of tokens past n_tok must stay untouched. */
static void check_vec_dot_4xn(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(vec_dot_4xn[t])) return;
    int at = infer_type_vec_dot_type(t);
    if (at < 0 || !has_reference(ref->vec_dot[t] != NULL, "vec_dot_4xn", t)) return;
    const int max_tok = INFER_DOT_4XN_MAX;
    int bs = infer_type_block_size(t);
    for (int c = 0; c < N_BLOCK_COUNTS; c++) {
        int64_t n = (int64_t)BLOCK_COUNTS[c] * (bs > 1 ? bs : 32);
        size_t stride = row_bytes(t, n) + infer_type_block_bytes(t) * (bs > 1 ? 1 : 4);
        size_t a_stride = row_bytes(at, n) + infer_type_block_bytes(at) * (infer_type_block_size(at) > 1 ? 1 : 4);
        uint8_t *w0 = malloc(4 * stride + 1), *a0 = malloc((size_t)max_tok * a_stride + 1), *w_base, *a_base;
        if (!w0 || !a0) abort();
        for (int k = 0; k < 4; k++)
            if (!make_input(ref, t, w0 + k * stride, n, 1)) {
                report(0, "vec_dot_4xn", t, n, "cannot generate inputs (no scalar quantizer)", 0, 0, -1);
                free(w0); free(a0);
                return;
            }
        for (int k = 0; k < max_tok; k++)
            if (!make_input(ref, at, a0 + k * a_stride, n, 0)) {
                report(0, "vec_dot_4xn", t, n, "cannot generate inputs (no scalar quantizer)", 0, 0, -1);
                free(w0); free(a0);
                return;
            }
        const uint8_t *w = misaligned_copy(w0, 4 * stride, &w_base, row_align(t));
        const uint8_t *a = misaligned_copy(a0, (size_t)max_tok * a_stride, &a_base, row_align(at));
        int ok = 1;
        for (int n_tok = 1; n_tok <= max_tok && ok; n_tok++) {
            const float sentinel = -12345.0f;
            float got[INFER_DOT_4XN_MAX * 5];
            for (int i = 0; i < max_tok * 5; i++) got[i] = sentinel;
            simd->vec_dot_4xn[t](n, w, stride, a, a_stride, n_tok, got, 5);
            for (int tok = 0; tok < max_tok && ok; tok++) {
                float alone[4];
                const uint8_t *ar = a + tok * a_stride;
                if (tok >= n_tok) {
                    for (int k = 0; k < 5 && ok; k++) ok = got[tok * 5 + k] == sentinel;
                    if (!ok) report(0, "vec_dot_4xn", t, n, "wrote outputs of a token past n_tok", 0, 0, -1);
                    continue;
                }
                ok = got[tok * 5 + 4] == sentinel;
                if (!ok) report(0, "vec_dot_4xn", t, n, "wrote past 4 outputs of a token", 0, 0, -1);
                simd->vec_dot_4xn[t](n, w, stride, ar, a_stride, 1, alone, 1);
                for (int k = 0; k < 4 && ok; k++) {
                    const uint8_t *wr = w + k * stride;
                    const float want = ref->vec_dot[t](n, wr, ar), v = got[tok * 5 + k];
                    const double tol = 1e-5 * dot_magnitude(ref, t, at, wr, ar, n, fabs(want) * 8.0) + 1e-30;
                    char where[64];
                    if (!(fabs((double)v - want) <= tol)) {
                        snprintf(where, sizeof where, "row %d token %d of %d", k, tok, n_tok);
                        report(0, "vec_dot_4xn", t, n, where, v, want, tol);
                        ok = 0;
                    } else if (memcmp(&v, &alone[k], sizeof v) != 0) {
                        snprintf(where, sizeof where, "row %d token %d of %d: not the one-token bits", k, tok, n_tok);
                        report(0, "vec_dot_4xn", t, n, where, v, alone[k], 0);
                        ok = 0;
                    }
                }
            }
        }
        if (ok) report(1, "vec_dot_4xn", t, n, "", 0, 0, 0);
        free(w0); free(a0); free(w_base); free(a_base);
    }
}

/* vec_dot_rx8 (optional, with vec_dot_4xn): 8 weight rows against 8 activation rows.
 * References as vec_dot_4xn's: the scalar vec_dot within tolerance, and the same
 * table's vec_dot_4xn with one token (rows four at a time) bit for bit.  Output rows
 * are 9 floats apart; the ninth must stay untouched. */
static void check_vec_dot_rx8(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(vec_dot_rx8[t])) return;
    int at = infer_type_vec_dot_type(t);
    if (at < 0 || !has_reference(ref->vec_dot[t] != NULL, "vec_dot_rx8", t)) return;
    if (!simd->vec_dot_4xn[t]) {
        report(0, "vec_dot_rx8", t, 0, "set without vec_dot_4xn", 0, 0, -1);
        return;
    }
    int bs = infer_type_block_size(t);
    for (int c = 0; c < N_BLOCK_COUNTS; c++) {
        int64_t n = (int64_t)BLOCK_COUNTS[c] * (bs > 1 ? bs : 32);
        if (n > INFER_DOT_RX8_MAX_N) continue;
        size_t stride = row_bytes(t, n) + infer_type_block_bytes(t) * (bs > 1 ? 1 : 4);
        size_t a_stride = row_bytes(at, n) + infer_type_block_bytes(at) * (infer_type_block_size(at) > 1 ? 1 : 4);
        uint8_t *w0 = malloc(8 * stride + 1), *a0 = malloc(8 * a_stride + 1), *w_base, *a_base;
        if (!w0 || !a0) abort();
        for (int k = 0; k < 8; k++)
            if (!make_input(ref, t, w0 + k * stride, n, 1) || !make_input(ref, at, a0 + k * a_stride, n, 0)) {
                report(0, "vec_dot_rx8", t, n, "cannot generate inputs (no scalar quantizer)", 0, 0, -1);
                free(w0); free(a0);
                return;
            }
        const uint8_t *w = misaligned_copy(w0, 8 * stride, &w_base, row_align(t));
        const uint8_t *a = misaligned_copy(a0, 8 * a_stride, &a_base, row_align(at));
        const float sentinel = -12345.0f;
        float got[8 * 9];
        for (int i = 0; i < 8 * 9; i++) got[i] = sentinel;
        simd->vec_dot_rx8[t](n, w, stride, 8, a, a_stride, got, 9);
        int ok = 1;
        for (int tok = 0; tok < 8 && ok; tok++) {
            const uint8_t *ar = a + tok * a_stride;
            float alone[8];
            simd->vec_dot_4xn[t](n, w, stride, ar, a_stride, 1, alone, 1);
            simd->vec_dot_4xn[t](n, w + 4 * stride, stride, ar, a_stride, 1, alone + 4, 1);
            ok = got[tok * 9 + 8] == sentinel;
            if (!ok) report(0, "vec_dot_rx8", t, n, "wrote past 8 outputs of a token", 0, 0, -1);
            for (int k = 0; k < 8 && ok; k++) {
                const uint8_t *wr = w + k * stride;
                const float want = ref->vec_dot[t](n, wr, ar), v = got[tok * 9 + k];
                const double tol = 1e-5 * dot_magnitude(ref, t, at, wr, ar, n, fabs(want) * 8.0) + 1e-30;
                char where[64];
                if (!(fabs((double)v - want) <= tol)) {
                    snprintf(where, sizeof where, "row %d token %d", k, tok);
                    report(0, "vec_dot_rx8", t, n, where, v, want, tol);
                    ok = 0;
                } else if (memcmp(&v, &alone[k], sizeof v) != 0) {
                    snprintf(where, sizeof where, "row %d token %d: not vec_dot_4xn's bits", k, tok);
                    report(0, "vec_dot_rx8", t, n, where, v, alone[k], 0);
                    ok = 0;
                }
            }
        }
        /* fewer rows than a kernel's step (5: a pair past the last row) give the
         * same results and write no further */
        float few[8 * 9];
        for (int i = 0; i < 8 * 9; i++) few[i] = sentinel;
        if (ok) simd->vec_dot_rx8[t](n, w, stride, 5, a, a_stride, few, 9);
        for (int tok = 0; tok < 8 && ok; tok++)
            for (int k = 0; k < 9 && ok; k++)
                if (k < 5 ? memcmp(&few[tok * 9 + k], &got[tok * 9 + k], sizeof(float)) != 0
                          : few[tok * 9 + k] != sentinel) {
                    report(0, "vec_dot_rx8", t, n, k < 5 ? "5 rows: not the bits of 8" : "5 rows: wrote past row 5",
                           few[tok * 9 + k], got[tok * 9 + k], 0);
                    ok = 0;
                }
        if (ok) report(1, "vec_dot_rx8", t, n, "", 0, 0, 0);
        free(w0); free(a0); free(w_base); free(a_base);
    }
}

/* ---- float ops ------------------------------------------------------------------ */
static int compare_floats(const char *kernel, int64_t n, const float *got, const float *want,
                          double rtol, double atol) {
    for (int64_t i = 0; i < n; i++) {
        double tol = rtol * fabs(want[i]) + atol;
        if (!(fabs((double)got[i] - want[i]) <= tol)) {
            char where[64];
            snprintf(where, sizeof where, "element %lld", (long long)i);
            report(0, kernel, -1, n, where, got[i], want[i], tol);
            return 0;
        }
    }
    return 1;
}

static void check_ops(const infer_kernel_table *ref, const infer_kernel_table *simd) {
#define OP_TESTED(op) (OVERRIDES(op) && has_reference(ref->op != NULL, #op, -1))
    const int rmsnorm = OP_TESTED(rmsnorm), layernorm = OP_TESTED(layernorm);
    const int softmax = OP_TESTED(softmax), silu_mul = OP_TESTED(silu_mul);
    const int gelu_mul = OP_TESTED(gelu_mul), add = OP_TESTED(add), scale = OP_TESTED(scale);
#undef OP_TESTED
    if (!rmsnorm && !layernorm && !softmax && !silu_mul && !gelu_mul && !add && !scale) return;
    for (int k = 0; k < N_OP_LENGTHS; k++) {
        int64_t n = OP_LENGTHS[k];
        size_t bytes = (size_t)n * 4;
        float *x0 = malloc(bytes), *y0 = malloc(bytes), *w0 = malloc(bytes), *b0 = malloc(bytes);
        uint8_t *xb, *yb, *wb, *bb, *gb, *rb;
        if (!x0 || !y0 || !w0 || !b0) abort();
        for (int64_t i = 0; i < n; i++) {
            x0[i] = 3.0f * gaussian();
            y0[i] = gaussian();
            w0[i] = 1.0f + 0.5f * gaussian();
            b0[i] = 0.1f * gaussian();
        }
        const float *x = (const float *)misaligned_copy(x0, bytes, &xb, ALIGN_F32);
        const float *y = (const float *)misaligned_copy(y0, bytes, &yb, ALIGN_F32);
        const float *w = (const float *)misaligned_copy(w0, bytes, &wb, ALIGN_F32);
        const float *bias = (const float *)misaligned_copy(b0, bytes, &bb, ALIGN_F32);
        float *got = (float *)alloc_out(bytes, &gb, ALIGN_F32),
              *want = (float *)alloc_out(bytes, &rb, ALIGN_F32);
#define GUARDED(name, ok_expr)                                                        \
    do {                                                                          \
        if (ok_expr) report(guard_intact((uint8_t *)got, bytes), name, -1, n,     \
                            "guard zone overwritten", 0, 0, -1);                     \
    } while (0)
        /* Norms: one reduction then a scale; 1e-5 relative covers summation order. */
        if (rmsnorm) {
            ref->rmsnorm(x, w, want, n, 1e-5f);
            simd->rmsnorm(x, w, got, n, 1e-5f);
            GUARDED("rmsnorm", compare_floats("rmsnorm", n, got, want, 1e-5, 1e-6));
        }
        if (layernorm) {
            ref->layernorm(x, w, bias, want, n, 1e-5f);
            simd->layernorm(x, w, bias, got, n, 1e-5f);
            GUARDED("layernorm", compare_floats("layernorm", n, got, want, 1e-5, 1e-5));
            /* weight and bias are optional (NULL: no affine step) */
            ref->layernorm(x, NULL, NULL, want, n, 1e-5f);
            simd->layernorm(x, NULL, NULL, got, n, 1e-5f);
            GUARDED("layernorm(NULL)", compare_floats("layernorm(NULL)", n, got, want, 1e-5, 1e-5));
        }
        /* Softmax and the gated activations call exp: a vectorised exp is allowed
         * 1e-5 relative error (ggml's SIMD expf is ~1.5 ulp). */
        if (softmax) {
            memcpy(want, x, bytes);
            memcpy(got, x, bytes);
            ref->softmax(want, n);
            simd->softmax(got, n);
            GUARDED("softmax", compare_floats("softmax", n, got, want, 1e-5, 1e-8));
            /* a masked (-inf) score contributes exactly 0 */
            if (n > 2) {
                memcpy(want, x, bytes);
                want[n / 2] = -INFINITY;
                memcpy(got, want, bytes);
                ref->softmax(want, n);
                simd->softmax(got, n);
                GUARDED("softmax(-inf)", compare_floats("softmax(-inf)", n, got, want, 1e-5, 1e-8));
            }
        }
        if (silu_mul) {
            ref->silu_mul(x, y, want, n);
            simd->silu_mul(x, y, got, n);
            GUARDED("silu_mul", compare_floats("silu_mul", n, got, want, 1e-5, 1e-7));
        }
        if (gelu_mul) {
            ref->gelu_mul(x, y, want, n);
            simd->gelu_mul(x, y, got, n);
            GUARDED("gelu_mul", compare_floats("gelu_mul", n, got, want, 1e-5, 1e-7));
        }
        /* One rounding per element: the same bits. */
        if (add) {
            memcpy(want, x, bytes);
            memcpy(got, x, bytes);
            ref->add(want, y, n);
            simd->add(got, y, n);
            GUARDED("add", compare_floats("add", n, got, want, 0.0, 0.0));
        }
        if (scale) {
            memcpy(want, x, bytes);
            memcpy(got, x, bytes);
            ref->scale(want, 0.37f, n);
            simd->scale(got, 0.37f, n);
            GUARDED("scale", compare_floats("scale", n, got, want, 0.0, 0.0));
        }
#undef GUARDED
        free(x0); free(y0); free(w0); free(b0);
        free(xb); free(yb); free(wb); free(bb); free(gb); free(rb);
    }
}

/* RoPE: one head rotated in place, with the tables of one position.  Two products
 * and a sum per element: 2^-22 of the pair's magnitude covers an FMA.  Elements
 * from rot_dim on must be left alone (compared exactly, they are the input). */
static void check_rope(const infer_kernel_table *ref, const infer_kernel_table *simd) {
    static const int ROT_DIMS[] = {2, 4, 6, 8, 14, 16, 18, 30, 32, 34, 62, 64, 96, 128, 256};
    const int norm = OVERRIDES(rope_norm) && has_reference(ref->rope_norm != NULL, "rope_norm", -1);
    const int neox = OVERRIDES(rope_neox) && has_reference(ref->rope_neox != NULL, "rope_neox", -1);
    for (int variant = 0; variant < 2; variant++) {
        if (!(variant ? neox : norm)) continue;
        const char *name = variant ? "rope_neox" : "rope_norm";
        infer_rope_fn r = variant ? ref->rope_neox : ref->rope_norm;
        infer_rope_fn v = variant ? simd->rope_neox : simd->rope_norm;
        for (size_t k = 0; k < sizeof ROT_DIMS / sizeof ROT_DIMS[0]; k++) {
            const int64_t rot = ROT_DIMS[k], head = rot + 5, n_tab = variant ? rot / 2 : rot;
            float *x = malloc((size_t)head * 4), *want = malloc((size_t)(head + 1) * 4);
            float *cs = malloc((size_t)n_tab * 4), *sn = malloc((size_t)n_tab * 4);
            uint8_t *gb;
            float *got = (float *)alloc_out((size_t)head * 4, &gb, ALIGN_F32);
            if (!x || !want || !cs || !sn) abort();
            for (int64_t i = 0; i < head; i++) x[i] = 2.0f * gaussian();
            const double pos = (double)(next_u64() % 4096);
            for (int64_t i = 0; i < n_tab; i++) {
                const int64_t pair = variant ? i : i / 2;
                const double theta = pos * pow(10000.0, -2.0 * (double)pair / (double)rot);
                cs[i] = (float)cos(theta);
                sn[i] = (float)sin(theta);
            }
            memcpy(want, x, (size_t)head * 4);
            memcpy(got, x, (size_t)head * 4);
            r(want, cs, sn, rot);
            v(got, cs, sn, rot);
            double amax = 0.0;
            for (int64_t i = 0; i < rot; i++) amax = fmax(amax, fabs(x[i]));
            int ok = compare_floats(name, rot, got, want, 0.0, 0x1p-22 * 2.0 * amax) &&
                     compare_floats(name, head - rot, got + rot, x + rot, 0.0, 0.0);
            if (ok) report(guard_intact((uint8_t *)got, (size_t)head * 4), name, -1, rot,
                           "guard zone overwritten", 0, 0, -1);
            free(x); free(want); free(cs); free(sn); free(gb);
        }
    }
}

/* Attention, one query row over n_pos cache rows (F32 or F16 bits): tolerances as
 * for the batched entry below; also run with out == q, which the contract allows. */
static void check_attention(const infer_kernel_table *ref, const infer_kernel_table *simd) {
    static const int HEAD_DIMS[] = {1, 4, 8, 15, 16, 17, 32, 48, 64, 80, 96, 128, 256};
    static const int N_POS[] = {1, 2, 3, 7, 16, 17, 63, 64, 65, 130};
    const int f32 = OVERRIDES(attn_f32) && has_reference(ref->attn_f32 != NULL, "attn_f32", -1);
    const int f16 = OVERRIDES(attn_f16) && has_reference(ref->attn_f16 != NULL, "attn_f16", -1);
    for (int half = 0; half < 2; half++) {
        if (!(half ? f16 : f32)) continue;
        const char *name = half ? "attn_f16" : "attn_f32";
        infer_attn_fn r = half ? ref->attn_f16 : ref->attn_f32;
        infer_attn_fn a = half ? simd->attn_f16 : simd->attn_f32;
        const size_t el = half ? 2 : 4;
        for (size_t i = 0; i < sizeof HEAD_DIMS / sizeof HEAD_DIMS[0]; i++)
            for (size_t j = 0; j < sizeof N_POS / sizeof N_POS[0]; j++) {
                const int64_t d = HEAD_DIMS[i], np = N_POS[j];
                float *q = malloc((size_t)d * 4), *vf = malloc((size_t)(np * d) * 4);
                float *want = malloc((size_t)d * 4);
                uint8_t *k = malloc((size_t)(np * d) * el + 1), *v = malloc((size_t)(np * d) * el + 1);
                uint8_t *gb, *qb;
                if (!q || !vf || !want || !k || !v) abort();
                for (int64_t e = 0; e < d; e++) q[e] = gaussian();
                double vmax = 0.0;
                for (int64_t e = 0; e < np * d; e++) {
                    const float kv = gaussian();
                    vf[e] = gaussian();
                    vmax = fmax(vmax, fabs(vf[e]));
                    if (half) {
                        ((infer_half *)k)[e] = infer_fp32_to_fp16(kv);
                        ((infer_half *)v)[e] = infer_fp32_to_fp16(vf[e]);
                    } else {
                        ((float *)k)[e] = kv;
                        ((float *)v)[e] = vf[e];
                    }
                }
                const float sc = 2.0f / (float)sqrt((double)d);
                float *got = (float *)alloc_out((size_t)d * 4, &gb, ALIGN_F32);
                r(q, k, v, np, d, sc, want);
                a(q, k, v, np, d, sc, got);
                if (compare_floats(name, d, got, want, 0.0, 1e-5 * vmax)) {
                    float *qq = (float *)misaligned_copy(q, (size_t)d * 4, &qb, ALIGN_F32);
                    a(qq, k, v, np, d, sc, qq);     /* out aliases q */
                    if (compare_floats(name, d, qq, want, 0.0, 1e-5 * vmax))
                        report(guard_intact((uint8_t *)got, (size_t)d * 4), name, -1, d * 1000 + np,
                               "guard zone overwritten", 0, 0, -1);
                    free(qb);
                }
                free(q); free(vf); free(want); free(k); free(v); free(gb);
            }
    }
}

/* Attention, batched: n_q query rows, each over its own position range [lo, hi] of one KV
 * head's cache rows (F32 or F16 bits).  The SIMD version may use a vectorised exp
 * and another summation order: outputs within 1e-5 of the largest |v| (each is a
 * convex combination of v rows); ml's max within 1e-5 of the largest |score| and
 * its exp-sum within 1e-5 relative.  Also run with out[u] == q[u], which the
 * contract allows. */
static void check_attention_block(const infer_kernel_table *ref, const infer_kernel_table *simd) {
    static const int HEAD_DIMS[] = {1, 4, 8, 15, 16, 17, 32, 48, 64, 80, 96, 128, 256};
    static const int N_POS[] = {1, 2, 3, 7, 16, 17, 63, 64, 65, 130};
    static const int N_Q[] = {1, 3, 16};
    const int f32 = OVERRIDES(attn_block_f32) &&
                    has_reference(ref->attn_block_f32 != NULL, "attn_block_f32", -1);
    const int f16 = OVERRIDES(attn_block_f16) &&
                    has_reference(ref->attn_block_f16 != NULL, "attn_block_f16", -1);
    for (int half = 0; half < 2; half++) {
        if (!(half ? f16 : f32)) continue;
        const char *name = half ? "attn_block_f16" : "attn_block_f32";
        infer_attn_block_fn r = half ? ref->attn_block_f16 : ref->attn_block_f32;
        infer_attn_block_fn a = half ? simd->attn_block_f16 : simd->attn_block_f32;
        const size_t el = half ? 2 : 4;
        for (size_t i = 0; i < sizeof HEAD_DIMS / sizeof HEAD_DIMS[0]; i++)
            for (size_t j = 0; j < sizeof N_POS / sizeof N_POS[0]; j++) {
                const int64_t d = HEAD_DIMS[i], np = N_POS[j];
                const int64_t nq0 = N_Q[(i + j) % 3];
                const int64_t nq = nq0 * d > INFER_ATTN_MAX_QD ? INFER_ATTN_MAX_QD / d : nq0;
                const size_t qbytes = (size_t)(nq * d) * 4;
                float *q = malloc(qbytes), *kf = malloc((size_t)(np * d) * 4);
                float *vf = malloc((size_t)(np * d) * 4), *want = malloc(qbytes);
                uint8_t *k = malloc((size_t)(np * d) * el + 1), *v = malloc((size_t)(np * d) * el + 1);
                int64_t lo[INFER_ATTN_MAX_Q], hi[INFER_ATTN_MAX_Q];
                float ml_want[2 * INFER_ATTN_MAX_Q], ml_got[2 * INFER_ATTN_MAX_Q];
                const float *qp[INFER_ATTN_MAX_Q];
                float *wp[INFER_ATTN_MAX_Q], *gp[INFER_ATTN_MAX_Q], *ap[INFER_ATTN_MAX_Q];
                uint8_t *gb, *qb;
                if (!q || !kf || !vf || !want || !k || !v) abort();
                for (int64_t e = 0; e < nq * d; e++) q[e] = gaussian();
                for (int64_t e = 0; e < np * d; e++) {
                    kf[e] = gaussian();
                    vf[e] = gaussian();
                }
                if (half) {
                    for (int64_t e = 0; e < np * d; e++) {
                        ((infer_half *)k)[e] = infer_fp32_to_fp16(kf[e]);
                        ((infer_half *)v)[e] = infer_fp32_to_fp16(vf[e]);
                    }
                } else {
                    memcpy(k, kf, (size_t)(np * d) * 4);
                    memcpy(v, vf, (size_t)(np * d) * 4);
                }
                double vmax = 0.0;
                for (int64_t e = 0; e < np * d; e++) vmax = fmax(vmax, fabs(vf[e]));
                /* Causal-looking ranges: query u ends at a later position than u-1. */
                for (int64_t u = 0; u < nq; u++) {
                    hi[u] = np - 1 - (nq - 1 - u) * (np - 1) / (nq > 1 ? 2 * (nq - 1) : 1);
                    lo[u] = (int64_t)(next_u64() % 3 == 0 ? next_u64() % (uint64_t)(hi[u] + 1) : 0);
                }
                /* Scores of a few units: softmax neither flat nor one-hot; every
                 * other case capped below the largest scores (Gemma 2's softcap). */
                const float sc = 2.0f / (float)sqrt((double)d);
                const float cap = (i + j) % 2 ? 1.5f : 0.0f;
                float *got = (float *)alloc_out(qbytes, &gb, ALIGN_F32);
                for (int64_t u = 0; u < nq; u++) {
                    qp[u] = q + u * d;
                    wp[u] = want + u * d;
                    gp[u] = got + u * d;
                }
                r(nq, qp, wp, lo, hi, k, v, d, sc, cap, ml_want);
                a(nq, qp, gp, lo, hi, k, v, d, sc, cap, ml_got);
                double smax = 0.0;
                for (int64_t u = 0; u < nq; u++) smax = fmax(smax, fabs(ml_want[2 * u]));
                int ok = compare_floats(name, nq * d, got, want, 0.0, 1e-5 * vmax);
                for (int64_t u = 0; ok && u < nq; u++) {
                    ok = compare_floats(name, 1, &ml_got[2 * u], &ml_want[2 * u], 0.0, 1e-5 * smax + 1e-6) &&
                         compare_floats(name, 1, &ml_got[2 * u + 1], &ml_want[2 * u + 1], 1e-5, 0.0);
                }
                /* Each query alone gives its bits in the batch: its result may not
                 * depend on the other queries' ranges (a prefill continuing a held
                 * prefix must equal the same rows of one prefill). */
                for (int64_t u = 0; ok && u < nq; u++) {
                    float alone[INFER_ATTN_MAX_HEAD_DIM];
                    float *ao = alone;
                    a(1, &qp[u], &ao, &lo[u], &hi[u], k, v, d, sc, cap, NULL);
                    ok = compare_floats(name, d, alone, gp[u], 0.0, 0.0);
                }
                if (ok) {
                    float *qq = (float *)misaligned_copy(q, qbytes, &qb, ALIGN_F32);
                    for (int64_t u = 0; u < nq; u++) {
                        qp[u] = qq + u * d;
                        ap[u] = qq + u * d;
                    }
                    a(nq, qp, ap, lo, hi, k, v, d, sc, cap, NULL);     /* out aliases q, no ml */
                    if (compare_floats(name, nq * d, qq, want, 0.0, 1e-5 * vmax))
                        report(guard_intact((uint8_t *)got, qbytes), name, -1, d * 1000 + np,
                               "guard zone overwritten", 0, 0, -1);
                    free(qb);
                }
                free(q); free(kf); free(vf); free(want); free(k); free(v); free(gb);
            }
    }
}

/* vec_dot_4 (optional): four weight rows row_bytes apart against one activation row.
 * Its reference is the scalar vec_dot_4 if there is one, else four scalar vec_dots;
 * the tolerance is vec_dot's (1e-5 of sum |w_i a_i|).  Rows are spaced one block
 * further apart than packed, so a kernel that ignores row_bytes fails. */
static void check_vec_dot_4(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(vec_dot_4[t])) return;
    int at = infer_type_vec_dot_type(t);
    if (at < 0 || !has_reference(ref->vec_dot[t] != NULL, "vec_dot_4", t)) return;
    int bs = infer_type_block_size(t);
    for (int k = 0; k < N_BLOCK_COUNTS; k++) {
        int64_t n = (int64_t)BLOCK_COUNTS[k] * (bs > 1 ? bs : 32) + (bs > 1 ? 0 : k);
        size_t packed = row_bytes(t, n), stride = packed + infer_type_block_bytes(t) * (bs > 1 ? 1 : 4);
        size_t ab = row_bytes(at, n);
        uint8_t *w0 = malloc(4 * stride + 1), *a0 = malloc(ab + 1), *w_base, *a_base;
        if (!w0 || !a0) abort();
        for (int r = 0; r < 4; r++)
            if (!make_input(ref, t, w0 + r * stride, n, 1)) abort();
        if (!make_input(ref, at, a0, n, 0)) {
            report(0, "vec_dot_4", t, n, "cannot generate inputs (no scalar quantizer)", 0, 0, -1);
            free(w0); free(a0);
            return;
        }
        const uint8_t *w = misaligned_copy(w0, 4 * stride, &w_base, row_align(t));
        const uint8_t *a = misaligned_copy(a0, ab, &a_base, row_align(at));
        float want[4], got[4];
        if (ref->vec_dot_4[t]) ref->vec_dot_4[t](n, w, stride, a, want);
        else
            for (int r = 0; r < 4; r++) want[r] = ref->vec_dot[t](n, w + r * stride, a);
        simd->vec_dot_4[t](n, w, stride, a, got);
        int ok = 1;
        for (int r = 0; r < 4 && ok; r++) {
            double tol = 1e-5 * dot_magnitude(ref, t, at, w + r * stride, a, n, fabs(want[r]) * 8.0) + 1e-30;
            if (!(fabs((double)got[r] - want[r]) <= tol)) {
                char where[32];
                snprintf(where, sizeof where, "row %d", r);
                report(0, "vec_dot_4", t, n, where, got[r], want[r], tol);
                ok = 0;
            }
        }
        if (ok) report(1, "vec_dot_4", t, n, "", 0, 0, 0);
        free(w0); free(a0); free(w_base); free(a_base);
    }
}

/* ---- the thread pool ------------------------------------------------------------ */
/* Each run sums a slice of x per share, then waits at a barrier for every share to
 * have started.  A thread runs one share at a time, so passing the barrier proves nth
 * threads ran at once (a pool that ran the shares one after another would time
 * out); the sums, compared exactly with the same slices summed serially, prove every
 * share ran once on its own slice with the nth it was given. */
#define POOL_MAX_SHARES 8
#define POOL_RUNS 200
#ifndef POOL_BARRIER_SECONDS   /* -DPOOL_BARRIER_SECONDS=0 (under 1 s) where failure is expected */
#define POOL_BARRIER_SECONDS 20
#endif

typedef struct {
    const float *x;
    int64_t n;
    int want_nth;
    double partial[POOL_MAX_SHARES];
    infer_atomic_i64 ran[POOL_MAX_SHARES];
    infer_atomic_i64 arrived;
    infer_atomic_i64 wrong_nth;
    infer_atomic_i64 timed_out;
} pool_task;

static void pool_share(void *arg, int ith, int nth) {
    pool_task *task = arg;
    if (nth != task->want_nth || ith < 0 || ith >= nth || nth > POOL_MAX_SHARES) {
        infer_atomic_add(&task->wrong_nth, 1);
        return;
    }
    infer_atomic_add(&task->ran[ith], 1);
    double sum = 0.0;
    for (int64_t i = task->n * ith / nth; i < task->n * (ith + 1) / nth; i++) sum += task->x[i];
    task->partial[ith] = sum;
    infer_atomic_add(&task->arrived, 1);
    const time_t deadline = time(NULL) + POOL_BARRIER_SECONDS;
    /* Once one share has timed out the run has failed: the others need not wait. */
    for (int spins = 1; infer_atomic_load(&task->arrived) < nth && !infer_atomic_load(&task->timed_out);
         spins++) {
        if (spins % 1024 == 0) {
            infer_yield_thread();   /* more threads than cores: let the others in */
            if (time(NULL) > deadline) {
                infer_atomic_store(&task->timed_out, 1);
                return;
            }
        }
        infer_cpu_relax();
    }
}

/* Long enough for the workers to stop spinning and sleep (the pool spins 200 us),
 * so the next run must wake them through the condition variable. */
static void let_workers_sleep(void) {
#ifdef _WIN32
    Sleep(2);
#else
    const struct timespec two_ms = {0, 2000000};
    nanosleep(&two_ms, NULL);
#endif
}

static void check_thread_pool(void) {
    static const int counts[] = {2, 3, 4, 2};   /* grow, then shrink: threads stop and start */
    const int64_t n = 10007;
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) abort();
    random_floats(x, n, 32);
    cur_isa = "pool";
    printf("thread pool: default %d threads\n", infer_default_num_threads());
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const int nth = counts[c];
        infer_set_num_threads(nth);
        int ok = infer_get_num_threads() == nth;
        if (!ok) report(0, "thread_pool", -1, nth, "infer_get_num_threads differs", 0, 0, -1);
        for (int r = 0; ok && r < POOL_RUNS; r++) {
            pool_task task;
            memset(&task, 0, sizeof task);
            task.x = x;
            task.n = n;
            task.want_nth = nth;
            if (r % 20 == 19) let_workers_sleep();
            infer_parallel_run(pool_share, &task);
            if (infer_atomic_load(&task.wrong_nth)) {
                report(0, "thread_pool", -1, nth, "a share got the wrong (ith, nth)", 0, 0, -1);
                ok = 0;
            } else if (infer_atomic_load(&task.timed_out)) {
                report(0, "thread_pool", -1, nth, "shares did not run at the same time", 0, 0, -1);
                ok = 0;
            }
            for (int i = 0; ok && i < nth; i++) {
                double want = 0.0;
                for (int64_t j = n * i / nth; j < n * (i + 1) / nth; j++) want += x[j];
                const int64_t times = infer_atomic_load(&task.ran[i]);
                if (times != 1) {
                    report(0, "thread_pool", -1, nth, "a share ran other than once", (double)times, 1, 0);
                    ok = 0;
                } else if (task.partial[i] != want) {
                    report(0, "thread_pool", -1, nth, "a share summed the wrong slice",
                           task.partial[i], want, 0);
                    ok = 0;
                }
            }
        }
        if (ok) {
            report(1, "thread_pool", -1, nth, "", 0, 0, 0);
            printf("thread pool: %d threads, %d runs, each past a barrier of all %d\n", nth,
                   POOL_RUNS, nth);
        }
    }
    infer_set_num_threads(1);
    free(x);
}

/* matmul_r16 (the *_R16 formats, repack.h): 32 rows of the file format, repacked,
 * against 1..9 tokens (a tile of 8 and one more).  References: the scalar kernel
 * bit for bit (same operations in the same order), the file format's scalar
 * vec_dot within tolerance, and each token's results alone bit for bit.  Output
 * rows are 33 floats apart; the 33rd must stay untouched. */
static void check_matmul_r16(const infer_kernel_table *ref, const infer_kernel_table *simd, int t) {
    if (!OVERRIDES(matmul_r16[t])) return;
    if (!has_reference(ref->matmul_r16[t] != NULL, "matmul_r16", t)) return;
    int ft = -1;   /* the file type repacked into t */
    for (int f = 0; f < INFER_TYPE_COUNT; f++)
        if (infer_type_name(f) && infer_repack_type(f) == t) ft = f;
    const int at = infer_type_vec_dot_type(t), fat = infer_type_vec_dot_type(ft);
    enum { R16_ROWS_T = 32, R16_TOK = 9, R16_OUT = 33 };   /* (OUT is a macro in windows.h) */
    for (int c = 0; c < N_BLOCK_COUNTS; c++) {
        const int64_t n = (int64_t)BLOCK_COUNTS[c] * infer_type_block_size(t);
        const size_t rb = row_bytes(ft, n), ab = row_bytes(at, n), fab = row_bytes(fat, n);
        uint8_t *w = malloc(R16_ROWS_T * rb), *wr = malloc(R16_ROWS_T * row_bytes(t, n)), *a = malloc(R16_TOK * ab),
                *fa = malloc(R16_TOK * fab);
        if (!w || !wr || !a || !fa) abort();
        int ok = 1;
        for (int r = 0; r < R16_ROWS_T && ok; r++) ok = make_input(ref, ft, w + r * rb, n, 1);
        for (int k = 0; k < R16_TOK && ok; k++) ok = make_input(ref, at, a + k * ab, n, 0);
        if (!ok || infer_repack_r16(ft, w, rb, R16_ROWS_T, n, wr) != 0) {
            report(0, "matmul_r16", t, n, "cannot generate inputs", 0, 0, -1);
            free(w); free(wr); free(a); free(fa);
            return;
        }
        /* the same activations in the file format's pairing (Q8_0S -> Q8_0: d and qs) */
        if (fat == at) memcpy(fa, a, R16_TOK * ab);
        else
            for (int k = 0; k < R16_TOK; k++)
                for (int64_t b = 0; b < n / 32; b++) {
                    const uint8_t *src = a + k * ab + b * 36;
                    uint8_t *dst = fa + k * fab + b * infer_type_block_bytes(fat);
                    memcpy(dst, src, 2), memcpy(dst + 2, src + 4, 32);
                }
        const float sentinel = -12345.0f;
        float got[R16_TOK * R16_OUT], want[R16_TOK * R16_OUT], alone[R16_OUT];
        for (int i = 0; i < R16_TOK * R16_OUT; i++) got[i] = want[i] = sentinel;
        simd->matmul_r16[t](n, wr, R16_ROWS_T / 16, a, ab, R16_TOK, got, R16_OUT);
        ref->matmul_r16[t](n, wr, R16_ROWS_T / 16, a, ab, R16_TOK, want, R16_OUT);
        for (int k = 0; k < R16_TOK && ok; k++) {
            simd->matmul_r16[t](n, wr, R16_ROWS_T / 16, a + k * ab, ab, 1, alone, R16_OUT);
            if (got[k * R16_OUT + R16_ROWS_T] != sentinel) {
                report(0, "matmul_r16", t, n, "wrote past the rows", 0, 0, -1);
                ok = 0;
            }
            for (int r = 0; r < R16_ROWS_T && ok; r++) {
                const float v = got[k * R16_OUT + r];
                const float dot = ref->vec_dot[ft](n, w + r * rb, fa + k * fab);
                const double tol = 1e-5 * dot_magnitude(ref, ft, fat, w + r * rb, fa + k * fab, n, fabs(dot) * 8.0) + 1e-30;
                char where[64];
                snprintf(where, sizeof where, "row %d token %d", r, k);
                if (memcmp(&v, &want[k * R16_OUT + r], sizeof v) != 0) {
                    report(0, "matmul_r16", t, n, where, v, want[k * R16_OUT + r], 0);
                    ok = 0;
                } else if (!(fabs((double)v - dot) <= tol)) {
                    report(0, "matmul_r16", t, n, where, v, dot, tol);
                    ok = 0;
                } else if (memcmp(&v, &alone[r], sizeof v) != 0) {
                    strncat(where, ": not the one-token bits", sizeof where - strlen(where) - 1);
                    report(0, "matmul_r16", t, n, where, v, alone[r], 0);
                    ok = 0;
                }
            }
        }
        if (ok) report(1, "matmul_r16", t, n, "", 0, 0, 0);
        free(w); free(wr); free(a); free(fa);
    }
}

/* ---- driver ------------------------------------------------------------------- */
static int count_overrides(const infer_kernel_table *ref, const infer_kernel_table *simd) {
    int c = 0;
    for (int t = 0; t < INFER_TYPE_COUNT; t++)
        c += OVERRIDES(dequantize[t]) + OVERRIDES(dequantize_f16[t]) + OVERRIDES(quantize[t]) +
             OVERRIDES(vec_dot[t]);
    c += OVERRIDES(rmsnorm) + OVERRIDES(layernorm) + OVERRIDES(softmax) + OVERRIDES(silu_mul) +
         OVERRIDES(gelu_mul) + OVERRIDES(add) + OVERRIDES(scale) + OVERRIDES(rope_norm) +
         OVERRIDES(rope_neox) + OVERRIDES(attn_f32) + OVERRIDES(attn_f16) +
         OVERRIDES(attn_block_f32) + OVERRIDES(attn_block_f16);
    for (int t = 0; t < INFER_TYPE_COUNT; t++)
        c += OVERRIDES(vec_dot_4[t]) + OVERRIDES(vec_dot_4x4[t]) + OVERRIDES(matmul_r16[t]);
    return c;
}

int main(int argc, char **argv) {
    /* Keep the lines printed before a crash.  (The Windows C runtime has no line
     * buffering: _IOLBF means full buffering there, and a size of 0 is refused.) */
#ifdef _WIN32
    setvbuf(stdout, NULL, _IONBF, 0);
#else
    setvbuf(stdout, NULL, _IOLBF, 0);
#endif
    int pool_only = 0;   /* "pool": the thread-pool check alone, for rerunning it */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) verbose = 1;
        else if (strcmp(argv[i], "pool") == 0) pool_only = 1;
        else rng = strtoull(argv[i], NULL, 0) * 2654435761u + 1;
    }
    const infer_kernel_table *ref = infer_kernels_for(INFER_ISA_SCALAR);
    if (!ref) { printf("no scalar table\n"); return 2; }
    printf("available:");
    for (int isa = 0; isa < INFER_ISA_COUNT; isa++)
        if (infer_isa_available() & (1u << isa)) printf(" %s", infer_isa_name(isa));
    printf("; default: %s\n", infer_isa_name(infer_isa_active()));
    for (int isa = INFER_ISA_SCALAR + 1; isa < INFER_ISA_COUNT && !pool_only; isa++) {
        const infer_kernel_table *simd = infer_kernels_for(isa);
        if (!simd) continue;
        cur_isa = infer_isa_name(isa);
        printf("isa %s: %d entries override scalar\n", cur_isa, count_overrides(ref, simd));
        for (int t = 0; t < INFER_TYPE_COUNT; t++) {
            if (!infer_type_name(t)) continue;
            check_dequantize(ref, simd, t);
            check_quantize(ref, simd, t);
            check_quantize_non_finite(simd, t);
            check_vec_dot(ref, simd, t);
            check_vec_dot_4(ref, simd, t);
            check_vec_dot_4x4(ref, simd, t);
            check_vec_dot_4xn(ref, simd, t);
            check_vec_dot_rx8(ref, simd, t);
            check_matmul_r16(ref, simd, t);
            if (simd->repack_to[t] && !simd->matmul_r16[simd->repack_to[t]])
                report(0, "repack_to", t, 0, "names a format without a kernel", 0, 0, -1);
            if (simd->vec_dot_4_prefetches[t] && !simd->vec_dot_4[t])   /* the driver would prefetch nothing */
                report(0, "vec_dot_4_prefetches", t, 0, "set without vec_dot_4", 0, 0, -1);
        }
        check_ops(ref, simd);
        check_rope(ref, simd);
        check_attention(ref, simd);
        check_attention_block(ref, simd);
    }
    check_thread_pool();
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
