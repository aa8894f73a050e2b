/* ops_scalar.c: the float ops in portable C, the oracle the SIMD files are tested
 * against.  Reductions accumulate in double so that these stay the most accurate
 * path. */
#include "infer_kernels.h"
#include "ops_internal.h"

#include <math.h>

static void rmsnorm_scalar(const float *x, const float *weight, float *out, int64_t n,
                           float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    /* Gemma's (1 + w) is already baked into its GGUF norm weights: plain w here. */
    const float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * weight[i];
}

static void layernorm_scalar(const float *x, const float *weight, const float *bias,
                             float *out, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    const float mean = (float)(sum / (double)n);
    double var = 0.0;  /* two passes: no cancellation from E[x^2] - E[x]^2 */
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - mean;
        var += d * d;
    }
    const float r = (float)(1.0 / sqrt(var / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float y = (x[i] - mean) * r;
        if (weight) y *= weight[i];
        if (bias) y += bias[i];
        out[i] = y;
    }
}

static void softmax_scalar(float *x, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    if (max == -INFINITY) {  /* nothing allowed: all zeros rather than NaN */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float r = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}

static void silu_mul_scalar(const float *gate, const float *up, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(z)) with z = sqrt(2/pi) (x + 0.044715 x^3),
 * which equals x * sigmoid(2z): one exp, no tanh. */
static void gelu_mul_scalar(const float *gate, const float *up, float *out, int64_t n) {
    const float c = 0.7978845608028654f;  /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        float z2 = 2.0f * c * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + expf(-z2)) * up[i];
    }
}

static void add_scalar(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
}

static void scale_scalar(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static void rope_norm_scalar(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    for (int64_t i = 0; i < rot_dim; i += 2) {
        float x0 = x[i], x1 = x[i + 1];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + 1] = x0 * sn[i] + x1 * cs[i];
    }
}

static void rope_neox_scalar(float *x, const float *cs, const float *sn, int64_t rot_dim) {
    const int64_t half = rot_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
    }
}

/* Cache element i of a row block stored as F32 or F16 bits. */
static inline float kv_at(const void *p, int64_t i, int f16) {
    return f16 ? infer_fp16_to_fp32(((const infer_half *)p)[i]) : ((const float *)p)[i];
}

/* One query over cache rows [lo, hi]. */
static void attn_one_scalar(const float *q, float *out, int64_t lo, int64_t hi, const void *k,
                            const void *v, int64_t d, float scale, float softcap, float *ml,
                            int f16) {
    float qs[INFER_ATTN_MAX_HEAD_DIM], acc[INFER_ATTN_MAX_HEAD_DIM], s[ATTN_CHUNK];
    for (int64_t i = 0; i < d; i++) { qs[i] = q[i] * scale; acc[i] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int64_t p0 = lo; p0 <= hi; p0 += ATTN_CHUNK) {
        const int64_t nb = hi + 1 - p0 < ATTN_CHUNK ? hi + 1 - p0 : ATTN_CHUNK;
        float cmax = -INFINITY;
        for (int64_t j = 0; j < nb; j++) {
            const int64_t row = (p0 + j) * d;
            double dot = 0.0;
            for (int64_t i = 0; i < d; i++) dot += (double)qs[i] * kv_at(k, row + i, f16);
            s[j] = (float)dot;
            if (softcap > 0.0f) s[j] = softcap * tanhf(s[j] / softcap);
            cmax = s[j] > cmax ? s[j] : cmax;
        }
        if (cmax == -INFINITY) continue;
        if (cmax > m) {
            const float c = expf(m - cmax);  /* 0 on the first chunk */
            l *= c;
            for (int64_t i = 0; i < d; i++) acc[i] *= c;
            m = cmax;
        }
        for (int64_t j = 0; j < nb; j++) {
            const float w = expf(s[j] - m);
            const int64_t row = (p0 + j) * d;
            l += w;
            for (int64_t i = 0; i < d; i++) acc[i] += w * kv_at(v, row + i, f16);
        }
    }
    if (ml) { ml[0] = m; ml[1] = l; }
    const float r = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < d; i++) out[i] = acc[i] * r;
}

static void attn_block_f32_scalar(int64_t n_q, const float *const *q, float *const *out,
                                  const int64_t *lo, const int64_t *hi, const void *k, const void *v,
                                  int64_t d, float scale, float softcap, float *ml) {
    for (int64_t u = 0; u < n_q; u++)
        attn_one_scalar(q[u], out[u], lo[u], hi[u], k, v, d, scale, softcap, ml ? ml + 2 * u : NULL,
                        0);
}

static void attn_block_f16_scalar(int64_t n_q, const float *const *q, float *const *out,
                                  const int64_t *lo, const int64_t *hi, const void *k, const void *v,
                                  int64_t d, float scale, float softcap, float *ml) {
    for (int64_t u = 0; u < n_q; u++)
        attn_one_scalar(q[u], out[u], lo[u], hi[u], k, v, d, scale, softcap, ml ? ml + 2 * u : NULL,
                        1);
}

/* The one-query entries: rows [0, n_pos) of k and v. */
static void attn_f32_scalar(const float *q, const void *k, const void *v, int64_t n_pos, int64_t d,
                          float scale, float *out) {
    const int64_t lo = 0, hi = n_pos - 1;
    attn_block_f32_scalar(1, &q, &out, &lo, &hi, k, v, d, scale, 0.0f, NULL);
}

static void attn_f16_scalar(const float *q, const void *k, const void *v, int64_t n_pos, int64_t d,
                          float scale, float *out) {
    const int64_t lo = 0, hi = n_pos - 1;
    attn_block_f16_scalar(1, &q, &out, &lo, &hi, k, v, d, scale, 0.0f, NULL);
}

void infer_fill_ops_scalar(infer_kernel_table *t) {
    t->rmsnorm = rmsnorm_scalar;
    t->layernorm = layernorm_scalar;
    t->softmax = softmax_scalar;
    t->silu_mul = silu_mul_scalar;
    t->gelu_mul = gelu_mul_scalar;
    t->add = add_scalar;
    t->scale = scale_scalar;
    t->rope_norm = rope_norm_scalar;
    t->rope_neox = rope_neox_scalar;
    t->attn_f32 = attn_f32_scalar;
    t->attn_f16 = attn_f16_scalar;
    t->attn_block_f32 = attn_block_f32_scalar;
    t->attn_block_f16 = attn_block_f16_scalar;
}
