/* gemma3_block.c: a whole decode step of a Gemma 3 model (see gemma3_block.h).
 *
 * The same computation as Gemma3Context._block in infer/variants/gemma3.py for
 * one token.  One thread-pool run per token: thread 0 walks the layers and does
 * the small serial steps (embed, norms, q/k norms and RoPE, quantizing an input
 * once for all the matrices that read it, residual adds); matrix-vector products
 * (by rows) and attention (by KV head) are jobs whose chunks every thread claims
 * (the team of llama_block.c: a compare-and-swap ticket, so a helper that is not
 * running on a busy machine is never waited for).
 */
#include "gemma3_block.h"
#include "atomics.h"

#include <math.h>
#include <string.h>

size_t infer_gemma3_act_bytes(int64_t n) {
    /* The widest activation formats: f32 (4 bytes/value) > Q8_1 (36/32) > Q8_K (292/256). */
    return (size_t)n * 4 + 64;
}

/* ---- the team (as in llama_block.c) ------------------------------------------- */
enum { JOB_MATVEC, JOB_GATE_UP, JOB_ATTENTION };

typedef struct {
    int kind;
    int n_mats;
    const infer_gemma3_matrix *mats[3];
    const void *inputs[3];
    float *outs[3];
    int64_t rows, chunk_rows;   /* matvec: all rows of the matrices, rows per chunk */
    int layer;                  /* attention */
} job_t;

typedef struct {
    const infer_gemma3_model *m;
    infer_gemma3_state *s;
    const infer_kernel_table *kt;
    infer_attn_block_fn attn;
    int token, pos;
    job_t job;
    /* ticket = generation (16 bits) | chunk count (24) | next chunk (24) */
    infer_atomic_i64 ticket;
    infer_atomic_i64 done;
    infer_atomic_i64 finished;
} decode_team;

#define T_NEXT(t) ((int64_t)((t) & 0xFFFFFF))
#define T_TOTAL(t) ((int64_t)(((t) >> 24) & 0xFFFFFF))
#define T_GEN(t) ((t) >> 48)

static void run_chunk(decode_team *d, int64_t c);

/* Claim and run chunks of the published job until none are left. */
static void work(decode_team *d) {
    uint64_t t = (uint64_t)infer_atomic_load(&d->ticket);
    while (T_NEXT(t) < T_TOTAL(t)) {
        if (infer_atomic_cas(&d->ticket, (int64_t)t, (int64_t)(t + 1))) {
            run_chunk(d, T_NEXT(t));
            infer_atomic_add(&d->done, 1);
        }
        t = (uint64_t)infer_atomic_load(&d->ticket);
    }
}

static void backoff(int *spins) {
    if (++*spins < 2048) infer_cpu_relax();
    else infer_yield_thread();
}

/* Leader: publish d->job as `total` chunks, help, wait for all of them. */
static void run_job(decode_team *d, int64_t total, int nth) {
    if (nth == 1) {
        for (int64_t c = 0; c < total; c++) run_chunk(d, c);
        return;
    }
    uint64_t gen = (T_GEN((uint64_t)infer_atomic_load(&d->ticket)) + 1) & 0xFFFF;
    infer_atomic_store(&d->done, 0);
    infer_atomic_store(&d->ticket, (int64_t)((gen << 48) | ((uint64_t)total << 24)));
    work(d);
    int spins = 0;
    while (infer_atomic_load(&d->done) < total) backoff(&spins);
}

static int64_t matvec_job(decode_team *d, int n_mats, int nth) {
    job_t *j = &d->job;
    j->kind = JOB_MATVEC;
    j->n_mats = n_mats;
    j->rows = 0;
    for (int i = 0; i < n_mats; i++) j->rows += j->mats[i]->rows;
    /* >= 8 chunks per thread to balance; >= 16 rows so chunks never share an
     * output cache line */
    int64_t chunk = j->rows / (8 * nth);
    chunk = chunk < 16 ? 16 : (chunk + 15) & ~(int64_t)15;
    j->chunk_rows = chunk;
    return (j->rows + chunk - 1) / chunk;
}

/* Rows [lo, hi) of matrix i of the job (the four-row kernels, with prefetching). */
static void matrix_rows(const job_t *j, int i, int64_t lo, int64_t hi) {
    const infer_gemma3_matrix *w = j->mats[i];
    if (lo < hi)
        infer_matmul_rows(w->type, w->data, w->row_bytes, w->cols, lo, hi, j->inputs[i], 1,
                          j->outs[i], 0);
}

