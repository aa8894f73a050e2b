/* gemma3_block.c: a whole decode step of a Gemma 3 model (see gemma3_block.h).
 *
 * The same computation as Gemma3Context._block in infer/variants/gemma3.py for
 * one token.  One thread-pool run per token: thread 0 walks the layers and does
 * the small serial steps (embed, norms, q/k norms and RoPE, quantizing an input
 * once for all the matrices that read it, residual adds); matrix-vector products
 * (by rows) and attention (by KV head) are jobs whose chunks every thread claims
 * (the team of decode_team.h, shared with llama_block.c: a helper that is not
 * running on a busy machine is never waited for).
 */
#include "gemma3_block.h"
#include "decode_team.h"
#include "decode_jobs.h"

#include <math.h>
#include <string.h>

typedef struct {
    const infer_gemma3_model *m;
    infer_gemma3_state *s;
    const infer_kernel_table *kt;
    infer_attn_block_fn attn;
    int token, pos;
    infer_decode_job staging;   /* the leader sets up the next job here */
} decode_ctx;

/* KV head c and its query heads: RMSNorm with q_norm and NEOX RoPE on copies of
 * the queries (a chunk may be computed twice, so it leaves s->q alone), then
 * attention over the layer's window, each cache row read once for all. */
static void attention_chunk(const decode_ctx *d, const infer_decode_job *j, int64_t c, float *scratch) {
    const infer_gemma3_model *m = d->m;
    const infer_gemma3_state *s = d->s;
    const infer_gemma3_layer *L = &m->layers[j->layer];
    const int hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
    const size_t kv_elt = s->kv_f16 ? sizeof(infer_half) : sizeof(float);
    const size_t layer_off = (size_t)j->layer * m->n_kv_heads * s->n_ctx * hd;
    const size_t head_off = (layer_off + (size_t)c * s->n_ctx * hd) * kv_elt;
    const int64_t lo_pos = L->window > 0 && d->pos - L->window + 1 > 0 ? d->pos - L->window + 1 : 0;
    float *qcopy = scratch + (size_t)group * hd;
    const float *qs[INFER_ATTN_MAX_Q];
    float *outs[INFER_ATTN_MAX_Q];
    int64_t lo[INFER_ATTN_MAX_Q], hi[INFER_ATTN_MAX_Q];
    int per_call = INFER_ATTN_MAX_Q;
    if (per_call * hd > INFER_ATTN_MAX_QD) per_call = INFER_ATTN_MAX_QD / hd;
    for (int g0 = 0; g0 < group; g0 += per_call) {
        int n_q = group - g0 < per_call ? group - g0 : per_call;
        for (int u = 0; u < n_q; u++) {
            const size_t g = (size_t)(g0 + u) * hd;
            float *q = qcopy + g;
            d->kt->rmsnorm(s->q + (size_t)c * group * hd + g, L->q_norm, q, hd, m->rms_eps);
            d->kt->rope_neox(q, s->rope_cos, s->rope_sin, hd);
            qs[u] = q;
            outs[u] = scratch + g;
            lo[u] = lo_pos;
            hi[u] = d->pos;
        }
        d->attn(n_q, qs, outs, lo, hi, (const char *)s->k_cache + head_off,
                (const char *)s->v_cache + head_off, hd, m->attn_scale, 0.0f, NULL);
    }
}

