/* matmul.c: mat-vec and mat-mul for any weight type, through the dispatch table.
 *
 * As in ggml, the activations are quantized once into the weight type's
 * vec_dot_type, then threads claim disjoint chunks of weight rows.  Each thread
 * walks its rows in the outer loop and a tile of tokens in the inner loop, so a
 * weight row is read from memory once (prefetched a few rows ahead) and reused from
 * L1 for every token of the tile, while the tile's activations stay in L1/L2.  Rows
 * go four at a time when the table has a vec_dot_4 kernel, and four rows x four
 * tokens with vec_dot_4x4, which unpacks each weight block once for four tokens;
 * a vec_dot_4xn kernel, when there is one, takes four rows against any 1..4
 * tokens, so small batches (2, 3, or a remainder) share the weight blocks too,
 * and a vec_dot_rx8 kernel takes every whole group of eight tokens with the tokens
 * in the vector lanes (one multiply for eight tokens).
 */
#include "infer_kernels.h"

#include <stdlib.h>
#include <string.h>

/* Rows per scheduling unit: 16 f32 outputs = one 64-byte cache line, so threads never
 * write the same line of a matvec output. */
#define ROW_ALIGN 16
/* Tokens per tile: 32 Q8_0 activation rows of 576 values take ~20 KB. */
#define TOKEN_TILE 32
/* Below this many multiply-adds per call the hand-off to the pool costs more than it
 * saves; the caller does the whole product. */
#define PARALLEL_MIN_WORK (1 << 16)

size_t infer_activation_row_bytes(int type, int64_t cols) {
    const int vdt = infer_type_vec_dot_type(type);
    if (vdt < 0 || cols < 0) return 0;
    const int bs = infer_type_block_size(vdt);
    if (bs <= 0 || cols % bs) return 0;
    return (size_t)(cols / bs) * infer_type_block_bytes(vdt);
}

typedef struct {
    infer_quantize_fn quantize;
    const float *x;
    void *xq;
    int64_t n_tokens, cols;
    size_t xq_row_bytes;
} quantize_task;

static void quantize_worker(void *arg, int ith, int nth) {
    const quantize_task *q = (const quantize_task *)arg;
    const int64_t per = (q->n_tokens + nth - 1) / nth;
    const int64_t t0 = per * ith, t1 = t0 + per < q->n_tokens ? t0 + per : q->n_tokens;
    for (int64_t t = t0; t < t1; t++)
        q->quantize(q->x + t * q->cols, (uint8_t *)q->xq + (size_t)t * q->xq_row_bytes, q->cols);
}

int infer_quantize_activations(int type, const float *x, int64_t n_tokens, int64_t cols, void *xq) {
    const infer_kernel_table *k = infer_kernels();
    const int vdt = infer_type_vec_dot_type(type);
    const size_t xq_row_bytes = infer_activation_row_bytes(type, cols);
    if (vdt < 0 || xq_row_bytes == 0 || !k->quantize[vdt] || n_tokens < 0) return -1;
    quantize_task q = {k->quantize[vdt], x, xq, n_tokens, cols, xq_row_bytes};
    if (n_tokens > 1 && n_tokens * cols >= PARALLEL_MIN_WORK)
        infer_parallel_run(quantize_worker, &q);
    else
        quantize_worker(&q, 0, 1);
    return 0;
}

/* Weight rows are streamed once per call; the hardware prefetcher alone leaves
 * most of the DRAM bandwidth unused with four interleaved row streams, so rows
 * INFER_PREFETCH_ROWS ahead are requested explicitly (by the 4xn and rx8 kernels
 * themselves, spread over their blocks: see INFER_PREFETCH_ROWS). */

#if defined(_MSC_VER)
#include <intrin.h>
static int64_t claim_chunk(volatile int64_t *next) { return _InterlockedExchangeAdd64(next, 1); }
#else
static int64_t claim_chunk(volatile int64_t *next) {
    return __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
}
#endif

typedef struct {
    infer_matmul_r16_fn r16;   /* a *_R16 format: its kernel is the only one */
    infer_vec_dot_fn dot;
    infer_vec_dot_4_fn dot4;   /* may be NULL */
    infer_vec_dot_4x4_fn dot4x4;   /* may be NULL */
    infer_vec_dot_4xn_fn dot4xn;   /* may be NULL; preferred to dot4 and dot4x4 */
    infer_vec_dot_rx8_fn dotrx8;   /* may be NULL; with dot4xn only */
    int dot4_prefetches;       /* dot4 requests the rows ahead itself */
    const uint8_t *w;
    size_t row_bytes;
    int64_t rows, cols;
    const uint8_t *xq;
    size_t xq_row_bytes;
    int64_t n_tokens;
    float *out;                /* n_tokens rows of out_stride floats */
    int64_t out_stride;
    int64_t chunk_rows;        /* a multiple of ROW_ALIGN */
    volatile int64_t next_chunk;
} matmul_task;

