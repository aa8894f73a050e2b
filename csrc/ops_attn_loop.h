/* ops_attn_loop.h: the part of the SIMD attention kernels that is the same on
 * every ISA: the walk over the cache in chunks of ATTN_CHUNK positions, the
 * online-softmax bookkeeping of each query, and the table entries.
 *
 * Included by ops_<isa>.c after it has defined, for its vector width:
 *   attn_scores(UB, qs, d, k, p0, nb, s, f16, pf)      s[u * ATTN_CHUNK + j] = qs[u] . k_row(p0 + j)
 *   attn_accumulate(UB, acc, d, v, p0, nb, w, f16, pf) acc[u * d + i] += sum_j w[u * ATTN_CHUNK + j] v_row(p0 + j)[i]
 *     (pf > 0: also prefetch the rows pf positions ahead of those read; see ops_internal.h)
 *   attn_exp_sum(s, nb, m)     s[j] = exp(s[j] - m), 0 for -inf; returns the sum
 *   attn_max(s, n)             the largest of s[0..n) (n >= 1) that is not NaN, -inf if none:
 *                              the scalar loop `m = s[j] > m ? s[j] : m` from m = -inf
 *   attn_rescale(acc, c, d)    acc[i] *= c
 * (UB <= 4 queries, a constant at each call) and OPS_ISA, the suffix of the
 * entries defined here: attn_block_f32_<isa>, attn_block_f16_<isa>, attn_f32_<isa>,
 * attn_f16_<isa>. */
#ifndef OPS_ISA
#error "define OPS_ISA before including ops_attn_loop.h"
#endif

#define OPS_CAT2(a, b) a##_##b
#define OPS_CAT(a, b) OPS_CAT2(a, b)
#define OPS_NAME(base) OPS_CAT(base, OPS_ISA)

/* One query's step over a chunk: rows outside [lo, hi] get weight 0; s becomes the
 * weights exp(s - m) under the (possibly raised) running max m, and the
 * accumulator and running sum l are rescaled to that max.  softcap > 0 first
 * caps the scores (softcap * tanh(s / softcap)). */
static void attn_softmax_step(float *s, int64_t p0, int64_t nb, int64_t lo, int64_t hi,
                              float *m, float *l, float *acc, int64_t d, float softcap) {
    const int64_t jlo = lo - p0 > 0 ? lo - p0 : 0, jhi = hi - p0 < nb - 1 ? hi - p0 : nb - 1;
    /* [0, jlo) and (jhi, nb) cover the chunk when the range is empty (jhi < jlo) */
    for (int64_t j = 0; j < jlo && j < nb; j++) s[j] = -INFINITY;
    for (int64_t j = jhi + 1 > 0 ? jhi + 1 : 0; j < nb; j++) s[j] = -INFINITY;
    float cmax = -INFINITY;
    if (jlo <= jhi) {
        if (softcap > 0.0f)
            for (int64_t j = jlo; j <= jhi; j++) s[j] = softcap * tanhf(s[j] / softcap);
        cmax = attn_max(s + jlo, jhi - jlo + 1);
    }
    if (cmax == -INFINITY) {
        for (int64_t j = 0; j < nb; j++) s[j] = 0.0f;
        return;
    }
    if (cmax > *m) {
        const float c = expf(*m - cmax);  /* 0 on the first chunk */
        *l *= c;
        attn_rescale(acc, c, d);
        *m = cmax;
    }
    *l += attn_exp_sum(s, nb, *m);
}

/* Up to four queries per call of the ISA helpers (UB a constant in each branch). */
#define ATTN_BY_FOUR(CALL)                                                          \
    for (int64_t u = 0; u < n_q; u += 4) {                                          \
        switch (n_q - u < 4 ? n_q - u : 4) {                                        \
        case 4: CALL(4); break;                                                     \
        case 3: CALL(3); break;                                                     \
        case 2: CALL(2); break;                                                     \
        default: CALL(1); break;                                                    \
        }                                                                           \
    }

