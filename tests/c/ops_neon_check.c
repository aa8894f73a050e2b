/* ops_neon_check.c: the NEON float ops against the scalar table (itself checked
 * against float64 numpy by tests/test_kernels_ops.py), for machines without an
 * AArch64 Python: cross-compiled and run under qemu-aarch64 by
 * tests/test_kernels_ops_neon.py.  Prints one line per failure; exit status is
 * the failure count. */
#include "infer_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static unsigned long long seed = 88172645463325252ull;

static float randn(void) {  /* xorshift64 -> sum of uniforms, roughly normal */
    float s = 0.0f;
    for (int i = 0; i < 4; i++) {
        seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
        s += (float)(seed >> 40) / (float)(1 << 24) - 0.5f;
    }
    return s * 1.7f;
}

static float *vec(int64_t n, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = randn() * scale;
    return p;
}

static void check(const char *what, int64_t n, const float *got, const float *want,
                  float rtol, float atol) {
    for (int64_t i = 0; i < n; i++) {
        float err = fabsf(got[i] - want[i]);
        if (!(err <= atol + rtol * fabsf(want[i]))) {
            printf("FAIL %s n=%lld i=%lld got %.9g want %.9g\n", what, (long long)n,
                   (long long)i, got[i], want[i]);
            failures++;
            return;
        }
    }
}