/* Rows [r0, r1) for every token, a tile of tokens at a time. */
static void matmul_rows(const matmul_task *m, int64_t r0, int64_t r1) {
    if (m->r16) {   /* r0 and r1 are multiples of 16 (checked by the callers) */
        for (int64_t t0 = 0; t0 < m->n_tokens; t0 += TOKEN_TILE)
            m->r16(m->cols, m->w + (size_t)r0 * m->row_bytes, (r1 - r0) / 16, m->xq + (size_t)t0 * m->xq_row_bytes,
                   m->xq_row_bytes, m->n_tokens - t0 < TOKEN_TILE ? m->n_tokens - t0 : TOKEN_TILE,
                   m->out + t0 * m->out_stride + r0, (size_t)m->out_stride);
        return;
    }
    for (int64_t t0 = 0; t0 < m->n_tokens; t0 += TOKEN_TILE) {
        const int64_t t1 = t0 + TOKEN_TILE < m->n_tokens ? t0 + TOKEN_TILE : m->n_tokens;
        int64_t r = r0;
        if (m->dot4xn) {
            /* whole groups of 8 tokens over the rows that go four at a time */
            int64_t t_rest = t0;
            if (m->dotrx8 && m->cols <= INFER_DOT_RX8_MAX_N)
                for (; t_rest + 8 <= t1; t_rest += 8)
                    m->dotrx8(m->cols, m->w + (size_t)r0 * m->row_bytes, m->row_bytes, (r1 - r0) / 4 * 4,
                              m->xq + (size_t)t_rest * m->xq_row_bytes, m->xq_row_bytes,
                              m->out + t_rest * m->out_stride + r0, (size_t)m->out_stride);
            for (; r + 4 <= r1; r += 4) {
                const uint8_t *w = m->w + (size_t)r * m->row_bytes;
                for (int64_t t = t_rest; t < t1; t += INFER_DOT_4XN_MAX) {
                    const int n_tok = t1 - t < INFER_DOT_4XN_MAX ? (int)(t1 - t) : INFER_DOT_4XN_MAX;
                    m->dot4xn(m->cols, w, m->row_bytes, m->xq + (size_t)t * m->xq_row_bytes,
                              m->xq_row_bytes, n_tok, m->out + t * m->out_stride + r,
                              (size_t)m->out_stride);
                }
            }
        } else if (m->dot4) {
            for (; r + 4 <= r1; r += 4) {
                const uint8_t *w = m->w + (size_t)r * m->row_bytes;
                if (t0 == 0 && !m->dot4_prefetches && r + INFER_PREFETCH_ROWS + 4 <= m->rows)
                    infer_prefetch_lines(w + INFER_PREFETCH_ROWS * m->row_bytes, 4 * m->row_bytes);
                int64_t t = t0;
                if (m->dot4x4)
                    for (; t + 4 <= t1; t += 4)
                        m->dot4x4(m->cols, w, m->row_bytes, m->xq + (size_t)t * m->xq_row_bytes,
                                  m->xq_row_bytes, m->out + t * m->out_stride + r,
                                  (size_t)m->out_stride);
                for (; t < t1; t++) {
                    float o[4];
                    m->dot4(m->cols, w, m->row_bytes, m->xq + (size_t)t * m->xq_row_bytes, o);
                    float *dst = m->out + t * m->out_stride + r;
                    dst[0] = o[0], dst[1] = o[1], dst[2] = o[2], dst[3] = o[3];
                }
            }
        }
        for (; r < r1; r++) {
            const uint8_t *w = m->w + (size_t)r * m->row_bytes;
            if (t0 == 0 && r + INFER_PREFETCH_ROWS < m->rows)
                infer_prefetch_lines(w + INFER_PREFETCH_ROWS * m->row_bytes, m->row_bytes);
            for (int64_t t = t0; t < t1; t++)
                m->out[t * m->out_stride + r] = m->dot(m->cols, w, m->xq + (size_t)t * m->xq_row_bytes);
        }
    }
}

/* Threads claim chunks of rows until none is left, so a thread that starts late (a
 * busy machine) just takes fewer. */
