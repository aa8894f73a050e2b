/* attention.c: the shape loops around the per-row float kernels of the table:
 * RoPE over [tokens, heads, head_dim], the KV-cache store, and attention over the
 * cache run on the thread pool.  Baseline flags: the kernels it calls are the
 * active table's. */
#include "infer_kernels.h"

#include <math.h>

#define ROPE_RESEED 64

int infer_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               int64_t rot_dim, const int64_t *positions, int64_t pos0,
               float freq_base, float freq_scale, int neox) {
    if (!x || n_tokens < 0 || n_heads < 0 || head_dim < 1 || head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        rot_dim < 2 || rot_dim > head_dim || (rot_dim & 1) || !(freq_base > 0.0f))
        return -1;
    const infer_kernel_table *t = infer_kernels();
    const infer_rope_fn rotate = neox ? t->rope_neox : t->rope_norm;
    const int64_t half = rot_dim / 2;
    /* Angles in double so that large positions keep their precision. */
    double inv_freq[INFER_ATTN_MAX_HEAD_DIM / 2];
    for (int64_t i = 0; i < half; i++)
        inv_freq[i] = (double)freq_scale * pow((double)freq_base, -2.0 * (double)i / (double)rot_dim);
    float cs[INFER_ATTN_MAX_HEAD_DIM], sn[INFER_ATTN_MAX_HEAD_DIM];
    /* cos and sin of the current angles, and of one position's step: consecutive
     * positions advance by an angle addition in double (error ~1e-16 a step),
     * re-seeded from cos/sin every ROPE_RESEED tokens. */
    double c_d[INFER_ATTN_MAX_HEAD_DIM / 2], s_d[INFER_ATTN_MAX_HEAD_DIM / 2];
    double c_step[INFER_ATTN_MAX_HEAD_DIM / 2], s_step[INFER_ATTN_MAX_HEAD_DIM / 2];
    if (!positions)
        for (int64_t i = 0; i < half; i++) { c_step[i] = cos(inv_freq[i]); s_step[i] = sin(inv_freq[i]); }
    for (int64_t tok = 0; tok < n_tokens; tok++) {
        if (positions || tok % ROPE_RESEED == 0) {
            const double pos = (double)(positions ? positions[tok] : pos0 + tok);
            for (int64_t i = 0; i < half; i++) {
                const double theta = pos * inv_freq[i];
                c_d[i] = cos(theta);
                s_d[i] = sin(theta);
            }
        } else {
            for (int64_t i = 0; i < half; i++) {
                const double c = c_d[i] * c_step[i] - s_d[i] * s_step[i];
                s_d[i] = s_d[i] * c_step[i] + c_d[i] * s_step[i];
                c_d[i] = c;
            }
        }
        for (int64_t i = 0; i < half; i++) {
            const float c = (float)c_d[i], s = (float)s_d[i];
            if (neox) {
                cs[i] = c; sn[i] = s;
            } else {
                cs[2 * i] = cs[2 * i + 1] = c;
                sn[2 * i] = sn[2 * i + 1] = s;
            }
        }
        float *row = x + tok * n_heads * head_dim;
        for (int64_t h = 0; h < n_heads; h++) rotate(row + h * head_dim, cs, sn, rot_dim);
    }
    return 0;
}

int infer_kv_store(const float *x, void *cache, int kv_type, int64_t n_tokens,
                   int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx, int64_t pos0) {
    if (!x || !cache || n_tokens < 0 || n_kv_heads < 0 || head_dim < 1 || pos0 < 0 ||
        pos0 + n_tokens > n_ctx || (kv_type != INFER_TYPE_F32 && kv_type != INFER_TYPE_F16))
        return -1;
    const infer_quantize_fn to_f16 = infer_kernels()->quantize[INFER_TYPE_F16];
    for (int64_t tok = 0; tok < n_tokens; tok++) {
        for (int64_t h = 0; h < n_kv_heads; h++) {
            const float *src = x + (tok * n_kv_heads + h) * head_dim;
            const int64_t slot = (h * n_ctx + pos0 + tok) * head_dim;
            if (kv_type == INFER_TYPE_F32) {
                float *dst = (float *)cache + slot;
                for (int64_t i = 0; i < head_dim; i++) dst[i] = src[i];
            } else if (to_f16) {
                to_f16(src, (infer_half *)cache + slot, head_dim);
            } else {
                infer_half *dst = (infer_half *)cache + slot;
                for (int64_t i = 0; i < head_dim; i++) dst[i] = infer_fp32_to_fp16(src[i]);
            }
        }
    }
    return 0;
}

typedef struct {
    const float *q;
    const void *k, *v;
    size_t elem_bytes;
    infer_attn_fn kernel;
    int64_t n_tokens, n_heads, group, head_dim, n_ctx, pos0, window;
    float scale;
    float *out;
} attention_task;

/* Work item i = (token i / n_heads, head i % n_heads); threads take every nth
 * item, which spreads the long rows of a causal prefill evenly. */
static void attention_worker(void *arg, int ith, int nth) {
    const attention_task *a = (const attention_task *)arg;
    const int64_t n_items = a->n_tokens * a->n_heads;
    for (int64_t it = ith; it < n_items; it += nth) {
        const int64_t tok = it / a->n_heads, h = it % a->n_heads;
        const int64_t p = a->pos0 + tok;
        const int64_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        const size_t row = (size_t)(((h / a->group) * a->n_ctx + lo) * a->head_dim) * a->elem_bytes;
        const int64_t off = it * a->head_dim;
        a->kernel(a->q + off, (const char *)a->k + row, (const char *)a->v + row, p - lo + 1,
                  a->head_dim, a->scale, a->out + off);
    }
}

int infer_attention(const float *q, const void *k_cache, const void *v_cache, int kv_type,
                    int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    int64_t n_ctx, int64_t pos0, int64_t window, float scale, float *out) {
    if (!q || !k_cache || !v_cache || !out || n_tokens < 0 || n_heads < 1 || n_kv_heads < 1 ||
        n_heads % n_kv_heads || head_dim < 1 || head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        pos0 < 0 || pos0 + n_tokens > n_ctx || window < 0 ||
        (kv_type != INFER_TYPE_F32 && kv_type != INFER_TYPE_F16))
        return -1;
    if (n_tokens == 0) return 0;
    const infer_kernel_table *t = infer_kernels();
    attention_task a = {
        .q = q, .k = k_cache, .v = v_cache,
        .elem_bytes = kv_type == INFER_TYPE_F16 ? sizeof(infer_half) : sizeof(float),
        .kernel = kv_type == INFER_TYPE_F16 ? t->attn_f16 : t->attn_f32,
        .n_tokens = n_tokens, .n_heads = n_heads, .group = n_heads / n_kv_heads,
        .head_dim = head_dim, .n_ctx = n_ctx, .pos0 = pos0, .window = window,
        .scale = scale, .out = out,
    };
    infer_parallel_run(attention_worker, &a);
    return 0;
}