static void compute_chunk(void *ctx, const void *job, int64_t c, float *scratch) {
    const decode_ctx *d = (const decode_ctx *)ctx;
    const infer_decode_job *j = (const infer_decode_job *)job;
    if (j->kind == INFER_JOB_MATVEC) {
        int64_t lo, hi;
        for (int i = 0; i < j->n_mats; i++)
            if (infer_decode_chunk_part(j, c, i, &lo, &hi)) {
                infer_decode_dot_rows(j->mats[i], j->inputs[i], scratch, lo, hi);
                scratch += hi - lo;
            }
    } else if (j->kind == INFER_JOB_GATE_UP) {
        /* rows [r0, r1) of gate and of up, then GeGLU on them */
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > d->m->ffn_dim) r1 = d->m->ffn_dim;
        infer_decode_dot_rows(j->mats[0], j->inputs[0], scratch, r0, r1);
        infer_decode_dot_rows(j->mats[1], j->inputs[1], scratch + (r1 - r0), r0, r1);
        d->kt->gelu_mul(scratch, scratch + (r1 - r0), scratch, r1 - r0);
    } else {
        attention_chunk(d, j, c, scratch);
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
static void decode_leader(void *ctx, infer_decode_team *team) {
    decode_ctx *d = (decode_ctx *)ctx;
    const int nth = team->nth;
    const infer_gemma3_model *m = d->m;
    infer_gemma3_state *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
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
        infer_decode_quantize_inputs(kt, j, s->h, m->dim, 3, s->xq);
        infer_team_job(team, j, infer_decode_matvec_job(j, 3, nth));

        for (int h = 0; h < m->n_kv_heads; h++) {
            float *k = s->k + (size_t)h * hd;
            kt->rmsnorm(k, L->k_norm, k, hd, m->rms_eps);
            kt->rope_neox(k, s->rope_cos, s->rope_sin, hd);
        }
        /* kv_store converts to F16 with the table's (vectorised, bit-exact) quantize */
        const int kv_type = s->kv_f16 ? INFER_TYPE_F16 : INFER_TYPE_F32;
        infer_kv_store(s->k, (char *)s->k_cache + layer_off, kv_type, 1, m->n_kv_heads, hd, s->n_ctx, d->pos);
        infer_kv_store(s->v, (char *)s->v_cache + layer_off, kv_type, 1, m->n_kv_heads, hd, s->n_ctx, d->pos);
        j->kind = INFER_JOB_ATTENTION;
        j->outs[0] = s->att;
        j->chunk_rows = (int64_t)(m->n_heads / m->n_kv_heads) * hd;   /* floats per KV head */   /* q norm and RoPE happen in the attention chunks */
        j->layer = l;
        infer_team_job(team, j, m->n_kv_heads);

        j->mats[0] = &L->wo; j->outs[0] = s->h;
        infer_decode_quantize_inputs(kt, j, s->att, q_dim, 1, s->xq);
        infer_team_job(team, j, infer_decode_matvec_job(j, 1, nth));
        kt->rmsnorm(s->h, L->post_attn_norm, s->h, m->dim, m->rms_eps);
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
        kt->rmsnorm(s->h, L->post_ffw_norm, s->h, m->dim, m->rms_eps);
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

int infer_gemma3_decode(const infer_gemma3_model *m, infer_gemma3_state *s, int token, int pos) {
    if (token < 0 || token >= m->vocab_size || pos < 0 || pos >= s->n_ctx) return -2;
    if (m->head_dim < 2 || m->head_dim % 2 || m->head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        m->n_kv_heads < 1 || m->n_heads % m->n_kv_heads ||
        2 * (m->n_heads / m->n_kv_heads) * m->head_dim > INFER_TEAM_SCRATCH_FLOATS ||
        m->n_kv_heads > INFER_TEAM_MAX_CHUNKS)
        return -2;
    const infer_kernel_table *kt = infer_kernels();
    if (!kt->rmsnorm || !kt->gelu_mul || !kt->add || !kt->scale || !kt->rope_neox ||
        !(s->kv_f16 ? kt->attn_block_f16 : kt->attn_block_f32) || m->embd.type < 0 ||
        m->embd.type >= INFER_TYPE_COUNT || !kt->dequantize[m->embd.type] || !matrix_ok(kt, &m->output))
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_gemma3_layer *L = &m->layers[l];
        const infer_decode_matrix *all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++)
            if (!matrix_ok(kt, all[i])) return -1;
        if (L->window < 0) return -2;
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