static ALWAYS_INLINE void attn_block(int64_t n_q, const float *const *q, float *const *out,
                                     const int64_t *lo, const int64_t *hi, const void *k,
                                     const void *v, int64_t d, float scale, float softcap,
                                     float *ml, int f16) {
    float qs[INFER_ATTN_MAX_QD], acc[INFER_ATTN_MAX_QD];
    float s[INFER_ATTN_MAX_Q * ATTN_CHUNK], m[INFER_ATTN_MAX_Q], l[INFER_ATTN_MAX_Q];
    int64_t p_lo = lo[0], p_hi = hi[0];
    for (int64_t u = 0; u < n_q; u++) {
        for (int64_t i = 0; i < d; i++) { qs[u * d + i] = q[u][i] * scale; acc[u * d + i] = 0.0f; }
        m[u] = -INFINITY;
        l[u] = 0.0f;
        p_lo = lo[u] < p_lo ? lo[u] : p_lo;
        p_hi = hi[u] > p_hi ? hi[u] : p_hi;
    }
    const size_t row_bytes = (size_t)d * (f16 ? 2 : 4);
    const int64_t pf = n_q <= ATTN_PREFETCH_MAX_Q && p_hi >= p_lo &&
                               (size_t)(p_hi - p_lo + 1) * row_bytes >= ATTN_PREFETCH_MIN_SPAN_BYTES
                           ? (int64_t)((ATTN_PREFETCH_BYTES + row_bytes - 1) / row_bytes)
                           : 0;
    /* Chunks on a grid of absolute positions (multiples of ATTN_CHUNK), rows read
     * from p_lo on: a query's chunks, its running max and sums then depend on its
     * own [lo, hi] only, never on the other queries of the call, so one query gives
     * the same bits in any batch (a prefill continuing a held prefix = one prefill). */
    for (int64_t p0 = p_lo - p_lo % ATTN_CHUNK; p0 <= p_hi; p0 += ATTN_CHUNK) {
        const int64_t nb = p_hi + 1 - p0 < ATTN_CHUNK ? p_hi + 1 - p0 : ATTN_CHUNK;
        const int64_t j0 = p_lo > p0 ? p_lo - p0 : 0;   /* rows before it: weight 0, not read */
#define SCORES(UB) attn_scores(UB, qs + u * d, d, k, p0 + j0, nb - j0, s + u * ATTN_CHUNK + j0, f16, \
                           u == 0 ? pf : 0)
        ATTN_BY_FOUR(SCORES)
#undef SCORES
        for (int64_t u = 0; u < n_q; u++)
            attn_softmax_step(s + u * ATTN_CHUNK, p0, nb, lo[u], hi[u], &m[u], &l[u], acc + u * d, d,
                              softcap);
#define ACCUMULATE(UB) \
    attn_accumulate(UB, acc + u * d, d, v, p0 + j0, nb - j0, s + u * ATTN_CHUNK + j0, f16, u == 0 ? pf : 0)
        ATTN_BY_FOUR(ACCUMULATE)
#undef ACCUMULATE
    }
    for (int64_t u = 0; u < n_q; u++) {
        if (ml) { ml[2 * u] = m[u]; ml[2 * u + 1] = l[u]; }
        const float inv = l[u] > 0.0f ? 1.0f / l[u] : 0.0f;
        for (int64_t i = 0; i < d; i++) out[u][i] = acc[u * d + i] * inv;
    }
}

static void OPS_NAME(attn_block_f32)(int64_t n_q, const float *const *q, float *const *out,
                                     const int64_t *lo, const int64_t *hi, const void *k,
                                     const void *v, int64_t d, float scale, float softcap, float *ml) {
    attn_block(n_q, q, out, lo, hi, k, v, d, scale, softcap, ml, 0);
}

static void OPS_NAME(attn_block_f16)(int64_t n_q, const float *const *q, float *const *out,
                                     const int64_t *lo, const int64_t *hi, const void *k,
                                     const void *v, int64_t d, float scale, float softcap, float *ml) {
    attn_block(n_q, q, out, lo, hi, k, v, d, scale, softcap, ml, 1);
}

/* The one-query entries: rows [0, n_pos) of k and v. */
static void OPS_NAME(attn_f32)(const float *q, const void *k, const void *v, int64_t n_pos,
                               int64_t d, float scale, float *out) {
    const int64_t lo = 0, hi = n_pos - 1;
    attn_block(1, &q, &out, &lo, &hi, k, v, d, scale, 0.0f, NULL, 0);
}

static void OPS_NAME(attn_f16)(const float *q, const void *k, const void *v, int64_t n_pos,
                               int64_t d, float scale, float *out) {
    const int64_t lo = 0, hi = n_pos - 1;
    attn_block(1, &q, &out, &lo, &hi, k, v, d, scale, 0.0f, NULL, 1);
}