/* Query head h: RMSNorm with q_norm, NEOX RoPE with the layer's angles. */
static void attention_chunk(decode_team *d, int64_t c) {
    const infer_gemma3_model *m = d->m;
    infer_gemma3_state *s = d->s;
    const infer_gemma3_layer *L = &m->layers[d->job.layer];
    const int hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
    const size_t kv_elt = s->kv_f16 ? sizeof(infer_half) : sizeof(float);
    const size_t layer_off = (size_t)d->job.layer * m->n_kv_heads * s->n_ctx * hd;
    const size_t head_off = (layer_off + (size_t)c * s->n_ctx * hd) * kv_elt;
    const int64_t lo_pos = L->window > 0 && d->pos - L->window + 1 > 0 ? d->pos - L->window + 1 : 0;
    const float *qs[INFER_ATTN_MAX_Q];
    float *outs[INFER_ATTN_MAX_Q];
    int64_t lo[INFER_ATTN_MAX_Q], hi[INFER_ATTN_MAX_Q];
    int per_call = INFER_ATTN_MAX_Q;
    if (per_call * hd > INFER_ATTN_MAX_QD) per_call = INFER_ATTN_MAX_QD / hd;
    for (int g0 = 0; g0 < group; g0 += per_call) {
        int n_q = group - g0 < per_call ? group - g0 : per_call;
        for (int u = 0; u < n_q; u++) {
            int h = (int)c * group + g0 + u;
            float *q = s->q + (size_t)h * hd;
            d->kt->rmsnorm(q, L->q_norm, q, hd, m->rms_eps);
            d->kt->rope_neox(q, s->rope_cos, s->rope_sin, hd);
            qs[u] = q;
            outs[u] = s->att + (size_t)h * hd;
            lo[u] = lo_pos;
            hi[u] = d->pos;
        }
        d->attn(n_q, qs, outs, lo, hi, (const char *)s->k_cache + head_off,
                (const char *)s->v_cache + head_off, hd, m->attn_scale, NULL);
    }
}

static void run_chunk(decode_team *d, int64_t c) {
    const job_t *j = &d->job;
    if (j->kind == JOB_MATVEC) {
        /* rows [r0, r1) of the matrices laid end to end */
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows, base = 0;
        if (r1 > j->rows) r1 = j->rows;
        for (int i = 0; i < j->n_mats; i++) {
            int64_t n = j->mats[i]->rows;
            matrix_rows(j, i, r0 > base ? r0 - base : 0, r1 - base < n ? r1 - base : n);
            base += n;
        }
    } else if (j->kind == JOB_GATE_UP) {
        /* rows [r0, r1) of gate and of up, then GeGLU on them */
        const int64_t ffn = d->m->ffn_dim;
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > ffn) r1 = ffn;
        matrix_rows(j, 0, r0, r1);
        matrix_rows(j, 1, r0, r1);
        d->kt->gelu_mul(d->s->gate + r0, d->s->up + r0, d->s->gate + r0, r1 - r0);
    } else {
        attention_chunk(d, c);
    }
}

/* Matrices sharing an input get one quantized copy of it per distinct input format:
 * slot k of s->xq holds the k-th distinct format in the order the matrices come. */
