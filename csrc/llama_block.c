/* llama_block.c: a whole decode step of a Llama-family model (see llama_block.h).
 *
 * One thread-pool run per token.  Thread 0 walks the layers and does the small
 * serial steps (embed, norms, quantizing an input once for all the matrices that
 * read it, residual adds); matrix-vector products (by rows) and attention (by
 * head) are jobs whose chunks all threads take (the team of decode_team.h).
 */
#include "llama_block.h"
#include "decode_team.h"
#include "decode_jobs.h"

#include <math.h>
#include <string.h>

typedef struct {
    const infer_llama_model *m;
    infer_llama_state *s;
    const infer_kernel_table *kt;
    infer_attn_block_fn attn;
    int token, pos;
    infer_decode_job staging;   /* the leader sets up the next job here */
} decode_ctx;

static void compute_chunk(void *ctx, const void *job, int64_t c, float *scratch) {
    const decode_ctx *d = (const decode_ctx *)ctx;
    const infer_decode_job *j = (const infer_decode_job *)job;
    const infer_llama_model *m = d->m;
    infer_llama_state *s = d->s;
    if (j->kind == INFER_JOB_MATVEC) {
        int64_t lo, hi;
        for (int i = 0; i < j->n_mats; i++)
            if (infer_decode_chunk_part(j, c, i, &lo, &hi)) {
                infer_decode_dot_rows(j->mats[i], j->inputs[i], scratch, lo, hi);
                scratch += hi - lo;
            }
    } else if (j->kind == INFER_JOB_GATE_UP) {
        /* rows [r0, r1) of gate and of up, then SwiGLU on them */
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > m->ffn_dim) r1 = m->ffn_dim;
        infer_decode_dot_rows(j->mats[0], j->inputs[0], scratch, r0, r1);
        infer_decode_dot_rows(j->mats[1], j->inputs[1], scratch + (r1 - r0), r0, r1);
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
                    (const char *)s->v_cache + head_off, hd, 1.0f / sqrtf((float)hd), 0.0f, NULL);
        }
    }
}

/* The leader's walk through the model (thread 0). */
static void decode_leader(void *ctx, infer_decode_team *team) {
    decode_ctx *d = (decode_ctx *)ctx;
    const int nth = team->nth;
    const infer_llama_model *m = d->m;
    infer_llama_state *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
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
        infer_decode_quantize_inputs(kt, j, s->h, m->dim, 3, s->xq);
        infer_team_job(team, j, infer_decode_matvec_job(j, 3, nth));

        /* GGUF "llama" layout: RoPE rotates adjacent pairs (2i, 2i+1) of each head */
        for (int h = 0; h < m->n_kv_heads; h++) kt->rope_norm(s->k + (size_t)h * hd, s->rope_cos, s->rope_sin, hd);
        const int kv_type = s->kv_f16 ? INFER_TYPE_F16 : INFER_TYPE_F32;
        infer_kv_store(s->k, (char *)s->k_cache + layer_off, kv_type, 1, m->n_kv_heads, hd, s->n_ctx, d->pos);
        infer_kv_store(s->v, (char *)s->v_cache + layer_off, kv_type, 1, m->n_kv_heads, hd, s->n_ctx, d->pos);
        j->kind = INFER_JOB_ATTENTION;
        j->outs[0] = s->att;
        j->chunk_rows = (int64_t)(m->n_heads / m->n_kv_heads) * hd;   /* floats per KV head */
        j->layer = l;
        infer_team_job(team, j, m->n_kv_heads);

        j->mats[0] = &L->wo; j->outs[0] = s->h;
        infer_decode_quantize_inputs(kt, j, s->att, q_dim, 1, s->xq);
        infer_team_job(team, j, infer_decode_matvec_job(j, 1, nth));
        kt->add(s->x, s->h, m->dim);

        kt->rmsnorm(s->x, L->ffn_norm, s->h, m->dim, m->rms_eps);
        j->mats[0] = &L->gate; j->mats[1] = &L->up;
        j->outs[0] = s->gate; j->outs[1] = s->up;
        infer_decode_quantize_inputs(kt, j, s->h, m->dim, 2, s->xq);
        infer_decode_matvec_job(j, 1, nth);  /* chunking of one ffn_dim-row matrix */
        j->kind = INFER_JOB_GATE_UP;
        infer_team_job(team, j, (m->ffn_dim + j->chunk_rows - 1) / j->chunk_rows);

        j->mats[0] = &L->down; j->outs[0] = s->h;
        infer_decode_quantize_inputs(kt, j, s->gate, m->ffn_dim, 1, s->xq);
        infer_team_job(team, j, infer_decode_matvec_job(j, 1, nth));
        kt->add(s->x, s->h, m->dim);
    }
    kt->rmsnorm(s->x, m->output_norm, s->h, m->dim, m->rms_eps);
    j->mats[0] = &m->output; j->outs[0] = s->logits;
    infer_decode_quantize_inputs(kt, j, s->h, m->dim, 1, s->xq);
    infer_team_job(team, j, infer_decode_matvec_job(j, 1, nth));
}

static int matrix_ok(const infer_kernel_table *kt, const infer_decode_matrix *w) {
    if (w->type < 0 || w->type >= INFER_TYPE_COUNT || !kt->vec_dot[w->type]) return 0;
    if (w->act_type < 0 || w->act_type >= INFER_TYPE_COUNT) return 0;
    return w->act_type == INFER_TYPE_F32 || kt->quantize[w->act_type] != NULL;
}

int infer_llama_decode(const infer_llama_model *m, infer_llama_state *s, int token, int pos) {
    if (token < 0 || token >= m->vocab_size || pos < 0 || pos >= s->n_ctx) return -2;
    if (m->head_dim < 2 || m->head_dim % 2 || m->head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        m->n_kv_heads < 1 || m->n_heads % m->n_kv_heads ||
        2 * (m->n_heads / m->n_kv_heads) * m->head_dim > INFER_TEAM_SCRATCH_FLOATS ||
        m->n_kv_heads > INFER_TEAM_MAX_CHUNKS)
        return -2;
    const infer_kernel_table *kt = infer_kernels();
    if (!kt->rmsnorm || !kt->silu_mul || !kt->add || !kt->rope_norm ||
        !(s->kv_f16 ? kt->attn_block_f16 : kt->attn_block_f32) || m->embd.type < 0 || m->embd.type >= INFER_TYPE_COUNT ||
        !kt->dequantize[m->embd.type] || !matrix_ok(kt, &m->output))
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_llama_layer *L = &m->layers[l];
        const infer_decode_matrix *all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++)
            if (!matrix_ok(kt, all[i])) return -1;
    }
    decode_ctx d;
    memset(&d, 0, sizeof d);
    d.m = m;
    d.s = s;
    d.kt = kt;
    d.token = token;
    d.pos = pos;
    d.attn = s->kv_f16 ? kt->attn_block_f16 : kt->attn_block_f32;
    infer_decode_team team;
    infer_team_run(&team, &d, decode_leader, compute_chunk, infer_decode_copy_chunk, sizeof(infer_decode_job));
    return 0;
}
