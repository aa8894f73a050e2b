/* attention.c: the shape loops around the per-row float kernels of the table:
 * RoPE over [tokens, heads, head_dim], the KV-cache store, and attention over the
 * cache run on the thread pool.  Baseline flags: the kernels it calls are the
 * active table's. */
#include "infer_kernels.h"

#include <math.h>

#define ROPE_RESEED 64

void infer_rope_inv_freq(double *inv_freq, int64_t rot_dim, float freq_base, float freq_scale,
                         const float *freq_factors) {
    for (int64_t i = 0; i < rot_dim / 2; i++) {
        inv_freq[i] = (double)freq_scale * pow((double)freq_base, -2.0 * (double)i / (double)rot_dim);
        if (freq_factors) inv_freq[i] /= (double)freq_factors[i];
    }
}

int infer_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               int64_t rot_dim, const int64_t *positions, int64_t pos0,
               float freq_base, float freq_scale, const float *freq_factors,
               float attn_factor, int neox) {
    if (!x || n_tokens < 0 || n_heads < 0 || head_dim < 1 || head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        rot_dim < 2 || rot_dim > head_dim || (rot_dim & 1) || !(freq_base > 0.0f))
        return -1;
    const infer_kernel_table *t = infer_kernels();
    const infer_rope_fn rotate = neox ? t->rope_neox : t->rope_norm;
    const int64_t half = rot_dim / 2;
    /* Angles in double so that large positions keep their precision. */
    double inv_freq[INFER_ATTN_MAX_HEAD_DIM / 2];
    infer_rope_inv_freq(inv_freq, rot_dim, freq_base, freq_scale, freq_factors);
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
            const float c = (float)(c_d[i] * attn_factor), s = (float)(s_d[i] * attn_factor);
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
        n_ctx < 0 || n_tokens > n_ctx - pos0 || (kv_type != INFER_TYPE_F32 && kv_type != INFER_TYPE_F16))
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

/* A decoded token's attention is split into position ranges, one per thread, when
 * its KV heads alone would leave threads idle; each range at least this long. */
#define ATTN_SPLIT_MIN 256
#define ATTN_SPLIT_SCRATCH 8192   /* floats of partial results on the caller's stack */

typedef struct {
    const float *q;
    const char *k, *v;
    size_t head_bytes;            /* one KV head's n_ctx rows */
    infer_attn_block_fn kernel;
    int64_t n_tokens, n_heads, group, head_dim, pos0, window;
    int64_t tokens_per_item, heads_per_item, head_blocks, kv_heads;
    int64_t splits;               /* position ranges of a one-token call; 1 = none */
    float scale, softcap;
    const float *sinks;           /* n_heads logits joining each softmax's denominator, or NULL */
    float *out;
    float *part_out, *part_ml;    /* splits > 1: [split][head][head_dim], [split][head][2] */
} attention_task;

/* Work item = (token block, KV head, block of that KV head's query heads, position
 * range); threads take every nth item, which spreads the long rows of a causal
 * prefill evenly. */
static void attention_worker(void *arg, int ith, int nth) {
    const attention_task *a = (const attention_task *)arg;
    const int64_t tb = a->tokens_per_item, hb = a->heads_per_item;
    const int64_t n_items =
        (a->n_tokens + tb - 1) / tb * a->kv_heads * a->head_blocks * a->splits;
    const float *q[INFER_ATTN_MAX_Q];
    float *out[INFER_ATTN_MAX_Q];
    int64_t lo[INFER_ATTN_MAX_Q], hi[INFER_ATTN_MAX_Q], head[INFER_ATTN_MAX_Q];
    float own_ml[2 * INFER_ATTN_MAX_Q];   /* (max, sum) per query, for the sinks */
    for (int64_t it = ith; it < n_items; it += nth) {
        const int64_t split = it % a->splits, rest = it / a->splits;
        const int64_t hblock = rest % a->head_blocks;
        const int64_t kv = rest / a->head_blocks % a->kv_heads;
        const int64_t t0 = rest / (a->head_blocks * a->kv_heads) * tb;
        const int64_t t1 = t0 + tb < a->n_tokens ? t0 + tb : a->n_tokens;
        const int64_t h0 = kv * a->group + hblock * hb;
        const int64_t h1 = h0 + hb < (kv + 1) * a->group ? h0 + hb : (kv + 1) * a->group;
        float *ml = NULL;
        int64_t n_q = 0;
        for (int64_t t = t0; t < t1; t++) {
            const int64_t p = a->pos0 + t;
            int64_t first = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
            int64_t last = p;
            if (a->splits > 1) {   /* one token: this item's share of [first, p] */
                const int64_t len = p - first + 1;
                last = first + len * (split + 1) / a->splits - 1;
                first = first + len * split / a->splits;
                ml = a->part_ml + (split * a->n_heads + h0) * 2;
            }
            for (int64_t h = h0; h < h1; h++, n_q++) {
                const int64_t off = (t * a->n_heads + h) * a->head_dim;
                q[n_q] = a->q + off;
                head[n_q] = h;
                out[n_q] = a->splits > 1 ? a->part_out + (split * a->n_heads + h) * a->head_dim
                                         : a->out + off;
                lo[n_q] = first;
                hi[n_q] = last;
            }
        }
        const int sinks_here = a->sinks && a->splits == 1;   /* split ranges: merge_splits adds them */
        a->kernel(n_q, q, out, lo, hi, a->k + kv * a->head_bytes, a->v + kv * a->head_bytes,
                  a->head_dim, a->scale, a->softcap, sinks_here ? own_ml : ml);
        for (int64_t u = 0; sinks_here && u < n_q; u++) {
            const float f = infer_sink_factor(own_ml[2 * u], own_ml[2 * u + 1], a->sinks[head[u]]);
            for (int64_t i = 0; i < a->head_dim; i++) out[u][i] *= f;
        }
    }
}