int main(void) {
    const infer_kernel_table *sc = infer_kernels_for(INFER_ISA_SCALAR);
    const infer_kernel_table *ne = infer_kernels_for(INFER_ISA_NEON);
    if (!sc || !ne) { printf("FAIL no neon table\n"); return 1; }
    static const int64_t sizes[] = {1, 3, 4, 7, 15, 16, 17, 33, 64, 65, 576, 1000};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int64_t n = sizes[si];
        float *x = vec(n, 3.0f), *w = vec(n, 1.0f), *b = vec(n, 1.0f);
        float *o1 = vec(n, 0.0f), *o2 = vec(n, 0.0f);
        sc->rmsnorm(x, w, o1, n, 1e-5f); ne->rmsnorm(x, w, o2, n, 1e-5f);
        check("rmsnorm", n, o2, o1, 2e-6f, 2e-6f);
        sc->layernorm(x, w, b, o1, n, 1e-5f); ne->layernorm(x, w, b, o2, n, 1e-5f);
        check("layernorm", n, o2, o1, 1e-5f, 1e-5f);
        sc->layernorm(x, NULL, NULL, o1, n, 1e-5f); ne->layernorm(x, NULL, NULL, o2, n, 1e-5f);
        check("layernorm no affine", n, o2, o1, 1e-5f, 1e-5f);
        sc->silu_mul(x, w, o1, n); ne->silu_mul(x, w, o2, n);
        check("silu_mul", n, o2, o1, 1e-5f, 1e-6f);
        sc->gelu_mul(x, w, o1, n); ne->gelu_mul(x, w, o2, n);
        check("gelu_mul", n, o2, o1, 1e-5f, 1e-6f);
        for (int64_t i = 0; i < n; i++) { o1[i] = x[i] * 10.0f; o2[i] = o1[i]; }
        if (n > 2) { o1[1] = o2[1] = -INFINITY; }
        sc->softmax(o1, n); ne->softmax(o2, n);
        check("softmax", n, o2, o1, 1e-5f, 1e-7f);
        memcpy(o1, x, n * sizeof *x); memcpy(o2, x, n * sizeof *x);
        sc->add(o1, w, n); ne->add(o2, w, n);
        check("add", n, o2, o1, 0.0f, 0.0f);
        sc->scale(o1, 0.3f, n); ne->scale(o2, 0.3f, n);
        check("scale", n, o2, o1, 0.0f, 0.0f);
        free(x); free(w); free(b); free(o1); free(o2);
    }
    /* drivers: RoPE, KV store, attention, switching the active table */
    static const int64_t dims[] = {64, 80, 128, 256};
    for (size_t di = 0; di < 4; di++) {
        const int64_t d = dims[di], n_tok = 70, n_kv = 2, n_ctx = 140, n_heads = 6;
        for (int neox = 0; neox < 2; neox++) {
            float *x1 = vec(n_tok * 3 * d, 1.0f), *x2 = malloc(n_tok * 3 * d * sizeof(float));
            memcpy(x2, x1, n_tok * 3 * d * sizeof(float));
            infer_set_isa(INFER_ISA_SCALAR);
            infer_rope(x1, n_tok, 3, d, d - 16, NULL, 1000, 10000.0f, 1.0f, neox);
            infer_set_isa(INFER_ISA_NEON);
            infer_rope(x2, n_tok, 3, d, d - 16, NULL, 1000, 10000.0f, 1.0f, neox);
            check(neox ? "rope neox" : "rope norm", n_tok * 3 * d, x2, x1, 1e-6f, 1e-6f);
            free(x1); free(x2);
        }
        for (int f16 = 0; f16 < 2; f16++) {
            const int type = f16 ? INFER_TYPE_F16 : INFER_TYPE_F32;
            const size_t esz = f16 ? 2 : 4, cells = (size_t)(n_kv * n_ctx * d);
            void *kc = calloc(cells, esz), *vc = calloc(cells, esz);
            float *ks = vec(n_ctx * n_kv * d, 1.0f), *vs = vec(n_ctx * n_kv * d, 1.0f);
            float *q = vec(n_tok * n_heads * d, 1.0f);
            float *o1 = vec(n_tok * n_heads * d, 0.0f), *o2 = vec(n_tok * n_heads * d, 0.0f);
            infer_set_isa(INFER_ISA_NEON);
            infer_kv_store(ks, kc, type, n_ctx, n_kv, d, n_ctx, 0);
            infer_kv_store(vs, vc, type, n_ctx, n_kv, d, n_ctx, 0);
            for (int64_t window = 0; window <= 40; window += 40) {
                infer_set_isa(INFER_ISA_SCALAR);
                infer_attention(q, kc, vc, type, n_tok, n_heads, n_kv, d, n_ctx, 60, window,
                                0.125f, o1);
                infer_set_isa(INFER_ISA_NEON);
                infer_attention(q, kc, vc, type, n_tok, n_heads, n_kv, d, n_ctx, 60, window,
                                0.125f, o2);
                check(f16 ? "attention f16" : "attention f32", n_tok * n_heads * d, o2, o1,
                      1e-4f, 1e-5f);
            }
            if (f16) {  /* the stored bits are the portable conversion's */
                for (size_t i = 0; i < cells; i += 7) {
                    int64_t h = (int64_t)i / (n_ctx * d), p = ((int64_t)i / d) % n_ctx, e = (int64_t)i % d;
                    if (((infer_half *)kc)[i] != infer_fp32_to_fp16(ks[(p * n_kv + h) * d + e])) {
                        printf("FAIL kv_store f16 cell %zu\n", i);
                        failures++;
                        break;
                    }
                }
            }
            free(kc); free(vc); free(ks); free(vs); free(q); free(o1); free(o2);
        }
    }
    /* one decoded token, 1 and 2 query heads per KV head (blocks of one and two
     * queries), and the one-query table entries */
    for (int64_t group = 1; group <= 2; group++) {
        const int64_t d = 80, n_kv = 2, n_heads = 2 * group, n_ctx = 150, pos = 140;
        float *kc = vec(n_kv * n_ctx * d, 1.0f), *vc = vec(n_kv * n_ctx * d, 1.0f);
        float *q = vec(n_heads * d, 1.0f), *o1 = vec(n_heads * d, 0.0f), *o2 = vec(n_heads * d, 0.0f);
        infer_set_isa(INFER_ISA_SCALAR);
        infer_attention(q, kc, vc, INFER_TYPE_F32, 1, n_heads, n_kv, d, n_ctx, pos, 0, 0.1f, o1);
        infer_set_isa(INFER_ISA_NEON);
        infer_attention(q, kc, vc, INFER_TYPE_F32, 1, n_heads, n_kv, d, n_ctx, pos, 0, 0.1f, o2);
        check("attention decode, small groups", n_heads * d, o2, o1, 1e-4f, 1e-5f);
        sc->attn_f32(q, kc, vc, 77, d, 0.1f, o1);
        ne->attn_f32(q, kc, vc, 77, d, 0.1f, o2);
        check("attn_f32 one query", d, o2, o1, 1e-4f, 1e-5f);
        free(kc); free(vc); free(q); free(o1); free(o2);
    }
    /* one decoded token on 2 threads: positions split in two ranges, then merged */
    {
        const int64_t d = 64, n_kv = 3, n_heads = 9, n_ctx = 700, pos = 650;
        float *kc = vec(n_kv * n_ctx * d, 1.0f), *vc = vec(n_kv * n_ctx * d, 1.0f);
        float *q = vec(n_heads * d, 1.0f), *o1 = vec(n_heads * d, 0.0f), *o2 = vec(n_heads * d, 0.0f);
        infer_set_num_threads(1);
        infer_set_isa(INFER_ISA_SCALAR);
        infer_attention(q, kc, vc, INFER_TYPE_F32, 1, n_heads, n_kv, d, n_ctx, pos, 0, 0.125f, o1);
        infer_set_num_threads(2);
        infer_set_isa(INFER_ISA_NEON);
        infer_attention(q, kc, vc, INFER_TYPE_F32, 1, n_heads, n_kv, d, n_ctx, pos, 0, 0.125f, o2);
        check("attention split over 2 threads", n_heads * d, o2, o1, 1e-4f, 1e-5f);
        infer_set_num_threads(1);
        free(kc); free(vc); free(q); free(o1); free(o2);
    }
    printf("%d failures\n", failures);
    return failures;
}