static void matmul_worker(void *arg, int ith, int nth) {
    matmul_task *m = (matmul_task *)arg;
    (void)ith, (void)nth;
    for (;;) {
        const int64_t r0 = claim_chunk(&m->next_chunk) * m->chunk_rows;
        if (r0 >= m->rows) return;
        matmul_rows(m, r0, r0 + m->chunk_rows < m->rows ? r0 + m->chunk_rows : m->rows);
    }
}

/* A row kernel, or the group kernel of a *_R16 format. */
static int has_kernel(const infer_kernel_table *k, int type) {
    return k->vec_dot[type] != NULL || k->matmul_r16[type] != NULL;
}

int infer_matmul_q(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                   const void *xq, int64_t n_tokens, float *out) {
    const infer_kernel_table *k = infer_kernels();
    const size_t xq_row_bytes = infer_activation_row_bytes(type, cols);
    if (type < 0 || type >= INFER_TYPE_COUNT || !has_kernel(k, type) || xq_row_bytes == 0) return -1;
    if (rows < 0 || n_tokens < 0 || cols % infer_type_block_size(type)) return -1;
    if (k->matmul_r16[type] && rows % 16) return -1;
    matmul_task m = {k->matmul_r16[type], k->vec_dot[type], k->vec_dot_4[type], k->vec_dot_4x4[type], k->vec_dot_4xn[type], k->vec_dot_rx8[type],
                     k->vec_dot_4_prefetches[type],
                     (const uint8_t *)w, row_bytes, rows, cols, (const uint8_t *)xq, xq_row_bytes, n_tokens, out, rows, rows, 0};
    const int nth = rows > ROW_ALIGN && rows * cols * n_tokens >= PARALLEL_MIN_WORK
                        ? infer_get_num_threads() : 1;
    if (nth == 1) {
        matmul_rows(&m, 0, rows);
        return 0;
    }
    /* About four chunks per thread: small enough to balance a late thread, large
     * enough that claiming costs nothing. */
    const int64_t units = (rows + ROW_ALIGN - 1) / ROW_ALIGN;
    const int64_t chunks = 4 * (int64_t)nth < units ? 4 * (int64_t)nth : units;
    m.chunk_rows = (units + chunks - 1) / chunks * ROW_ALIGN;
    infer_parallel_run(matmul_worker, &m);
    return 0;
}

int infer_matmul_rows(int type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                      int64_t r1, const void *xq, int64_t n_tokens, float *out,
                      int64_t out_stride) {
    const infer_kernel_table *k = infer_kernels();
    const size_t xq_row_bytes = infer_activation_row_bytes(type, cols);
    if (type < 0 || type >= INFER_TYPE_COUNT || !has_kernel(k, type) || xq_row_bytes == 0) return -1;
    if (r0 < 0 || r1 < r0 || n_tokens < 0 || cols % infer_type_block_size(type)) return -1;
    if (k->matmul_r16[type] && (r0 % 16 || r1 % 16)) return -1;
    matmul_task m = {k->matmul_r16[type], k->vec_dot[type], k->vec_dot_4[type], k->vec_dot_4x4[type], k->vec_dot_4xn[type], k->vec_dot_rx8[type],
                     k->vec_dot_4_prefetches[type],
                     (const uint8_t *)w, row_bytes, r1, cols, (const uint8_t *)xq, xq_row_bytes, n_tokens, out, out_stride, r1, 0};
    matmul_rows(&m, r0, r1);
    return 0;
}

int infer_matvec_q(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                   const void *xq, float *out) {
    return infer_matmul_q(type, w, row_bytes, rows, cols, xq, 1, out);
}

int infer_matmul(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                 const float *x, int64_t n_tokens, float *out, void *scratch) {
    const int vdt = infer_type_vec_dot_type(type);
    const size_t xq_row_bytes = infer_activation_row_bytes(type, cols);
    if (vdt < 0 || xq_row_bytes == 0) return -1;
    if (vdt == INFER_TYPE_F32)  /* float activations are used as they are */
        return infer_matmul_q(type, w, row_bytes, rows, cols, x, n_tokens, out);
    void *buf = scratch ? scratch : malloc(xq_row_bytes * (size_t)(n_tokens > 0 ? n_tokens : 1));
    if (!buf) return -2;
    int rc = infer_quantize_activations(type, x, n_tokens, cols, buf);
    if (rc == 0) rc = infer_matmul_q(type, w, row_bytes, rows, cols, buf, n_tokens, out);
    if (!scratch) free(buf);
    return rc;
}

int infer_matvec(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                 const float *x, float *out, void *scratch) {
    return infer_matmul(type, w, row_bytes, rows, cols, x, 1, out, scratch);
}