float infer_sink_factor(float m, float l, float sink) {
    if (!(l > 0.0f)) return 0.0f;
    if (sink <= m) return l / (l + expf(sink - m));
    const float lm = l * expf(m - sink);   /* both terms relative to the sink */
    return lm / (lm + 1.0f);
}

/* out = the softmax-weighted mean of the ranges' results: range s weighs
 * l_s exp(m_s - M), M the largest m_s (and the head's sink, which adds
 * exp(sink - M) to the total). */
static void merge_splits(const attention_task *a) {
    const int64_t d = a->head_dim;
    for (int64_t h = 0; h < a->n_heads; h++) {
        float m = -INFINITY, total = 0.0f, w[INFER_ATTN_MAX_Q];
        for (int64_t s = 0; s < a->splits; s++) {
            const float ms = a->part_ml[(s * a->n_heads + h) * 2];
            m = ms > m ? ms : m;
        }
        if (a->sinks && a->sinks[h] > m) m = a->sinks[h];
        if (a->sinks) total = expf(a->sinks[h] - m);
        for (int64_t s = 0; s < a->splits; s++) {
            const float *ml = a->part_ml + (s * a->n_heads + h) * 2;
            w[s] = ml[1] > 0.0f ? ml[1] * expf(ml[0] - m) : 0.0f;
            total += w[s];
        }
        float *o = a->out + h * d;
        for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
        for (int64_t s = 0; s < a->splits; s++) {
            const float ws = total > 0.0f ? w[s] / total : 0.0f;
            const float *po = a->part_out + (s * a->n_heads + h) * d;
            for (int64_t i = 0; i < d; i++) o[i] += ws * po[i];
        }
    }
}

int infer_attention(const float *q, const void *k_cache, const void *v_cache, int kv_type,
                    int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    int64_t n_ctx, int64_t pos0, int64_t window, float scale, float softcap,
                    float *out) {
    return infer_attention_sinks(q, k_cache, v_cache, kv_type, n_tokens, n_heads, n_kv_heads, head_dim,
                                 n_ctx, pos0, window, scale, softcap, NULL, out);
}

int infer_attention_sinks(const float *q, const void *k_cache, const void *v_cache, int kv_type,
                          int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                          int64_t n_ctx, int64_t pos0, int64_t window, float scale, float softcap,
                          const float *sinks, float *out) {
    if (!q || !k_cache || !v_cache || !out || n_tokens < 0 || n_heads < 1 || n_kv_heads < 1 ||
        n_heads % n_kv_heads || head_dim < 1 || head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        pos0 < 0 || n_ctx < 0 || n_tokens > n_ctx - pos0 || window < 0 || !(softcap >= 0.0f) ||
        (kv_type != INFER_TYPE_F32 && kv_type != INFER_TYPE_F16))
        return -1;
    if (n_tokens == 0) return 0;
    const infer_kernel_table *t = infer_kernels();
    const int64_t group = n_heads / n_kv_heads;
    /* As many query rows per item as the kernel's scratch allows: the query heads
     * of one KV head first (same positions), then consecutive tokens. */
    int64_t max_q = INFER_ATTN_MAX_QD / head_dim;
    if (max_q > INFER_ATTN_MAX_Q) max_q = INFER_ATTN_MAX_Q;
    const int64_t hb = group < max_q ? group : max_q;
    const int64_t tb = max_q / hb < n_tokens ? max_q / hb : n_tokens;
    const int64_t head_blocks = (group + hb - 1) / hb;
    const int nth = infer_get_num_threads();
    const int64_t items = (n_tokens + tb - 1) / tb * n_kv_heads * head_blocks;
    const int64_t span = window > 0 && window < pos0 + 1 ? window : pos0 + 1;
    int64_t splits = 1;
    if (n_tokens == 1 && nth > 1 && items % nth && nth <= INFER_ATTN_MAX_Q &&
        span >= (int64_t)nth * ATTN_SPLIT_MIN && nth * n_heads * (head_dim + 2) <= ATTN_SPLIT_SCRATCH)
        splits = nth;
    float part[ATTN_SPLIT_SCRATCH];
    const size_t elem = kv_type == INFER_TYPE_F16 ? sizeof(infer_half) : sizeof(float);
    attention_task a = {
        .q = q, .k = (const char *)k_cache, .v = (const char *)v_cache,
        .head_bytes = (size_t)(n_ctx * head_dim) * elem,
        .kernel = kv_type == INFER_TYPE_F16 ? t->attn_block_f16 : t->attn_block_f32,
        .n_tokens = n_tokens, .n_heads = n_heads, .group = group, .head_dim = head_dim,
        .pos0 = pos0, .window = window,
        .tokens_per_item = tb, .heads_per_item = hb, .head_blocks = head_blocks,
        .kv_heads = n_kv_heads, .splits = splits, .scale = scale, .softcap = softcap, .sinks = sinks, .out = out,
        .part_out = part, .part_ml = part + splits * n_heads * head_dim,
    };
    infer_parallel_run(attention_worker, &a);
    if (splits > 1) merge_splits(&a);
    return 0;
}