static void quantize_inputs(decode_team *d, const float *x, int64_t n, int n_mats) {
    job_t *j = &d->job;
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

/* NEOX RoPE angles of position pos: theta_i = pos * scale * base^(-2i/head_dim). */
static void rope_angles(infer_gemma3_state *s, int pos, int hd, float base, float scale) {
    for (int i = 0; i < hd / 2; i++) {
        double theta = (double)pos * scale * pow((double)base, -2.0 * i / hd);
        s->rope_cos[i] = (float)cos(theta);
        s->rope_sin[i] = (float)sin(theta);
    }
}

/* The leader's walk through the model (thread 0). */
static void decode_leader(decode_team *d, int nth) {
    const infer_gemma3_model *m = d->m;
    infer_gemma3_state *s = d->s;
    const infer_kernel_table *kt = d->kt;
    job_t *j = &d->job;
    const int hd = m->head_dim, q_dim = m->n_heads * hd;
    const size_t kv_elt = s->kv_f16 ? sizeof(infer_half) : sizeof(float);
    float angles_base = 0.0f, angles_scale = 0.0f;   /* which angles rope_cos/sin hold */

    kt->dequantize[m->embd.type](m->embd.data + (size_t)d->token * m->embd.row_bytes, s->x, m->dim);
    kt->scale(s->x, m->embd_scale, m->dim);
    for (int l = 0; l < m->n_layers; l++) {
        const infer_gemma3_layer *L = &m->layers[l];
        const size_t layer_off = (size_t)l * m->n_kv_heads * s->n_ctx * hd * kv_elt;
        if (L->rope_base != angles_base || L->rope_scale != angles_scale) {
            rope_angles(s, d->pos, hd, L->rope_base, L->rope_scale);
            angles_base = L->rope_base;
            angles_scale = L->rope_scale;
        }

        kt->rmsnorm(s->x, L->attn_norm, s->h, m->dim, m->rms_eps);
        j->mats[0] = &L->wq; j->mats[1] = &L->wk; j->mats[2] = &L->wv;
        j->outs[0] = s->q; j->outs[1] = s->k; j->outs[2] = s->v;
        quantize_inputs(d, s->h, m->dim, 3);
        run_job(d, matvec_job(d, 3, nth), nth);

        for (int h = 0; h < m->n_kv_heads; h++) {
            float *k = s->k + (size_t)h * hd;
            kt->rmsnorm(k, L->k_norm, k, hd, m->rms_eps);
            kt->rope_neox(k, s->rope_cos, s->rope_sin, hd);
        }
        /* kv_store converts to F16 with the table's (vectorised, bit-exact) quantize */
        const int kv_type = s->kv_f16 ? INFER_TYPE_F16 : INFER_TYPE_F32;
        infer_kv_store(s->k, (char *)s->k_cache + layer_off, kv_type, 1, m->n_kv_heads, hd, s->n_ctx, d->pos);
        infer_kv_store(s->v, (char *)s->v_cache + layer_off, kv_type, 1, m->n_kv_heads, hd, s->n_ctx, d->pos);
        j->kind = JOB_ATTENTION;   /* q norm and RoPE happen in the attention chunks */
        j->layer = l;
        run_job(d, m->n_kv_heads, nth);

        j->mats[0] = &L->wo; j->outs[0] = s->h;
        quantize_inputs(d, s->att, q_dim, 1);
        run_job(d, matvec_job(d, 1, nth), nth);
        kt->rmsnorm(s->h, L->post_attn_norm, s->h, m->dim, m->rms_eps);
        kt->add(s->x, s->h, m->dim);

        kt->rmsnorm(s->x, L->ffn_norm, s->h, m->dim, m->rms_eps);
        j->mats[0] = &L->gate; j->mats[1] = &L->up;
        j->outs[0] = s->gate; j->outs[1] = s->up;
        quantize_inputs(d, s->h, m->dim, 2);
        matvec_job(d, 1, nth);  /* chunking of one ffn_dim-row matrix */
        j->kind = JOB_GATE_UP;
        run_job(d, (m->ffn_dim + j->chunk_rows - 1) / j->chunk_rows, nth);

        j->mats[0] = &L->down; j->outs[0] = s->h;
        quantize_inputs(d, s->gate, m->ffn_dim, 1);
        run_job(d, matvec_job(d, 1, nth), nth);
        kt->rmsnorm(s->h, L->post_ffw_norm, s->h, m->dim, m->rms_eps);
        kt->add(s->x, s->h, m->dim);
    }
    kt->rmsnorm(s->x, m->output_norm, s->h, m->dim, m->rms_eps);
    j->mats[0] = &m->output; j->outs[0] = s->logits;
    quantize_inputs(d, s->h, m->dim, 1);
    run_job(d, matvec_job(d, 1, nth), nth);
}

static void decode_worker(void *arg, int ith, int nth) {
    decode_team *d = (decode_team *)arg;
    if (ith == 0) {
        decode_leader(d, nth);
        infer_atomic_store(&d->finished, 1);
        return;
    }
    int spins = 0;
    while (!infer_atomic_load(&d->finished)) {
        uint64_t t = (uint64_t)infer_atomic_load(&d->ticket);
        if (T_NEXT(t) < T_TOTAL(t)) {
            work(d);
            spins = 0;
        } else {
            backoff(&spins);
        }
    }
}

static int matrix_ok(const infer_kernel_table *kt, const infer_gemma3_matrix *w) {
    if (w->type < 0 || w->type >= INFER_TYPE_COUNT || !kt->vec_dot[w->type]) return 0;
    if (w->act_type < 0 || w->act_type >= INFER_TYPE_COUNT) return 0;
    return w->act_type == INFER_TYPE_F32 || kt->quantize[w->act_type] != NULL;
}

int infer_gemma3_decode(const infer_gemma3_model *m, infer_gemma3_state *s, int token, int pos) {
    if (token < 0 || token >= m->vocab_size || pos < 0 || pos >= s->n_ctx) return -2;
    if (m->head_dim < 2 || m->head_dim % 2 || m->head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        m->n_kv_heads < 1 || m->n_heads % m->n_kv_heads)
        return -2;
    const infer_kernel_table *kt = infer_kernels();
    if (!kt->rmsnorm || !kt->gelu_mul || !kt->add || !kt->scale || !kt->rope_neox ||
        !(s->kv_f16 ? kt->attn_block_f16 : kt->attn_block_f32) || m->embd.type < 0 ||
        m->embd.type >= INFER_TYPE_COUNT || !kt->dequantize[m->embd.type] || !matrix_ok(kt, &m->output))
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_gemma3_layer *L = &m->layers[l];
        const infer_gemma3_matrix *all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++)
            if (!matrix_ok(kt, all[i])) return -1;
        if (L->window < 0) return -2;
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
