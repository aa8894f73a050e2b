/* llama_block.c: a whole decode step of a Llama-family model (see llama_block.h).
 *
 * One thread-pool run per token.  Thread 0 walks the layers and does the small
 * serial steps (embed, norms, quantizing an input once for all the matrices that
 * read it, residual adds); matrix-vector products (by rows) and attention (by
 * head) are jobs whose chunks all threads take (see "the team" below).
 */
#include "llama_block.h"

#include <math.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
static void yield_cpu(void) { SwitchToThread(); }
#else
#include <sched.h>
static void yield_cpu(void) { sched_yield(); }
#endif

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ __volatile__("yield"); }
#elif defined(_M_ARM64)
static inline void cpu_relax(void) { YieldProcessor(); }
#else
static inline void cpu_relax(void) {}
#endif

/* Atomics: GCC/Clang builtins, or MSVC's Interlocked* (full barriers, so at least
 * as strong as the orderings asked for). */
#if defined(_MSC_VER) && !defined(__clang__)
static uint64_t load_u64(volatile uint64_t *p) { return (uint64_t)InterlockedCompareExchange64((volatile LONG64 *)p, 0, 0); }
static uint32_t load_u32(volatile uint32_t *p) { return (uint32_t)InterlockedCompareExchange((volatile LONG *)p, 0, 0); }
static int64_t load_i64(volatile int64_t *p) { return InterlockedCompareExchange64((volatile LONG64 *)p, 0, 0); }
static int load_int(volatile int *p) { return (int)InterlockedCompareExchange((volatile LONG *)p, 0, 0); }
static void store_u64(volatile uint64_t *p, uint64_t v) { InterlockedExchange64((volatile LONG64 *)p, (LONG64)v); }
static void store_u32(volatile uint32_t *p, uint32_t v) { InterlockedExchange((volatile LONG *)p, (LONG)v); }
static void store_i64(volatile int64_t *p, int64_t v) { InterlockedExchange64((volatile LONG64 *)p, v); }
static void store_int(volatile int *p, int v) { InterlockedExchange((volatile LONG *)p, v); }
static int cas_u64(volatile uint64_t *p, uint64_t *expected, uint64_t desired) {
    uint64_t old = (uint64_t)InterlockedCompareExchange64((volatile LONG64 *)p, (LONG64)desired, (LONG64)*expected);
    if (old == *expected) return 1;
    *expected = old;
    return 0;
}
static int cas_u32(volatile uint32_t *p, uint32_t *expected, uint32_t desired) {
    uint32_t old = (uint32_t)InterlockedCompareExchange((volatile LONG *)p, (LONG)desired, (LONG)*expected);
    if (old == *expected) return 1;
    *expected = old;
    return 0;
}
static void add_i64(volatile int64_t *p, int64_t v) { InterlockedExchangeAdd64((volatile LONG64 *)p, v); }
static void add_u32(volatile uint32_t *p, uint32_t v) { InterlockedExchangeAdd((volatile LONG *)p, (LONG)v); }
static void fence_acquire(void) { MemoryBarrier(); }
#else
static uint64_t load_u64(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static uint32_t load_u32(volatile uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static int64_t load_i64(volatile int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static int load_int(volatile int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store_u64(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static void store_u32(volatile uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static void store_i64(volatile int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static void store_int(volatile int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static int cas_u64(volatile uint64_t *p, uint64_t *expected, uint64_t desired) {
    return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static int cas_u32(volatile uint32_t *p, uint32_t *expected, uint32_t desired) {
    return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static void add_i64(volatile int64_t *p, int64_t v) { __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL); }
static void add_u32(volatile uint32_t *p, uint32_t v) { __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL); }
static void fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
#endif

size_t infer_llama_act_bytes(int64_t n) {
    /* The widest activation formats: f32 (4 bytes/value) > Q8_1 (36/32) > Q8_K (292/256). */
    return (size_t)n * 4 + 64;
}

/* ---- the team ----------------------------------------------------------------
 * Thread 0 (the leader) walks the model and does the small serial steps.  Each
 * parallel step is a job of numbered chunks (row ranges, a KV head's attention)
 * that the leader publishes; every thread, the leader included, claims chunks
 * with one compare-and-swap on a ticket, computes a chunk into its own scratch
 * and then commits it to the shared outputs, first come first served.  On a busy
 * machine a helper may be descheduled holding a chunk for milliseconds; the
 * leader does not wait for it: after a short grace it computes that chunk too,
 * and whichever copy commits first is kept (both are the same numbers: every
 * chunk is computed by the same kernel calls whoever runs it, so results do not
 * depend on the thread count or on who won). */
enum { JOB_MATVEC, JOB_GATE_UP, JOB_ATTENTION };

#define MAX_CHUNKS 512
#define MAX_CHUNK_ROWS 4096
#define SCRATCH_FLOATS (2 * MAX_CHUNK_ROWS)   /* also >= 2 * group * head_dim, checked */

typedef struct {
    int kind;
    int n_mats;
    const infer_llama_matrix *mats[3];
    const void *inputs[3];
    float *outs[3];
    int64_t rows, chunk_rows;   /* matvec: all rows of the matrices, rows per chunk */
    int layer;                  /* attention */
    uint32_t gen;               /* the ticket generation it was published under */
} job_t;

typedef struct {
    const infer_llama_model *m;
    infer_llama_state *s;
    const infer_kernel_table *kt;
    infer_attn_block_fn attn;
    int token, pos;
    job_t staging;              /* the leader sets up the next job here */
    job_t job;                  /* the published job; helpers copy it (seqlock) */
    volatile uint32_t job_seq;  /* odd while the leader rewrites `job` */
    /* ticket = generation (16 bits) | chunk count (24) | next chunk (24) */
    volatile uint64_t ticket;
    volatile int64_t done;
    volatile int finished;
    /* per chunk: generation << 2 | 0 (open), 1 (being committed), 2 (committed) */
    volatile uint32_t state[MAX_CHUNKS];
} decode_team;

#define T_NEXT(t) ((int64_t)((t) & 0xFFFFFF))
#define T_TOTAL(t) ((int64_t)(((t) >> 24) & 0xFFFFFF))
#define T_GEN(t) ((uint32_t)((t) >> 48))

static void compute_chunk(decode_team *d, const job_t *j, int64_t c, float *scratch);
static void copy_chunk(decode_team *d, const job_t *j, int64_t c, const float *scratch);

/* Commit chunk c of job `gen` from scratch unless another thread did; 1 if we did. */
static int commit(decode_team *d, const job_t *j, uint32_t gen, int64_t c, const float *scratch) {
    uint32_t open = gen << 2;
    if (!cas_u32(&d->state[c], &open, (gen << 2) | 1))
        return 0;
    copy_chunk(d, j, c, scratch);
    store_u32(&d->state[c], (gen << 2) | 2);
    add_i64(&d->done, 1);
    return 1;
}

/* Claim and run chunks of the published job until none are left.  The job is
 * copied under the seqlock; a helper that finds it changed (it was descheduled
 * long enough for the leader to move on) drops its chunk, which the leader
 * then computes itself. */
static void work(decode_team *d, float *scratch) {
    job_t local;
    uint64_t t = load_u64(&d->ticket);
    while (T_NEXT(t) < T_TOTAL(t)) {
        if (!cas_u64(&d->ticket, &t, t + 1))
            continue;
        const uint32_t seq = load_u32(&d->job_seq);
        memcpy(&local, (const void *)&d->job, sizeof local);
        fence_acquire();
        if (!(seq & 1) && seq == load_u32(&d->job_seq) &&
            local.gen == T_GEN(t)) {
            compute_chunk(d, &local, T_NEXT(t), scratch);
            commit(d, &local, T_GEN(t), T_NEXT(t), scratch);
        }
        t = load_u64(&d->ticket);
    }
}

static void backoff(int *spins) {
    if (++*spins < 2048) cpu_relax();
    else yield_cpu();
}

/* Leader: publish the staged job as `total` chunks, help, then make sure all are
 * committed. */
static void run_job(decode_team *d, int64_t total, int nth, float *scratch) {
    if (nth == 1) {
        for (int64_t c = 0; c < total; c++) {
            compute_chunk(d, &d->staging, c, scratch);
            copy_chunk(d, &d->staging, c, scratch);
        }
        return;
    }
    const uint32_t gen = (T_GEN(d->ticket) + 1) & 0xFFFF;
    add_u32(&d->job_seq, 1);  /* odd: being rewritten */
    d->job = d->staging;
    d->job.gen = gen;
    add_u32(&d->job_seq, 1);
    for (int64_t c = 0; c < total; c++) store_u32(&d->state[c], gen << 2);
    store_i64(&d->done, 0);
    store_u64(&d->ticket, ((uint64_t)gen << 48) | ((uint64_t)total << 24));
    work(d, scratch);
    int spins = 0;
    while (load_i64(&d->done) < total) {
        /* Grace for a running helper to finish its chunk (tens of microseconds).
         * Pure spinning: yielding here would hand the core to another process
         * for a whole time slice. */
        if (spins++ < 1024) {
            cpu_relax();
            continue;
        }
        for (int64_t c = 0; c < total; c++) {
            if (load_u32(&d->state[c]) == gen << 2) {
                compute_chunk(d, &d->job, c, scratch);  /* its helper is not running */
                commit(d, &d->job, gen, c, scratch);
            }
        }
        /* what is left is being copied by a helper right now */
        int copy_spins = 0;
        while (load_i64(&d->done) < total) backoff(&copy_spins);
    }
}

static int64_t matvec_job(decode_team *d, int n_mats, int nth) {
    job_t *j = &d->staging;
    j->kind = JOB_MATVEC;
    j->n_mats = n_mats;
    j->rows = 0;
    for (int i = 0; i < n_mats; i++) j->rows += j->mats[i]->rows;
    /* >= 8 chunks per thread to balance; >= 16 rows so chunks never share an
     * output cache line; at most MAX_CHUNK_ROWS (scratch) and MAX_CHUNKS chunks */
    int64_t chunk = j->rows / (8 * nth);
    if (chunk < (j->rows + MAX_CHUNKS - 1) / MAX_CHUNKS) chunk = (j->rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (chunk > MAX_CHUNK_ROWS) chunk = MAX_CHUNK_ROWS;
    chunk = chunk < 16 ? 16 : (chunk + 15) & ~(int64_t)15;
    j->chunk_rows = chunk;
    return (j->rows + chunk - 1) / chunk;
}

/* dst[i] = row lo + i of w . x for i < hi - lo: the matmul driver's row loop
 * (four-row kernels from lo, weight rows prefetched ahead).  Chunks start on
 * multiples of 16 within matrices whose row counts are multiples of 4 (all real
 * ones), so the grouping, and each result, do not depend on the chunking. */
static void dot_rows(const infer_llama_matrix *w, const void *x, float *dst, int64_t lo, int64_t hi) {
    infer_matmul_rows(w->type, w->data + (size_t)lo * w->row_bytes, w->row_bytes, w->cols, 0,
                      hi - lo, x, 1, dst, hi - lo);
}

/* For each matrix of a matvec job, the part [lo, hi) of chunk c's rows in it. */
static int chunk_part(const job_t *j, int64_t c, int i, int64_t *lo, int64_t *hi) {
    int64_t base = 0;
    for (int k = 0; k < i; k++) base += j->mats[k]->rows;
    const int64_t r0 = c * j->chunk_rows;
    const int64_t r1 = r0 + j->chunk_rows < j->rows ? r0 + j->chunk_rows : j->rows;
    *lo = r0 > base ? r0 - base : 0;
    *hi = r1 - base < j->mats[i]->rows ? r1 - base : j->mats[i]->rows;
    return *lo < *hi;
}

static void compute_chunk(decode_team *d, const job_t *j, int64_t c, float *scratch) {
    const infer_llama_model *m = d->m;
    infer_llama_state *s = d->s;
    if (j->kind == JOB_MATVEC) {
        int64_t lo, hi;
        for (int i = 0; i < j->n_mats; i++)
            if (chunk_part(j, c, i, &lo, &hi)) {
                dot_rows(j->mats[i], j->inputs[i], scratch, lo, hi);
                scratch += hi - lo;
            }
    } else if (j->kind == JOB_GATE_UP) {
        /* rows [r0, r1) of gate and of up, then SwiGLU on them */
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > m->ffn_dim) r1 = m->ffn_dim;
        dot_rows(j->mats[0], j->inputs[0], scratch, r0, r1);
        dot_rows(j->mats[1], j->inputs[1], scratch + (r1 - r0), r0, r1);
        d->kt->silu_mul(scratch, scratch + (r1 - r0), scratch, r1 - r0);
    } else {
        /* KV head c and its query heads: RoPE on copies of the queries, then
         * attention over positions 0..pos, each cache row read once for all */
        const int hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
        const size_t kv_elt = s->kv_f16 ? sizeof(infer_half) : sizeof(float);
        const size_t layer_off = (size_t)j->layer * m->n_kv_heads * s->n_ctx * hd;
        const size_t head_off = (layer_off + (size_t)c * s->n_ctx * hd) * kv_elt;
        float *qcopy = scratch + (size_t)group * hd;
        const float *qs[INFER_ATTN_MAX_Q];
        float *outs[INFER_ATTN_MAX_Q];
        int64_t lo[INFER_ATTN_MAX_Q], hi[INFER_ATTN_MAX_Q];
        int per_call = INFER_ATTN_MAX_Q;
        if (per_call * hd > INFER_ATTN_MAX_QD) per_call = INFER_ATTN_MAX_QD / hd;
        memcpy(qcopy, s->q + (size_t)c * group * hd, (size_t)group * hd * sizeof(float));
        for (int g0 = 0; g0 < group; g0 += per_call) {
            int n_q = group - g0 < per_call ? group - g0 : per_call;
            for (int u = 0; u < n_q; u++) {
                float *q = qcopy + (size_t)(g0 + u) * hd;
                d->kt->rope_norm(q, s->rope_cos, s->rope_sin, hd);
                qs[u] = q;
                outs[u] = scratch + (size_t)(g0 + u) * hd;
                lo[u] = 0;
                hi[u] = d->pos;
            }
            d->attn(n_q, qs, outs, lo, hi, (const char *)s->k_cache + head_off,
                    (const char *)s->v_cache + head_off, hd, 1.0f / sqrtf((float)hd), NULL);
        }
    }
}

/* The outputs of chunk c, from the scratch compute_chunk filled. */
static void copy_chunk(decode_team *d, const job_t *j, int64_t c, const float *scratch) {
    const infer_llama_model *m = d->m;
    if (j->kind == JOB_MATVEC) {
        int64_t lo, hi;
        for (int i = 0; i < j->n_mats; i++)
            if (chunk_part(j, c, i, &lo, &hi)) {
                memcpy(j->outs[i] + lo, scratch, (size_t)(hi - lo) * sizeof(float));
                scratch += hi - lo;
            }
    } else if (j->kind == JOB_GATE_UP) {
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > m->ffn_dim) r1 = m->ffn_dim;
        memcpy(d->s->gate + r0, scratch, (size_t)(r1 - r0) * sizeof(float));
    } else {
        const size_t n = (size_t)(m->n_heads / m->n_kv_heads) * m->head_dim;
        memcpy(d->s->att + (size_t)c * n, scratch, n * sizeof(float));
    }
}

/* Matrices sharing an input get one quantized copy of it per distinct input format:
 * slot k of s->xq holds the k-th distinct format in the order the matrices come. */
static void quantize_inputs(decode_team *d, const float *x, int64_t n, int n_mats) {
    job_t *j = &d->staging;
    int types[3], n_types = 0;
    for (int i = 0; i < n_mats; i++) {
        int at = j->mats[i]->act_type, slot = -1;
        for (int k = 0; k < n_types; k++)
            if (types[k] == at) slot = k;
        if (slot < 0) {
            slot = n_types++;
            types[slot] = at;
            if (at == INFER_TYPE_F32) memcpy(d->s->xq[slot], x, (size_t)n * sizeof(float));
            else d->kt->quantize[at](x, d->s->xq[slot], n);
        }
        j->inputs[i] = d->s->xq[slot];
    }
}

static void store_kv(char *cache, const float *x, int n_kv_heads, int head_dim, int64_t n_ctx,
                     int pos, int kv_f16) {
    for (int h = 0; h < n_kv_heads; h++) {
        const float *src = x + (size_t)h * head_dim;
        const size_t row = ((size_t)h * n_ctx + pos) * head_dim;
        if (kv_f16) {
            infer_half *dst = (infer_half *)cache + row;
            for (int i = 0; i < head_dim; i++) dst[i] = infer_fp32_to_fp16(src[i]);
        } else {
            memcpy((float *)cache + row, src, (size_t)head_dim * sizeof(float));
        }
    }
}

/* The leader's walk through the model (thread 0). */
static void decode_leader(decode_team *d, int nth, float *scratch) {
    const infer_llama_model *m = d->m;
    infer_llama_state *s = d->s;
    const infer_kernel_table *kt = d->kt;
    job_t *j = &d->staging;
    const int hd = m->head_dim, q_dim = m->n_heads * hd;
    const size_t kv_elt = s->kv_f16 ? sizeof(infer_half) : sizeof(float);

    kt->dequantize[m->embd.type](m->embd.data + (size_t)d->token * m->embd.row_bytes, s->x, m->dim);
    /* theta_i = pos * base^(-2i/head_dim), shared by every head and layer */
    for (int i = 0; i < hd / 2; i++) {
        double theta = (double)d->pos * pow((double)m->rope_base, -2.0 * i / hd);
        s->rope_cos[2 * i] = s->rope_cos[2 * i + 1] = (float)cos(theta);
        s->rope_sin[2 * i] = s->rope_sin[2 * i + 1] = (float)sin(theta);
    }
    for (int l = 0; l < m->n_layers; l++) {
        const infer_llama_layer *L = &m->layers[l];
        const size_t layer_off = (size_t)l * m->n_kv_heads * s->n_ctx * hd * kv_elt;

        kt->rmsnorm(s->x, L->attn_norm, s->h, m->dim, m->rms_eps);
        j->mats[0] = &L->wq; j->mats[1] = &L->wk; j->mats[2] = &L->wv;
        j->outs[0] = s->q; j->outs[1] = s->k; j->outs[2] = s->v;
        quantize_inputs(d, s->h, m->dim, 3);
        run_job(d, matvec_job(d, 3, nth), nth, scratch);

        /* GGUF "llama" layout: RoPE rotates adjacent pairs (2i, 2i+1) of each head */
        for (int h = 0; h < m->n_kv_heads; h++) kt->rope_norm(s->k + (size_t)h * hd, s->rope_cos, s->rope_sin, hd);
        store_kv((char *)s->k_cache + layer_off, s->k, m->n_kv_heads, hd, s->n_ctx, d->pos, s->kv_f16);
        store_kv((char *)s->v_cache + layer_off, s->v, m->n_kv_heads, hd, s->n_ctx, d->pos, s->kv_f16);
        j->kind = JOB_ATTENTION;
        j->layer = l;
        run_job(d, m->n_kv_heads, nth, scratch);

        j->mats[0] = &L->wo; j->outs[0] = s->h;
        quantize_inputs(d, s->att, q_dim, 1);
        run_job(d, matvec_job(d, 1, nth), nth, scratch);
        kt->add(s->x, s->h, m->dim);

        kt->rmsnorm(s->x, L->ffn_norm, s->h, m->dim, m->rms_eps);
        j->mats[0] = &L->gate; j->mats[1] = &L->up;
        j->outs[0] = s->gate; j->outs[1] = s->up;
        quantize_inputs(d, s->h, m->dim, 2);
        matvec_job(d, 1, nth);  /* chunking of one ffn_dim-row matrix */
        j->kind = JOB_GATE_UP;
        run_job(d, (m->ffn_dim + j->chunk_rows - 1) / j->chunk_rows, nth, scratch);

        j->mats[0] = &L->down; j->outs[0] = s->h;
        quantize_inputs(d, s->gate, m->ffn_dim, 1);
        run_job(d, matvec_job(d, 1, nth), nth, scratch);
        kt->add(s->x, s->h, m->dim);
    }
    kt->rmsnorm(s->x, m->output_norm, s->h, m->dim, m->rms_eps);
    j->mats[0] = &m->output; j->outs[0] = s->logits;
    quantize_inputs(d, s->h, m->dim, 1);
    run_job(d, matvec_job(d, 1, nth), nth, scratch);
}

static void decode_worker(void *arg, int ith, int nth) {
    decode_team *d = (decode_team *)arg;
    float scratch[SCRATCH_FLOATS];
    if (ith == 0) {
        decode_leader(d, nth, scratch);
        store_int(&d->finished, 1);
        return;
    }
    int spins = 0;
    while (!load_int(&d->finished)) {
        uint64_t t = load_u64(&d->ticket);
        if (T_NEXT(t) < T_TOTAL(t)) {
            work(d, scratch);
            spins = 0;
        } else {
            backoff(&spins);
        }
    }
}

static int matrix_ok(const infer_kernel_table *kt, const infer_llama_matrix *w) {
    if (w->type < 0 || w->type >= INFER_TYPE_COUNT || !kt->vec_dot[w->type]) return 0;
    if (w->act_type < 0 || w->act_type >= INFER_TYPE_COUNT) return 0;
    return w->act_type == INFER_TYPE_F32 || kt->quantize[w->act_type] != NULL;
}

int infer_llama_decode(const infer_llama_model *m, infer_llama_state *s, int token, int pos) {
    if (token < 0 || token >= m->vocab_size || pos < 0 || pos >= s->n_ctx) return -2;
    if (m->head_dim < 2 || m->head_dim % 2 || m->head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        m->n_kv_heads < 1 || m->n_heads % m->n_kv_heads ||
        2 * (m->n_heads / m->n_kv_heads) * m->head_dim > SCRATCH_FLOATS || m->n_kv_heads > MAX_CHUNKS)
        return -2;
    const infer_kernel_table *kt = infer_kernels();
    if (!kt->rmsnorm || !kt->silu_mul || !kt->add || !kt->rope_norm ||
        !(s->kv_f16 ? kt->attn_block_f16 : kt->attn_block_f32) || m->embd.type < 0 || m->embd.type >= INFER_TYPE_COUNT ||
        !kt->dequantize[m->embd.type] || !matrix_ok(kt, &m->output))
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_llama_layer *L = &m->layers[l];
        const infer_llama_matrix *all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++)
            if (!matrix_ok(kt, all[i])) return -1;
    }
    decode_team d;
    memset(&d, 0, sizeof d);
    d.m = m;
    d.s = s;
    d.kt = kt;
    d.token = token;
    d.pos = pos;
    d.attn = s->kv_f16 ? kt->attn_block_f16 : kt->attn_block_f32;
    infer_parallel_run(decode_worker, &d);
    return 0;
}
