/* transformer_block.c: a whole decode step of a transformer, for a batch of
 * sequences (see transformer_block.h).
 *
 * The same computation as TransformerContext._block in
 * infer/variants/transformer.py for one token per sequence.  One thread-pool run
 * per step: thread 0 (the leader) walks the layers and does the small serial
 * steps (embed, norms, biases, k norm and RoPE, the cache stores, quantizing an
 * input once for all the matrices that read it, residual adds); matrix products
 * (by rows, every row against the B inputs; the gate/up chunks also quantize the
 * down product's input) and attention (by sequence and KV head) are jobs whose
 * chunks every thread claims (the team of decode_team.h: a helper that is not
 * running on a busy machine is never waited for).
 */
#include "transformer_block.h"
#include "decode_team.h"
#include "decode_jobs.h"
#include "deltanet.h"
#include "mamba2.h"

#include <math.h>
#include <string.h>

#define ROPE_SLOTS 2   /* angle sets kept per step (Gemma: local and global layers) */
/* Flash-decoding: a sequence's attention over at least ATTN_SPLIT_MIN positions is
 * split in ATTN_SPLITS position ranges, each a chunk of its own, then merged by
 * their softmax maxima and sums, so that the threads share the work even when
 * there are fewer KV heads than threads (SmolLM2: 3 KV heads on 2 threads).  The
 * split depends only on the sequence's own span, never on the batch or the thread
 * count, so results do not either. */
#define ATTN_SPLITS 2
#define ATTN_SPLIT_MIN 512

typedef struct {
    const infer_block_model *m;
    const infer_block_scratch *s;
    const infer_block_seq *seqs;
    int n_seqs;
    const infer_kernel_table *kt;
    /* which frequencies each slot of s->rope_cs holds (NULL: none yet) */
    const double *slot_freq[ROPE_SLOTS];
    int slot_layout[ROPE_SLOTS], slot_dims[ROPE_SLOTS];
    float slot_factor[ROPE_SLOTS];
    int next_slot;
    int attn_splits;            /* ATTN_SPLITS if the partial results fit s->gate and s->up, else 1 */
    const infer_decode_matrix *input_ready;   /* s->xq[2] holds its input (the last job's chunks wrote it) */
    infer_decode_matrix expert_gate, expert_up, expert_down;   /* one expert's rows of a layer's stacks */
    infer_decode_job staging;   /* the leader sets up the next job here */
    const infer_block_layer *ffn_layer;   /* the layer whose FFN the gate/up job computes */
} decode_ctx;

static infer_rope_fn rope_kernel(const infer_kernel_table *kt, int layout) {
    return layout == INFER_ROPE_NEOX ? kt->rope_neox : kt->rope_norm;
}

/* Sequence b's cos and sin (head_dim each) in slot `slot` of s->rope_cs. */
static float *angles_of(const decode_ctx *d, int slot, int b) {
    const int hd = d->m->head_dim;
    return d->s->rope_cs + ((size_t)slot * d->s->max_batch + b) * 2 * hd;
}

/* The slot holding layer L's angles for every sequence, computed if no slot does:
 * theta_i = pos * inv_freq[i] in double (as infer_rope), laid out for the kernel
 * (NORM: pair i at 2i and 2i+1; NEOX: at i). */
static int rope_slot(decode_ctx *d, const infer_block_layer *L) {
    for (int k = 0; k < ROPE_SLOTS; k++)
        if (d->slot_freq[k] == L->rope_inv_freq && d->slot_layout[k] == L->rope &&
            d->slot_dims[k] == L->rope_dims && d->slot_factor[k] == L->rope_attn_factor)
            return k;
    const int k = d->next_slot;
    d->next_slot = (k + 1) % ROPE_SLOTS;
    d->slot_freq[k] = L->rope_inv_freq;
    d->slot_layout[k] = L->rope;
    d->slot_dims[k] = L->rope_dims;
    d->slot_factor[k] = L->rope_attn_factor;
    const int hd = d->m->head_dim;
    for (int b = 0; b < d->n_seqs; b++) {
        float *cs = angles_of(d, k, b), *sn = cs + hd;
        for (int i = 0; i < L->rope_dims / 2; i++) {
            const double theta = (double)d->seqs[b].pos * L->rope_inv_freq[i];
            const float c = (float)(cos(theta) * L->rope_attn_factor);
            const float s = (float)(sin(theta) * L->rope_attn_factor);
            if (L->rope == INFER_ROPE_NEOX) {
                cs[i] = c;
                sn[i] = s;
            } else {
                cs[2 * i] = cs[2 * i + 1] = c;
                sn[2 * i] = sn[2 * i + 1] = s;
            }
        }
    }
    return k;
}

/* Sequence b's KV head h and its query heads: q norm and RoPE on copies of the
 * queries (a chunk may be computed twice, so it leaves s->q alone), then
 * attention over the layer's window, each cache row read once for all. */
/* Positions [lo, hi] of sequence sq's span in layer L, for part `part` of its split. */
static int attention_range(const decode_ctx *d, const infer_block_layer *L, const infer_block_seq *sq,
                           int part, int64_t *lo, int64_t *hi) {
    const int64_t first = L->window > 0 && sq->pos - L->window + 1 > 0 ? sq->pos - L->window + 1 : 0;
    const int64_t span = sq->pos - first + 1;
    if (span < ATTN_SPLIT_MIN || d->attn_splits == 1) {
        *lo = first, *hi = sq->pos;
        return part == 0;
    }
    const int64_t per = (span + d->attn_splits - 1) / d->attn_splits;
    *lo = first + part * per;
    *hi = *lo + per - 1 < sq->pos ? *lo + per - 1 : sq->pos;
    return *lo <= *hi;
}

/* The attention temperature of position pos (1: none), in double and rounded to
 * float as llama.cpp's llm_graph_input_attn_temp; it multiplies q, so the scores'
 * scale here (one position per sequence in a decode step). */
static float query_temperature(const infer_block_model *m, int pos) {
    if (m->attn_temp_scale == 0.0f) return 1.0f;
    return (float)(log(floor((double)pos / m->attn_temp_floor) + 1.0) * m->attn_temp_scale + 1.0);
}

static void attention_chunk(const decode_ctx *d, const infer_decode_job *j, int64_t c, float *scratch) {
    const infer_block_model *m = d->m;
    const infer_block_layer *L = &m->layers[j->layer];
    const int part = (int)(c % d->attn_splits);
    c /= d->attn_splits;
    const int n_kv = L->n_kv_heads, hd = L->head_dim, group = m->n_heads / L->n_kv_heads;
    const int b = (int)(c / n_kv), kvh = (int)(c % n_kv);
    const infer_block_seq *sq = &d->seqs[b];
    /* scratch: the group's outputs, then (max, sum) per query for the merge */
    float *ml = scratch + (size_t)group * hd;
    const size_t kv_elt = sq->kv_f16 ? sizeof(infer_half) : sizeof(float);
    const size_t layer_off = (size_t)L->kv_row * sq->n_ctx * m->kv_row_width;
    const size_t head_off = (layer_off + (size_t)kvh * sq->n_ctx * hd) * kv_elt;
    int64_t lo_pos, hi_pos;
    if (!attention_range(d, L, sq, part, &lo_pos, &hi_pos)) {   /* an empty part: weight 0 */
        for (int u = 0; u < group; u++) ml[2 * u] = -INFINITY, ml[2 * u + 1] = 0.0f;
        memset(scratch, 0, (size_t)group * hd * sizeof(float));
        return;
    }
    const float *qsrc = d->s->q + (size_t)b * m->n_heads * hd + (size_t)kvh * group * hd;
    const int angles = m->head_dim;   /* the angle slots' stride: the largest head */
    const float *cs = j->rope_cs ? j->rope_cs + (size_t)b * 2 * angles : NULL;
    const infer_attn_block_fn attn = sq->kv_f16 ? d->kt->attn_block_f16 : d->kt->attn_block_f32;
    const float score_scale = m->attn_scale * query_temperature(m, sq->pos);
    float *qcopy = ml + 2 * group;
    const float *qs[INFER_ATTN_MAX_Q];
    float *outs[INFER_ATTN_MAX_Q];
    int64_t lo[INFER_ATTN_MAX_Q], hi[INFER_ATTN_MAX_Q];
    int per_call = INFER_ATTN_MAX_Q;
    if (per_call * hd > INFER_ATTN_MAX_QD) per_call = INFER_ATTN_MAX_QD / hd;
    /* the query copies share the scratch with the group's outputs and (max, sum) pairs:
     * Gemma 4's full layers (8 queries of 512 per KV head) leave room for 7 at a time */
    const int64_t room = (INFER_TEAM_SCRATCH_FLOATS - (int64_t)group * (hd + 2)) / hd;
    if (per_call > room) per_call = (int)room;
    for (int g0 = 0; g0 < group; g0 += per_call) {
        const int n_q = group - g0 < per_call ? group - g0 : per_call;
        for (int u = 0; u < n_q; u++) {
            const size_t g = (size_t)(g0 + u) * hd;
            float *q = qcopy + (size_t)u * hd;   /* this call's queries only: see room above */
            const int norm_q = L->q_norm && !m->qk_norm_whole;
            if (norm_q && !m->qk_norm_after_rope) d->kt->rmsnorm(qsrc + g, L->q_norm, q, hd, m->rms_eps);
            else memcpy(q, qsrc + g, (size_t)hd * sizeof(float));
            if (cs) rope_kernel(d->kt, L->rope)(q, cs, cs + angles, L->rope_dims);
            if (norm_q && m->qk_norm_after_rope) d->kt->rmsnorm(q, L->q_norm, q, hd, m->rms_eps);
            qs[u] = q;
            outs[u] = scratch + g;
            lo[u] = lo_pos;
            hi[u] = hi_pos;
        }
        attn(n_q, qs, outs, lo, hi, (const char *)sq->k_cache + head_off,
             (const char *)sq->v_cache + head_off, hd, score_scale, m->attn_softcap, ml + 2 * g0);
    }
}

/* ---- gated DeltaNet layers ------------------------------------------------------- */
/* Token b's rows of s->dn: mixed (conv_dim), conv (conv_dim: q | k | v after the conv
 * and SiLU), z (value_dim), out (value_dim), g and beta (v_heads each), each region
 * packed over the batch (out is the ssm_out product's input). */
typedef struct {
    float *mixed, *conv, *z, *out, *g, *beta;
} deltanet_rows;

static int64_t deltanet_conv_dim(const infer_block_model *m) {
    return 2 * (int64_t)m->dn_k_heads * m->dn_d_state + (int64_t)m->dn_v_heads * m->dn_d_state;
}

int64_t infer_block_deltanet_floats(const infer_block_model *m) {
    if (!m->n_deltanet_layers) return 0;
    return 2 * deltanet_conv_dim(m) + 2 * (int64_t)m->dn_v_heads * m->dn_d_state + 2 * (int64_t)m->dn_v_heads;
}

static deltanet_rows deltanet_rows_of(const decode_ctx *d, int b) {
    const infer_block_model *m = d->m;
    const size_t B = (size_t)d->s->max_batch, cd = (size_t)deltanet_conv_dim(m);
    const size_t vd = (size_t)m->dn_v_heads * m->dn_d_state, nv = (size_t)m->dn_v_heads;
    float *base = d->s->dn;
    deltanet_rows r;
    r.mixed = base + b * cd;
    r.conv = base + B * cd + b * cd;
    r.z = base + 2 * B * cd + b * vd;
    r.out = base + 2 * B * cd + B * vd + b * vd;
    r.g = base + 2 * B * cd + 2 * B * vd + b * nv;
    r.beta = base + 2 * B * cd + 2 * B * vd + B * nv + b * nv;
    return r;
}

/* Chunk c of a recurrence job: its share of the (token, value head) pairs, each
 * advancing that head's state in place by one token (deltanet.c's head loop).
 * Run from the commit, so exactly once (a state of d x d floats does not fit the
 * scratch a pure compute would need).  The cost: the leader cannot redo such a
 * chunk, so a helper descheduled while it runs one makes the leader wait for it. */
static void deltanet_chunk(const decode_ctx *d, const infer_decode_job *j, int64_t c) {
    const infer_block_model *m = d->m;
    const infer_block_layer *L = &m->layers[j->layer];
    const int64_t nv = m->dn_v_heads, dd = m->dn_d_state, key = (int64_t)m->dn_k_heads * dd;
    const int64_t items = (int64_t)d->n_seqs * nv, n_chunks = j->row_end;
    const int64_t lo = c * items / n_chunks, hi = (c + 1) * items / n_chunks;
    const infer_delta_net_head_fn head = infer_delta_net_head_active();
    float delta[INFER_DELTA_NET_MAX_STATE], acc[INFER_DELTA_NET_MAX_STATE];
    for (int64_t item = lo; item < hi; item++) {
        const int b = (int)(item / nv);
        const deltanet_rows r = deltanet_rows_of(d, b);
        infer_delta_net_job job;
        job.q = r.conv;
        job.k = r.conv + key;
        job.v = r.conv + 2 * key;
        job.g = r.g;
        job.beta = r.beta;
        job.state = d->seqs[b].ssm_state + (size_t)L->dn_index * nv * dd * dd;
        job.out = r.out;
        job.n_tokens = 1;
        job.n_k_heads = m->dn_k_heads;
        job.n_v_heads = nv;
        job.d = dd;
        job.scale = (float)(1.0 / sqrt((double)dd));
        head(&job, item % nv, delta, acc);
    }
}

/* ---- Mamba2 layers ----------------------------------------------------------------- */
/* Token b's rows of s->m2: in (m2_in_dim: z | xBC | dt, dt softplus'd in place), conv
 * (m2_conv_dim: xBC after the conv and SiLU), y (m2_d_inner), each region packed over
 * the batch (y is the ssm_out product's input). */
typedef struct {
    float *in, *conv, *y;
} mamba2_rows;

static int64_t mamba2_conv_dim(const infer_block_model *m) {
    return (int64_t)m->m2_d_inner + 2 * (int64_t)m->m2_n_groups * m->m2_d_state;
}

static int64_t mamba2_in_dim(const infer_block_model *m) {
    return (int64_t)m->m2_d_inner + mamba2_conv_dim(m) + m->m2_n_heads;
}

int64_t infer_block_mamba2_floats(const infer_block_model *m) {
    if (!m->n_mamba2_layers) return 0;
    return mamba2_in_dim(m) + mamba2_conv_dim(m) + m->m2_d_inner;
}

static mamba2_rows mamba2_rows_of(const decode_ctx *d, int b) {
    const infer_block_model *m = d->m;
    const size_t B = (size_t)d->s->max_batch, in = (size_t)mamba2_in_dim(m), cd = (size_t)mamba2_conv_dim(m);
    mamba2_rows r;
    r.in = d->s->m2 + b * in;
    r.conv = d->s->m2 + B * in + b * cd;
    r.y = d->s->m2 + B * (in + cd) + b * (size_t)m->m2_d_inner;
    return r;
}

/* Chunk c of a scan job: its share of the (token, head) pairs, each advancing that
 * head's state in place by one token (mamba2.c's head function).  Run from the
 * commit, so exactly once, as deltanet_chunk and for the same reason. */
static void mamba2_chunk(const decode_ctx *d, const infer_decode_job *j, int64_t c) {
    const infer_block_model *m = d->m;
    const infer_block_layer *L = &m->layers[j->layer];
    const int64_t nh = m->m2_n_heads, hd = m->m2_d_inner / nh, ds = m->m2_d_state;
    const int64_t items = (int64_t)d->n_seqs * nh, n_chunks = j->row_end;
    const int64_t lo = c * items / n_chunks, hi = (c + 1) * items / n_chunks;
    const infer_mamba2_head_fn head = infer_mamba2_head_active();
    for (int64_t item = lo; item < hi; item++) {
        const int b = (int)(item / nh);
        const mamba2_rows r = mamba2_rows_of(d, b);
        infer_mamba2_job job;
        job.xbc = r.conv;
        job.dt = r.in + m->m2_d_inner + mamba2_conv_dim(m);
        job.a = L->ssm_a;
        job.d_skip = L->ssm_d;
        job.state = d->seqs[b].ssm_state + (size_t)L->dn_index * nh * hd * ds;
        job.y = r.y;
        job.n_tokens = 1;
        job.n_heads = nh;
        job.head_dim = hd;
        job.d_state = ds;
        job.n_groups = m->m2_n_groups;
        head(&job, item % nh);
    }
}

static void compute_chunk(void *ctx, const void *job, int64_t c, float *scratch) {
    const decode_ctx *d = (const decode_ctx *)ctx;
    const infer_decode_job *j = (const infer_decode_job *)job;
    const infer_block_model *m = d->m;
    if (j->kind == INFER_JOB_ATTENTION) {
        attention_chunk(d, j, c, scratch);
    } else if (j->kind == INFER_JOB_DELTANET || j->kind == INFER_JOB_MAMBA2) {
        return;   /* the recurrence updates the state in place: its commit runs it, once */
    } else if (j->kind == INFER_JOB_GATE_UP) {
        /* rows [lo, hi) of gate and of up for every token, then the GLU on them */
        int64_t lo, hi;
        if (!infer_decode_chunk_part(j, c, 0, &lo, &hi)) return;
        const int64_t n = (hi - lo) * j->n_tokens;
        if (m->ffn_relu_sqr || m->ffn_xielu || m->ffn_gelu) {   /* no gate: up [+ its bias] */
            infer_decode_dot_rows(j->mats[1], j->inputs[1], j->n_tokens, scratch, lo, hi);
            for (int t = 0; d->ffn_layer->ffn_up_b && t < j->n_tokens; t++)
                d->kt->add(scratch + t * (hi - lo), d->ffn_layer->ffn_up_b + lo, hi - lo);
        }
        if (m->ffn_relu_sqr) {   /* relu(up)^2 */
            for (int64_t i = 0; i < n; i++) scratch[i] = scratch[i] > 0.0f ? scratch[i] * scratch[i] : 0.0f;
            return;
        }
        if (m->ffn_gelu) {   /* gelu(up): the GeGLU kernel's GELU, x sigmoid(2z), in scalar float */
            const float c = 0.7978845608028654f;   /* sqrt(2/pi) */
            for (int64_t i = 0; i < n; i++) {
                const float x = scratch[i];
                scratch[i] = x / (1.0f + expf(-2.0f * c * (x + 0.044715f * x * x * x)));
            }
            return;
        }
        if (m->ffn_xielu) {   /* xielu(up), ggml's op_xielu in float */
            const infer_block_layer *L = d->ffn_layer;
            const float an = L->xielu_alpha_n, ap = L->xielu_alpha_p, beta = L->xielu_beta, eps = L->xielu_eps;
            for (int64_t i = 0; i < n; i++) {
                const float u = scratch[i];
                scratch[i] = u > 0.0f ? ap * u * u + beta * u : (expm1f(fminf(u, eps)) - u) * an + beta * u;
            }
            return;
        }
        infer_decode_dot_rows(j->mats[0], j->inputs[0], j->n_tokens, scratch, lo, hi);
        infer_decode_dot_rows(j->mats[1], j->inputs[1], j->n_tokens, scratch + n, lo, hi);
        for (int t = 0; j->gate_bias && t < j->n_tokens; t++) {   /* an expert's biases (gpt-oss) */
            d->kt->add(scratch + t * (hi - lo), j->gate_bias + lo, hi - lo);
            d->kt->add(scratch + n + t * (hi - lo), j->up_bias + lo, hi - lo);
        }
        (m->swiglu_oai ? infer_swiglu_oai : m->gelu ? d->kt->gelu_mul : d->kt->silu_mul)(scratch, scratch + n,
                                                                                       scratch, n);
    } else {
        const int64_t n = infer_decode_matmul_chunk(j, c, scratch);
        if (j->kind == INFER_JOB_HEAD) {
            int64_t lo, hi;
            if (m->output_b && infer_decode_chunk_part(j, c, 0, &lo, &hi))
                for (int t = 0; t < j->n_tokens; t++) d->kt->add(scratch + t * (hi - lo), m->output_b + lo, hi - lo);
            if (m->logit_scale != 1.0f) d->kt->scale(scratch, m->logit_scale, n);
            if (m->final_softcap > 0.0f) {
                const float cap = m->final_softcap;
                for (int64_t i = 0; i < n; i++) scratch[i] = cap * tanhf(scratch[i] / cap);
            }
        }
    }
}

static void copy_chunk(void *ctx, const void *job, int64_t c, const float *scratch) {
    const decode_ctx *d = (const decode_ctx *)ctx;
    const infer_decode_job *j = (const infer_decode_job *)job;
    int64_t lo, hi;
    if (j->kind == INFER_JOB_DELTANET) {
        deltanet_chunk(d, j, c);
    } else if (j->kind == INFER_JOB_MAMBA2) {
        mamba2_chunk(d, j, c);
    } else if (j->kind == INFER_JOB_ATTENTION) {
        const int64_t n_out = j->chunk_rows, n_ml = 2 * (d->m->n_heads / d->m->layers[j->layer].n_kv_heads);
        memcpy(j->outs[0] + (size_t)c * n_out, scratch, (size_t)n_out * sizeof(float));
        memcpy(j->outs[1] + (size_t)c * n_ml, scratch + n_out, (size_t)n_ml * sizeof(float));
    } else if (j->kind == INFER_JOB_GATE_UP && j->quant_type >= 0) {
        /* whole blocks of the down product's input, token by token (the blocks are
         * quantized independently: the same bytes as the whole rows at once) */
        if (!infer_decode_chunk_part(j, c, 0, &lo, &hi)) return;
        const int qt = j->quant_type;
        const size_t at = (size_t)(lo / infer_type_block_size(qt)) * infer_type_block_bytes(qt);
        for (int t = 0; t < j->n_tokens; t++)
            d->kt->quantize[qt](scratch + t * (hi - lo), j->quant_out + t * j->quant_row_bytes + at, hi - lo);
    } else if (j->kind != INFER_JOB_HEAD) {
        infer_decode_copy_chunk(ctx, job, c, scratch);
    } else if (infer_decode_chunk_part(j, c, 0, &lo, &hi)) {
        /* each sequence's logits are its own buffer */
        for (int t = 0; t < j->n_tokens; t++)
            memcpy(d->seqs[t].logits + lo, scratch + t * (hi - lo), (size_t)(hi - lo) * sizeof(float));
    }
}

/* rows of B tokens: row b of a buffer with `width` floats per token */
#define ROW(buf, b, width) ((buf) + (size_t)(b) * (size_t)(width))

/* x_b += post_norm(h_b) * residual_scale for every token: the end of a block half. */
static void residual(const decode_ctx *d, const float *post_norm) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    for (int b = 0; b < d->n_seqs; b++) {
        float *h = ROW(s->h, b, m->dim);
        if (post_norm) d->kt->rmsnorm(h, post_norm, h, m->dim, m->rms_eps);
        if (m->residual_scale != 1.0f) d->kt->scale(h, m->residual_scale, m->dim);
        d->kt->add(ROW(s->x, b, m->dim), h, m->dim);
    }
}

/* Set j to multiply the B rows at x (n values each) by its first n_mats
 * matrices (already in j->mats) and run it on the team.  A gate/up job's chunks
 * quantize their output for `feeds` (the down matrix) as they finish, in parallel,
 * when they hold whole blocks of its input format, and the down job that follows
 * reads that input instead of having the leader quantize s->gate alone (B = 8 on
 * SmolLM2: about half the leader's quantizing). */
static void run_matrix_job_of(decode_ctx *d, infer_decode_team *team, int kind, const float *x, int64_t n,
                              int n_mats, const infer_decode_matrix *feeds, int B) {
    infer_decode_job *j = &d->staging;
    if (n_mats == 1 && d->input_ready == j->mats[0]) j->inputs[0] = d->s->xq[2];
    else infer_decode_quantize_inputs(d->kt, j, x, n, B, n_mats, d->s->xq);   /* slots 0 and 1 */
    d->input_ready = NULL;
    const int gate_up = kind == INFER_JOB_GATE_UP;
    /* a gate/up chunk holds the gate and the up rows of every token */
    infer_decode_matrix_job(j, kind, gate_up ? 1 : n_mats, B, team->nth, (gate_up ? 2 : 1) * (int64_t)B);
    j->quant_type = -1;
    if (gate_up && feeds && feeds->act_type != INFER_TYPE_F32 && d->kt->quantize[feeds->act_type]) {
        const int64_t qb = infer_type_block_size(feeds->act_type);
        if (qb > 0 && j->chunk_rows % qb == 0 && feeds->cols % qb == 0) {
            j->quant_type = feeds->act_type;
            j->quant_out = d->s->xq[2];
            j->quant_row_bytes = (size_t)(feeds->cols / qb) * infer_type_block_bytes(feeds->act_type);
        }
    }
    infer_decode_run_rows(team, j);
    if (j->quant_type >= 0) d->input_ready = feeds;
}

/* run_matrix_job_of for the batch's B rows. */
static void run_matrix_job(decode_ctx *d, infer_decode_team *team, int kind, const float *x, int64_t n,
                           int n_mats, const infer_decode_matrix *feeds) {
    run_matrix_job_of(d, team, kind, x, n, n_mats, feeds, d->n_seqs);
}

/* Rows [e * rows, (e + 1) * rows) of a stacked matrix: expert e's. */
static void expert_rows(infer_decode_matrix *dst, const infer_decode_matrix *stack, int e, int64_t rows) {
    *dst = *stack;
    dst->data = stack->data + (size_t)e * (size_t)rows * stack->row_bytes;
    dst->rows = rows;
}

/* Token b's experts and their weights from its router logits (llama.cpp's
 * build_moe_ffn): probabilities in double (softmax, or each logit's sigmoid), the
 * n_used with the largest probability + selection bias (without a bias: the
 * largest logits, the same order), the lower index first among equals as a
 * stable sort; weights = their probabilities, divided by their sum (clamped at
 * F16's smallest normal) if expert_norm, times expert_scale.  softmax_weight
 * gating (gpt-oss) takes the largest logits and softmaxes the chosen ones alone. */
static double expert_prob(const infer_block_model *m, double logit, double mx, double sum) {
    return m->expert_gating == INFER_GATING_SIGMOID ? 1.0 / (1.0 + exp(-logit)) : exp(logit - mx) / sum;
}

static void route_token(const infer_block_model *m, const float *bias, const float *logits, int *pick,
                        float *weight) {
    const int n = m->n_experts, k = m->n_experts_used;
    double mx = -INFINITY, sum = 1.0, chosen = 0.0, p[INFER_BLOCK_MAX_EXPERTS_USED];
    if (m->expert_gating != INFER_GATING_SIGMOID) {
        for (int e = 0; e < n; e++) mx = logits[e] > mx ? logits[e] : mx;
    }
    if (m->expert_gating == INFER_GATING_SOFTMAX) {   /* softmax_weight: over the chosen, below */
        sum = 0.0;
        for (int e = 0; e < n; e++) sum += exp((double)logits[e] - mx);
    }
    for (int slot = 0; slot < k; slot++) {
        int best = -1;
        double best_key = 0.0;
        for (int e = 0; e < n; e++) {
            int taken = 0;
            for (int u = 0; u < slot; u++) taken |= pick[u] == e;
            if (taken) continue;
            const double key = bias ? expert_prob(m, logits[e], mx, sum) + (double)bias[e] : (double)logits[e];
            if (best < 0 || key > best_key) {
                best = e;
                best_key = key;
            }
        }
        pick[slot] = best;
        p[slot] = expert_prob(m, logits[best], mx, sum);
        chosen += p[slot];
    }
    if (m->expert_gating == INFER_GATING_SOFTMAX_WEIGHT) {
        for (int slot = 0; slot < k; slot++) p[slot] /= chosen;
        chosen = 1.0;
    }
    const double div = m->expert_norm ? (chosen > 6.103515625e-5 ? chosen : 6.103515625e-5) : 1.0;
    for (int slot = 0; slot < k; slot++) weight[slot] = (float)(p[slot] / div) * m->expert_scale;
}

/* s->h = the mixture of experts of the normed rows in s->h: the router for every
 * token, then each expert some token chose, once over the tokens routed to it
 * (gathered), its outputs weighted and added to their rows in expert order. */
static void moe_ffn(decode_ctx *d, infer_decode_team *team, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    infer_decode_job *j = &d->staging;
    const int B = d->n_seqs, dim = m->dim, k = m->n_experts_used, ffn = L->ffn_dim;
    int pick[INFER_BLOCK_MAX_BATCH][INFER_BLOCK_MAX_EXPERTS_USED];
    float weight[INFER_BLOCK_MAX_BATCH][INFER_BLOCK_MAX_EXPERTS_USED];

    j->mats[0] = &L->router; j->outs[0] = s->probs; j->out_stride[0] = m->n_experts;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->h, dim, 1, NULL);
    for (int b = 0; b < B; b++) {
        if (L->router_bias) d->kt->add(ROW(s->probs, b, m->n_experts), L->router_bias, m->n_experts);
        route_token(m, L->exp_probs_b, ROW(s->probs, b, m->n_experts), pick[b], weight[b]);
    }
    memcpy(s->moe_in, s->h, (size_t)B * dim * sizeof(float));
    memset(s->h, 0, (size_t)B * dim * sizeof(float));
    for (int e = 0; e < m->n_experts; e++) {
        int rows[INFER_BLOCK_MAX_BATCH], n_t = 0;
        float w[INFER_BLOCK_MAX_BATCH];
        for (int b = 0; b < B; b++)
            for (int slot = 0; slot < k; slot++)
                if (pick[b][slot] == e) {
                    rows[n_t] = b;
                    w[n_t++] = weight[b][slot];
                }
        if (!n_t) continue;
        for (int t = 0; t < n_t; t++)
            memcpy(ROW(s->moe_rows, t, dim), ROW(s->moe_in, rows[t], dim), (size_t)dim * sizeof(float));
        expert_rows(&d->expert_gate, &L->gate, e, ffn);
        expert_rows(&d->expert_up, &L->up, e, ffn);
        expert_rows(&d->expert_down, &L->down, e, dim);
        j->mats[0] = &d->expert_gate; j->mats[1] = &d->expert_up;
        j->outs[0] = s->gate; j->out_stride[0] = ffn;
        if (L->gate_exps_bias) {
            j->gate_bias = L->gate_exps_bias + (size_t)e * ffn;
            j->up_bias = L->up_exps_bias + (size_t)e * ffn;
        }
        run_matrix_job_of(d, team, INFER_JOB_GATE_UP, s->moe_rows, dim, 2, &d->expert_down, n_t);
        j->gate_bias = j->up_bias = NULL;
        j->mats[0] = &d->expert_down; j->outs[0] = s->moe_out; j->out_stride[0] = dim;
        run_matrix_job_of(d, team, INFER_JOB_MATMUL, s->gate, ffn, 1, NULL, n_t);
        for (int t = 0; t < n_t; t++) {
            float *out = ROW(s->moe_out, t, dim), *h = ROW(s->h, rows[t], dim);
            if (L->down_exps_bias) d->kt->add(out, L->down_exps_bias + (size_t)e * dim, dim);
            d->kt->scale(out, w[t], dim);
            d->kt->add(h, out, dim);
        }
    }
    if (m->shared_ffn_dim > 0) {   /* the shared expert, gated per token */
        const int sh = m->shared_ffn_dim;
        j->mats[0] = &L->shexp_gate; j->mats[1] = &L->shexp_up;
        j->outs[0] = s->gate; j->out_stride[0] = sh;
        run_matrix_job_of(d, team, INFER_JOB_GATE_UP, s->moe_in, dim, 2, &L->shexp_down, B);
        j->mats[0] = &L->shexp_down; j->outs[0] = s->moe_out; j->out_stride[0] = dim;
        run_matrix_job_of(d, team, INFER_JOB_MATMUL, s->gate, sh, 1, NULL, B);
        for (int b = 0; b < B; b++) {
            if (m->shared_ungated) {
                d->kt->add(ROW(s->h, b, dim), ROW(s->moe_out, b, dim), dim);
                continue;
            }
            const float *x = ROW(s->moe_in, b, dim);
            double logit = 0.0;
            for (int i = 0; i < dim; i++) logit += (double)x[i] * (double)L->shexp_gate_inp[i];
            float *out = ROW(s->moe_out, b, dim);
            d->kt->scale(out, (float)(1.0 / (1.0 + exp(-logit))), dim);
            d->kt->add(ROW(s->h, b, dim), out, dim);
        }
    }
}

/* s->att from the attention parts in s->gate (outputs) and s->up (max, sum per
 * query): out = sum_p w_p out_p / sum_p w_p with w_p = l_p exp(m_p - max_p m_p),
 * parts in order.  With one part this is a copy.  A layer's attention sink adds
 * exp(sink - max) to the denominator, once per query head. */
static void merge_attention(const decode_ctx *d, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    const int n_kv = L->n_kv_heads, group = m->n_heads / n_kv, hd = L->head_dim, S = d->attn_splits;
    const int64_t n_out = (int64_t)group * hd;
    for (int b = 0; b < d->n_seqs; b++)
        for (int kvh = 0; kvh < n_kv; kvh++) {
            const int64_t c0 = ((int64_t)b * n_kv + kvh) * S;
            for (int u = 0; u < group; u++) {
                float *dst = d->s->att + ((size_t)b * m->n_heads + (size_t)kvh * group + u) * hd;
                const float *ml0 = d->s->up + c0 * 2 * group + 2 * u;
                if (S == 1 || ml0[2 * group + 1] == 0.0f) {   /* one part (or the others empty) */
                    const float *src = d->s->gate + c0 * n_out + (int64_t)u * hd;
                    if (!L->attn_sinks) {
                        memcpy(dst, src, (size_t)hd * sizeof(float));
                        continue;
                    }
                    const float f = infer_sink_factor(ml0[0], ml0[1], L->attn_sinks[kvh * group + u]);
                    for (int i = 0; i < hd; i++) dst[i] = src[i] * f;
                    continue;
                }
                float mx = -INFINITY, w[ATTN_SPLITS], total = 0.0f;
                for (int p = 0; p < S; p++) mx = ml0[p * 2 * group] > mx ? ml0[p * 2 * group] : mx;
                if (L->attn_sinks) {
                    const float sink = L->attn_sinks[kvh * group + u];
                    mx = sink > mx ? sink : mx;
                    total = expf(sink - mx);
                }
                for (int p = 0; p < S; p++) {
                    const float l = ml0[p * 2 * group + 1];
                    w[p] = l > 0.0f ? l * expf(ml0[p * 2 * group] - mx) : 0.0f;
                    total += w[p];
                }
                for (int i = 0; i < hd; i++) {
                    float acc = 0.0f;
                    for (int p = 0; p < S; p++) acc += w[p] * d->s->gate[(c0 + p) * n_out + (int64_t)u * hd + i];
                    dst[i] = acc / total;
                }
            }
        }
}

/* Request the cache lines layer l stores this step's K and V rows into, one slot per
 * sequence and KV head: the weights streamed through the cache since the last step
 * evicted them, and the stores come right after the QKV product, which hides the
 * misses (B = 8 on SmolLM2: the leader's K/V stores in 0.5-0.6x the time). */
static void prefetch_kv_slots(const decode_ctx *d, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    for (int b = 0; b < d->n_seqs; b++) {
        const infer_block_seq *sq = &d->seqs[b];
        const size_t elt = sq->kv_f16 ? sizeof(infer_half) : sizeof(float);
        const size_t row = (size_t)L->head_dim * elt;
        const size_t layer_at = (size_t)L->kv_row * sq->n_ctx * m->kv_row_width * elt;
        for (int h = 0; h < L->n_kv_heads; h++) {
            const size_t at = layer_at + ((size_t)h * sq->n_ctx + (size_t)sq->pos) * row;
            for (size_t off = 0; off < row; off += 64) {
                INFER_PREFETCH_WRITE((const char *)sq->k_cache + at + off);
                INFER_PREFETCH_WRITE((const char *)sq->v_cache + at + off);
            }
        }
    }
}

/* Gemma 4's per-layer inputs of every token (PLE): s->ple row b holds
 * (rmsnorm(x0 Wple_model / sqrt(dim)) per layer + ple_embd(token) sqrt(P)) / sqrt(2),
 * x0 the scaled embedding in s->x. */
static void per_layer_inputs(decode_ctx *d, infer_decode_team *team) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
    const int P = m->per_layer_dim;
    const int64_t n_ple = (int64_t)m->n_layers * P;
    for (int b = 0; b < d->n_seqs; b++) {
        float *ple = ROW(s->ple, b, n_ple);
        kt->dequantize[m->ple_embd.type](m->ple_embd.data + (size_t)d->seqs[b].token * m->ple_embd.row_bytes,
                                         ple, n_ple);
        kt->scale(ple, (float)sqrt((double)P), n_ple);
    }
    j->mats[0] = &m->ple_model_proj; j->outs[0] = s->ple_proj; j->out_stride[0] = n_ple;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->x, m->dim, 1, NULL);
    for (int b = 0; b < d->n_seqs; b++) {
        float *proj = ROW(s->ple_proj, b, n_ple), *ple = ROW(s->ple, b, n_ple);
        kt->scale(proj, (float)(1.0 / sqrt((double)m->dim)), n_ple);
        for (int l = 0; l < m->n_layers; l++)
            kt->rmsnorm(proj + (size_t)l * P, m->ple_proj_norm, proj + (size_t)l * P, P, m->rms_eps);
        kt->add(ple, proj, n_ple);
        kt->scale(ple, (float)(1.0 / sqrt(2.0)), n_ple);
    }
}

/* x += rmsnorm(Wproj (gelu(Wgate x) * ple[l]), post_norm): layer l's PLE. */
static void add_per_layer_embedding(decode_ctx *d, infer_decode_team *team, int l) {
    const infer_block_model *m = d->m;
    const infer_block_layer *L = &m->layers[l];
    const infer_block_scratch *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
    const int P = m->per_layer_dim, dim = m->dim;
    const int64_t n_ple = (int64_t)m->n_layers * P;
    j->mats[0] = &L->ple_gate; j->outs[0] = s->gate; j->out_stride[0] = P;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->x, dim, 1, NULL);
    for (int b = 0; b < d->n_seqs; b++) {
        float *g = ROW(s->gate, b, P);
        kt->gelu_mul(g, ROW(s->ple, b, n_ple) + (size_t)l * P, g, P);
    }
    j->mats[0] = &L->ple_proj; j->outs[0] = s->h; j->out_stride[0] = dim;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->gate, P, 1, NULL);
    for (int b = 0; b < d->n_seqs; b++) {
        float *h = ROW(s->h, b, dim);
        kt->rmsnorm(h, L->ple_post_norm, h, dim, m->rms_eps);
        kt->add(ROW(s->x, b, dim), h, dim);
    }
}

/* out = the model's block norm (RMSNorm, or LayerNorm with its bias if any) of one row x. */
static void block_norm(const decode_ctx *d, const float *x, const float *weight, const float *bias, float *out) {
    if (d->m->layer_norm) d->kt->layernorm(x, weight, bias, out, d->m->dim, d->m->rms_eps);
    else d->kt->rmsnorm(x, weight, out, d->m->dim, d->m->rms_eps);
}

/* h_b = norm(x_b) for every token, the input of a block half; x_b itself without a norm. */
static void pre_norm(const decode_ctx *d, const float *norm, const float *bias) {
    const int dim = d->m->dim;
    for (int b = 0; b < d->n_seqs; b++) {
        if (norm) block_norm(d, ROW(d->s->x, b, dim), norm, bias, ROW(d->s->h, b, dim));
        else memcpy(ROW(d->s->h, b, dim), ROW(d->s->x, b, dim), (size_t)dim * sizeof(float));
    }
}

/* The FFN half of a block for every token: x += post_norm(FFN(pre_norm(x))), dense or experts. */
static void ffn_half(decode_ctx *d, infer_decode_team *team, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    infer_decode_job *j = &d->staging;
    const int dim = m->dim;
    pre_norm(d, L->ffn_norm, L->ffn_norm_b);
    d->ffn_layer = L;
    if (m->n_experts > 0 && !L->dense_ffn) {
        moe_ffn(d, team, L);
    } else {
        j->mats[0] = &L->gate; j->mats[1] = &L->up;
        j->outs[0] = s->gate; j->out_stride[0] = L->ffn_dim;
        run_matrix_job(d, team, INFER_JOB_GATE_UP, s->h, dim, 2, &L->down);

        j->mats[0] = &L->down; j->outs[0] = s->h; j->out_stride[0] = dim;
        run_matrix_job(d, team, INFER_JOB_MATMUL, s->gate, L->ffn_dim, 1, NULL);
        for (int b = 0; L->ffn_down_b && b < d->n_seqs; b++) d->kt->add(ROW(s->h, b, dim), L->ffn_down_b, dim);
    }
    residual(d, L->post_ffn_norm);
}

/* A shortconv layer (LFM2) for every token: s->h (normed) -> x += conv mixing.
 * The sum runs over the taps oldest first, as TransformerContext._shortconv. */
static void shortconv_half(decode_ctx *d, infer_decode_team *team, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    infer_decode_job *j = &d->staging;
    const int B = d->n_seqs, dim = m->dim, width = L->conv_width;
    float *y_rows = s->conv + (size_t)3 * B * dim;   /* after the b|c|u rows of every token */
    j->mats[0] = &L->conv_b; j->mats[1] = &L->conv_c; j->mats[2] = &L->conv_u;
    j->outs[0] = s->conv; j->outs[1] = s->conv + dim; j->outs[2] = s->conv + 2 * dim;
    j->out_stride[0] = j->out_stride[1] = j->out_stride[2] = 3 * dim;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->h, dim, 3, NULL);
    for (int b = 0; b < B; b++) {
        const infer_block_seq *sq = &d->seqs[b];
        const float *bb = ROW(s->conv, b, 3 * dim), *cc = bb + dim, *uu = bb + 2 * dim;
        float *cache = sq->conv_cache + (size_t)L->conv_index * sq->n_ctx * dim;
        float *here = cache + (size_t)sq->pos * dim, *y = ROW(y_rows, b, dim);
        for (int i = 0; i < dim; i++) here[i] = bb[i] * uu[i];
        for (int i = 0; i < dim; i++) {
            float acc = 0.0f;
            for (int k = 0; k < width; k++) {
                const int64_t p = (int64_t)sq->pos - (width - 1) + k;
                if (p >= 0) acc += cache[(size_t)p * dim + i] * L->conv_kernel[(size_t)i * width + k];
            }
            y[i] = acc * cc[i];
        }
    }
    j->mats[0] = &L->conv_out; j->outs[0] = s->h; j->out_stride[0] = dim;
    run_matrix_job(d, team, INFER_JOB_MATMUL, y_rows, dim, 1, NULL);
    residual(d, L->post_attn_norm);
}

static float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void infer_block_sigmoid(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = sigmoid_f(x[i]);
}

/* softplus(a) as numpy's logaddexp(0, a) computes it in float32 (the Python blocks'). */
static float softplus_f(float a) {
    return a > 0.0f ? a + log1pf(expf(-a)) : log1pf(expf(a));
}

/* A recurrent layer's causal depthwise conv for one token, as the Python blocks'
 * history loop: out[i] = silu(sum_k taps[i][k] * input_k + bias[i]) over the
 * width - 1 kept inputs in hist (oldest first) and x, then the kept inputs shift by
 * one to end with x.  bias may be NULL; width >= 2 (checked). */
static void recurrent_conv(float *hist, const float *x, const float *taps_all, const float *bias, float *out,
                           int64_t n, int width) {
    for (int64_t i = 0; i < n; i++) {
        const float *taps = taps_all + (size_t)i * width;
        float acc = hist[i] * taps[0];
        for (int k = 1; k < width; k++) acc += (k < width - 1 ? hist[(size_t)k * n + i] : x[i]) * taps[k];
        if (bias) acc += bias[i];
        out[i] = acc * sigmoid_f(acc);
    }
    memmove(hist, hist + n, (size_t)(width - 2) * (size_t)n * sizeof(float));
    memcpy(hist + (size_t)(width - 2) * n, x, (size_t)n * sizeof(float));
}

/* Run a recurrence job (INFER_JOB_DELTANET or _MAMBA2) of layer L over `items`
 * (sequence, head) pairs; its chunks run from the commit (see deltanet_chunk). */
static void run_recurrence(decode_ctx *d, infer_decode_team *team, int kind, const infer_block_layer *L,
                           int64_t items) {
    infer_decode_job *j = &d->staging;
    j->kind = kind;
    j->layer = (int)(L - d->m->layers);
    j->row_end = items < INFER_TEAM_MAX_CHUNKS ? items : INFER_TEAM_MAX_CHUNKS;   /* the chunk count */
    infer_team_job(team, j, j->row_end);
}

/* A gated DeltaNet layer for every token: s->h (normed) -> x += linear attention,
 * step by step as TransformerContext._deltanet (the same float operations in the
 * same order, and the same kernels for the norms and the recurrence). */
static void deltanet_half(decode_ctx *d, infer_decode_team *team, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
    const int B = d->n_seqs, dim = m->dim, width = m->dn_conv_width, dd = m->dn_d_state;
    const int nk = m->dn_k_heads, nv = m->dn_v_heads;
    const int64_t cd = deltanet_conv_dim(m), vd = (int64_t)nv * dd;
    const deltanet_rows r0 = deltanet_rows_of(d, 0);
    j->mats[0] = &L->ssm_qkv; j->outs[0] = r0.mixed; j->out_stride[0] = cd;
    j->mats[1] = &L->ssm_gate; j->outs[1] = r0.z; j->out_stride[1] = vd;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->h, dim, 2, NULL);
    j->mats[0] = &L->ssm_alpha; j->outs[0] = r0.g; j->out_stride[0] = nv;
    j->mats[1] = &L->ssm_beta; j->outs[1] = r0.beta; j->out_stride[1] = nv;
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->h, dim, 2, NULL);
    const float l2_scale = (float)(1.0 / sqrt((double)dd));
    for (int b = 0; b < B; b++) {
        const deltanet_rows r = deltanet_rows_of(d, b);
        for (int h = 0; h < nv; h++) {
            /* g = softplus(a + dt) * ssm_a (numpy's logaddexp(0, a)); beta = sigmoid(b) */
            r.g[h] = softplus_f(r.g[h] + L->ssm_dt[h]) * L->ssm_a[h];
            r.beta[h] = sigmoid_f(r.beta[h]);
        }
        float *hist = d->seqs[b].ssm_conv + (size_t)L->dn_index * (size_t)(width - 1) * (size_t)cd;
        recurrent_conv(hist, r.mixed, L->ssm_conv, NULL, r.conv, cd, width);
        /* q and k heads: x / sqrt(sum x^2 + eps) as rmsnorm(eps / d) / sqrt(d) */
        for (int h = 0; h < 2 * nk; h++) {
            float *x = r.conv + (size_t)h * dd;
            kt->rmsnorm(x, m->ones, x, dd, m->dn_l2_eps);
            kt->scale(x, l2_scale, dd);
        }
    }
    run_recurrence(d, team, INFER_JOB_DELTANET, L, (int64_t)B * nv);
    for (int b = 0; b < B; b++) {
        const deltanet_rows r = deltanet_rows_of(d, b);
        for (int h = 0; h < nv; h++) kt->rmsnorm(r.out + (size_t)h * dd, L->ssm_norm, r.out + (size_t)h * dd, dd,
                                                 m->rms_eps);
        for (int64_t i = 0; i < vd; i++) r.out[i] *= r.z[i] * sigmoid_f(r.z[i]);
    }
    j->mats[0] = &L->ssm_out; j->outs[0] = s->h; j->out_stride[0] = dim;
    run_matrix_job(d, team, INFER_JOB_MATMUL, r0.out, vd, 1, NULL);
    residual(d, NULL);
}

/* A Mamba2 layer for every token: s->h (normed) -> x += the SSM mixer, step by step
 * as TransformerContext._mamba2 (the same float operations in the same order, and
 * the same kernels for the sigmoid, the norms and the scan). */
static void mamba2_half(decode_ctx *d, infer_decode_team *team, const infer_block_layer *L) {
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
    const int B = d->n_seqs, dim = m->dim, width = m->m2_conv_width, nh = m->m2_n_heads;
    const int64_t inner = m->m2_d_inner, cd = mamba2_conv_dim(m), gs = inner / m->m2_n_groups;
    const mamba2_rows r0 = mamba2_rows_of(d, 0);
    j->mats[0] = &L->ssm_in; j->outs[0] = r0.in; j->out_stride[0] = mamba2_in_dim(m);
    run_matrix_job(d, team, INFER_JOB_MATMUL, s->h, dim, 1, NULL);
    for (int b = 0; b < B; b++) {
        const mamba2_rows r = mamba2_rows_of(d, b);
        const float *xbc = r.in + inner;
        float *dt = r.in + inner + cd;
        for (int h = 0; h < nh; h++) dt[h] = softplus_f(dt[h] + L->ssm_dt[h]);
        float *hist = d->seqs[b].ssm_conv + (size_t)L->dn_index * (size_t)(width - 1) * (size_t)cd;
        recurrent_conv(hist, xbc, L->ssm_conv, L->ssm_conv_b, r.conv, cd, width);
    }
    run_recurrence(d, team, INFER_JOB_MAMBA2, L, (int64_t)B * nh);
    for (int b = 0; b < B; b++) {
        const mamba2_rows r = mamba2_rows_of(d, b);
        const float *z = r.in;
        for (int64_t i = 0; i < inner; i++) r.y[i] *= z[i] * sigmoid_f(z[i]);
        for (int64_t g = 0; g < inner; g += gs) kt->rmsnorm(r.y + g, m->ones, r.y + g, gs, m->rms_eps);
        for (int64_t i = 0; i < inner; i++) r.y[i] *= L->ssm_norm[i];
    }
    j->mats[0] = &L->ssm_out; j->outs[0] = s->h; j->out_stride[0] = dim;
    run_matrix_job(d, team, INFER_JOB_MATMUL, r0.y, inner, 1, NULL);
    residual(d, NULL);
}

/* The leader's walk through the model (thread 0). */
static void decode_leader(void *ctx, infer_decode_team *team) {
    decode_ctx *d = (decode_ctx *)ctx;
    const infer_block_model *m = d->m;
    const infer_block_scratch *s = d->s;
    const infer_kernel_table *kt = d->kt;
    infer_decode_job *j = &d->staging;
    const int B = d->n_seqs, dim = m->dim;

    for (int b = 0; b < B; b++) {
        float *x = ROW(s->x, b, dim);
        kt->dequantize[m->embd.type](m->embd.data + (size_t)d->seqs[b].token * m->embd.row_bytes, x, dim);
        if (m->embd_scale != 1.0f) kt->scale(x, m->embd_scale, dim);
    }
    if (m->per_layer_dim) per_layer_inputs(d, team);
    for (int l = 0; l < m->n_layers; l++) {
        const infer_block_layer *L = &m->layers[l];
        if (L->conv_width > 0) {
            pre_norm(d, L->attn_norm, NULL);
            shortconv_half(d, team, L);
            ffn_half(d, team, L);
            continue;
        }
        if (L->deltanet) {
            pre_norm(d, L->attn_norm, NULL);
            deltanet_half(d, team, L);
            ffn_half(d, team, L);
            continue;
        }
        if (L->mamba2) {
            pre_norm(d, L->attn_norm, NULL);
            mamba2_half(d, team, L);
            ffn_half(d, team, L);
            continue;
        }
        const int slot = L->rope != INFER_ROPE_NONE ? rope_slot(d, L) : -1;
        const int hd = L->head_dim, n_kv = L->n_kv_heads;
        const int q_dim = m->n_heads * hd, kv_dim = n_kv * hd;

        if (L->own_kv) prefetch_kv_slots(d, L);
        pre_norm(d, L->attn_norm, L->attn_norm_b);
        int n_mats = 1;   /* q; k and v unless the layer reads another's cache; no v if V is K */
        j->mats[0] = &L->wq; j->outs[0] = s->q; j->out_stride[0] = q_dim;
        if (m->attn_output_gate) j->outs[0] = s->q_gate, j->out_stride[0] = 2 * q_dim;   /* [q | gate] per head */
        if (L->own_kv) {
            j->mats[1] = &L->wk; j->outs[1] = s->k; j->out_stride[1] = kv_dim;
            n_mats = 2;
            if (!L->v_from_k) {
                j->mats[2] = &L->wv; j->outs[2] = s->v; j->out_stride[2] = kv_dim;
                n_mats = 3;
            }
        }
        run_matrix_job(d, team, INFER_JOB_MATMUL, s->h, dim, n_mats, NULL);
        for (int b = 0; m->attn_output_gate && b < B; b++)
            for (int h = 0; h < m->n_heads; h++)
                memcpy(ROW(s->q, b, q_dim) + (size_t)h * hd, ROW(s->q_gate, b, 2 * q_dim) + (size_t)h * 2 * hd,
                       (size_t)hd * sizeof(float));

        for (int b = 0; L->own_kv && b < B; b++) {
            const infer_block_seq *sq = &d->seqs[b];
            float *k = ROW(s->k, b, kv_dim), *v = ROW(s->v, b, kv_dim);
            if (L->v_from_k) memcpy(v, k, (size_t)kv_dim * sizeof(float));
            if (L->q_bias) {
                kt->add(ROW(s->q, b, q_dim), L->q_bias, q_dim);
                kt->add(k, L->k_bias, kv_dim);
                kt->add(v, L->v_bias, kv_dim);
            }
            if (L->q_norm && m->qk_norm_whole) {   /* before any head is split off */
                kt->rmsnorm(ROW(s->q, b, q_dim), L->q_norm, ROW(s->q, b, q_dim), q_dim, m->rms_eps);
                kt->rmsnorm(k, L->k_norm, k, kv_dim, m->rms_eps);
            }
            for (int h = 0; h < n_kv; h++) {
                float *kh = k + (size_t)h * hd, *vh = v + (size_t)h * hd;
                const int norm_k = L->k_norm && !m->qk_norm_whole;
                if (norm_k && !m->qk_norm_after_rope) kt->rmsnorm(kh, L->k_norm, kh, hd, m->rms_eps);
                if (m->v_norm) kt->rmsnorm(vh, m->ones, vh, hd, m->rms_eps);
                if (slot >= 0) {
                    const float *cs = angles_of(d, slot, b);
                    rope_kernel(kt, L->rope)(kh, cs, cs + m->head_dim, L->rope_dims);
                }
                if (norm_k && m->qk_norm_after_rope) kt->rmsnorm(kh, L->k_norm, kh, hd, m->rms_eps);
            }
            /* kv_store converts to F16 with the table's (vectorised, bit-exact) quantize */
            const int kv_type = sq->kv_f16 ? INFER_TYPE_F16 : INFER_TYPE_F32;
            const size_t layer_off = (size_t)L->kv_row * sq->n_ctx * m->kv_row_width * (sq->kv_f16 ? 2 : 4);
            infer_kv_store(k, (char *)sq->k_cache + layer_off, kv_type, 1, n_kv, hd, sq->n_ctx, sq->pos);
            infer_kv_store(v, (char *)sq->v_cache + layer_off, kv_type, 1, n_kv, hd, sq->n_ctx, sq->pos);
        }
        j->kind = INFER_JOB_ATTENTION;   /* q norm and RoPE happen in the attention chunks */
        j->outs[0] = s->gate;            /* the parts, merged into s->att below */
        j->outs[1] = s->up;
        j->chunk_rows = (int64_t)(m->n_heads / n_kv) * hd;   /* floats per KV head */
        j->layer = l;
        j->rope_cs = slot >= 0 ? angles_of(d, slot, 0) : NULL;
        infer_team_job(team, j, (int64_t)B * n_kv * d->attn_splits);
        merge_attention(d, L);
        for (int b = 0; m->attn_output_gate && b < B; b++)
            for (int h = 0; h < m->n_heads; h++) {
                float *att = ROW(s->att, b, q_dim) + (size_t)h * hd;
                const float *gate = ROW(s->q_gate, b, 2 * q_dim) + (size_t)h * 2 * hd + hd;
                for (int i = 0; i < hd; i++) att[i] *= sigmoid_f(gate[i]);
            }

        /* parallel blocks: x is still the attention's input, so the FFN half norms it
         * again (ffn_norm is attn_norm) and adds first, the attention output after it */
        if (m->parallel) ffn_half(d, team, L);
        j->mats[0] = &L->wo; j->outs[0] = s->h; j->out_stride[0] = dim;
        run_matrix_job(d, team, INFER_JOB_MATMUL, s->att, q_dim, 1, NULL);
        for (int b = 0; L->o_bias && b < B; b++) kt->add(ROW(s->h, b, dim), L->o_bias, dim);
        residual(d, L->post_attn_norm);

        if (!m->parallel) ffn_half(d, team, L);
        if (L->ple_post_norm) add_per_layer_embedding(d, team, l);
        if (L->out_scale != 1.0f)
            for (int b = 0; b < B; b++) kt->scale(ROW(s->x, b, dim), L->out_scale, dim);
    }
    for (int b = 0; b < B; b++) block_norm(d, ROW(s->x, b, dim), m->output_norm, m->output_norm_b, ROW(s->h, b, dim));
    j->mats[0] = &m->output;
    run_matrix_job(d, team, INFER_JOB_HEAD, s->h, dim, 1, NULL);
}

/* ---- checks -------------------------------------------------------------------- */
static int matrix_ok(const infer_kernel_table *kt, const infer_decode_matrix *w) {
    if (w->type < 0 || w->type >= INFER_TYPE_COUNT) return 0;
    if (!kt->vec_dot[w->type] && !(kt->matmul_r16[w->type] && w->rows % 16 == 0)) return 0;
    if (w->act_type != infer_type_vec_dot_type(w->type)) return 0;
    return w->act_type == INFER_TYPE_F32 || kt->quantize[w->act_type] != NULL;
}

static int shape_ok(const infer_decode_matrix *w, int64_t rows, int64_t cols) {
    return w->data && w->rows == rows && w->cols == cols;
}

int infer_block_check_model(const infer_block_model *m) {
    if (!m || !m->layers || !m->output_norm || m->dim < 1 || m->n_layers < 1 || m->n_heads < 1 ||
        m->n_kv_heads < 1 || m->ffn_dim < 1 || m->vocab_size < 1 || m->kv_rows < 1 || m->kv_row_width < 1 ||
        m->per_layer_dim < 0 || (m->v_norm && !m->ones))
        return -2;
    const int P = m->per_layer_dim;
    if (m->head_dim < 2 || m->head_dim % 2 || m->head_dim > INFER_ATTN_MAX_HEAD_DIM ||
        !(m->attn_softcap >= 0.0f) || !(m->final_softcap >= 0.0f) || !(m->rms_eps >= 0.0f) ||
        (m->qk_norm_whole != 0 && m->qk_norm_whole != 1) ||
        (m->qk_norm_after_rope != 0 && m->qk_norm_after_rope != 1) || (m->qk_norm_whole && m->qk_norm_after_rope) ||
        (m->layer_norm != 0 && m->layer_norm != 1) || (m->parallel != 0 && m->parallel != 1) ||
        (m->parallel && (m->residual_scale != 1.0f || P > 0 || m->n_conv_layers > 0)) ||
        (m->output_norm_b && !m->layer_norm) ||
        (m->swiglu_oai != 0 && m->swiglu_oai != 1) ||
        !isfinite(m->attn_temp_scale) || (m->attn_temp_scale != 0.0f && m->attn_temp_floor < 1))
        return -2;
    if (!shape_ok(&m->embd, m->vocab_size, m->dim) || !shape_ok(&m->output, m->vocab_size, m->dim) ||
        m->n_conv_layers < 0 || m->n_conv_layers > m->n_layers)
        return -2;
    if (P > 0 && (!m->ple_proj_norm || !shape_ok(&m->ple_embd, m->vocab_size, (int64_t)m->n_layers * P) ||
                  !shape_ok(&m->ple_model_proj, (int64_t)m->n_layers * P, m->dim)))
        return -2;
    if ((m->attn_output_gate != 0 && m->attn_output_gate != 1) || m->n_deltanet_layers < 0 ||
        m->n_deltanet_layers > m->n_layers)
        return -2;
    if (m->n_deltanet_layers > 0 &&
        (m->dn_conv_width < 2 || m->dn_conv_width > 64 || m->dn_d_state < 1 ||
         m->dn_d_state > INFER_DELTA_NET_MAX_STATE || m->dn_k_heads < 1 || m->dn_v_heads < 1 ||
         m->dn_v_heads % m->dn_k_heads || !m->ones || !(m->dn_l2_eps >= 0.0f) || isinf(m->dn_l2_eps) ||
         deltanet_conv_dim(m) > (int64_t)1 << 30))
        return -2;
    if (m->n_mamba2_layers < 0 || m->n_mamba2_layers > m->n_layers ||
        (m->n_mamba2_layers > 0 && m->n_deltanet_layers > 0))
        return -2;
    if (m->n_mamba2_layers > 0 &&
        (m->m2_conv_width < 2 || m->m2_conv_width > 64 || m->m2_d_state < 1 || m->m2_n_heads < 1 ||
         m->m2_n_groups < 1 || m->m2_d_inner < 1 || m->m2_d_inner > (1 << 20) || m->m2_d_state > (1 << 20) ||
         m->m2_n_groups > (1 << 20) || m->m2_d_inner % m->m2_n_heads || m->m2_n_heads % m->m2_n_groups ||
         !m->ones))
        return -2;
    int n_conv = 0, n_dn = 0, n_m2 = 0;
    /* experts: gate/up/down are n_experts stacks; dense: one of each */
    const int moe = m->n_experts > 0;
    if (m->n_experts < 0 || (moe && (m->n_experts_used < 1 || m->n_experts_used > m->n_experts ||
                                     m->n_experts_used > INFER_BLOCK_MAX_EXPERTS_USED ||
                                     !(m->expert_scale == m->expert_scale) || isinf(m->expert_scale) ||
                                     (m->expert_gating != INFER_GATING_SOFTMAX &&
                                      m->expert_gating != INFER_GATING_SIGMOID &&
                                      m->expert_gating != INFER_GATING_SOFTMAX_WEIGHT))))
        return -2;
    if (m->shared_ffn_dim < 0 || (m->shared_ffn_dim > 0 && !moe) || (m->shared_ungated != 0 && m->shared_ungated != 1) ||
        (m->shared_ungated && m->shared_ffn_dim == 0))
        return -2;
    if ((m->ffn_relu_sqr != 0 && m->ffn_relu_sqr != 1) || (m->ffn_relu_sqr && (moe || m->gelu)) ||
        (m->ffn_xielu != 0 && m->ffn_xielu != 1) || (m->ffn_xielu && (moe || m->gelu || m->ffn_relu_sqr)) ||
        (m->swiglu_oai && (m->gelu || m->ffn_relu_sqr || m->ffn_xielu)) ||
        (m->ffn_gelu != 0 && m->ffn_gelu != 1) ||
        (m->ffn_gelu && (moe || m->gelu || m->ffn_relu_sqr || m->ffn_xielu || m->swiglu_oai)))
        return -2;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_block_layer *L = &m->layers[l];
        /* this layer's FFN: n_experts stacks of its width, or one dense matrix of each */
        if ((L->dense_ffn != 0 && L->dense_ffn != 1) || (L->dense_ffn && !moe)) return -2;
        const int layer_moe = moe && !L->dense_ffn;
        const int64_t stacks = layer_moe ? m->n_experts : 1;
        if (m->ffn_xielu && !(isfinite(L->xielu_alpha_n) && isfinite(L->xielu_alpha_p) && isfinite(L->xielu_beta) &&
                              isfinite(L->xielu_eps)))
            return -2;
        if (!!L->ffn_up_b != !!L->ffn_down_b ||
            (L->ffn_up_b && (layer_moe || !(m->ffn_relu_sqr || m->ffn_xielu || m->ffn_gelu))))
            return -2;
        if (L->ffn_dim < 1 || L->ffn_dim > m->ffn_dim || (L->exp_probs_b && !layer_moe) ||
            !shape_ok(&L->gate, stacks * L->ffn_dim, m->dim) || !shape_ok(&L->up, stacks * L->ffn_dim, m->dim) ||
            !shape_ok(&L->down, stacks * m->dim, L->ffn_dim) ||
            (layer_moe && !shape_ok(&L->router, m->n_experts, m->dim)))
            return -2;
        if (layer_moe && m->shared_ffn_dim > 0 &&
            ((!m->shared_ungated && !L->shexp_gate_inp) || !shape_ok(&L->shexp_gate, m->shared_ffn_dim, m->dim) ||
             !shape_ok(&L->shexp_up, m->shared_ffn_dim, m->dim) || !shape_ok(&L->shexp_down, m->dim, m->shared_ffn_dim)))
            return -2;
        if (L->mamba2 != 0) {   /* Mamba2: its own tensors, one state slot each */
            if (L->mamba2 != 1 || L->deltanet || P > 0 || L->out_scale != 1.0f || L->conv_width != 0 ||
                L->dn_index != n_m2++ || !L->attn_norm || !L->ffn_norm || !L->ssm_conv || !L->ssm_dt ||
                !L->ssm_a || !L->ssm_d || !L->ssm_norm || !shape_ok(&L->ssm_in, mamba2_in_dim(m), m->dim) ||
                !shape_ok(&L->ssm_out, m->dim, m->m2_d_inner))
                return -2;
            continue;
        }
        if (L->deltanet != 0) {   /* gated DeltaNet: its own tensors, one state slot each */
            const int64_t cd = deltanet_conv_dim(m), vd = (int64_t)m->dn_v_heads * m->dn_d_state;
            if (L->deltanet != 1 || P > 0 || L->out_scale != 1.0f || L->conv_width != 0 || L->dn_index != n_dn++ ||
                !L->attn_norm || !L->ffn_norm || !L->ssm_conv || !L->ssm_dt || !L->ssm_a || !L->ssm_norm ||
                !shape_ok(&L->ssm_qkv, cd, m->dim) || !shape_ok(&L->ssm_gate, vd, m->dim) ||
                !shape_ok(&L->ssm_alpha, m->dn_v_heads, m->dim) || !shape_ok(&L->ssm_beta, m->dn_v_heads, m->dim) ||
                !shape_ok(&L->ssm_out, m->dim, vd))
                return -2;
            continue;
        }
        if (L->conv_width != 0) {   /* shortconv: its own tensors, one cache slot each */
            /* (Gemma 4's per-layer pieces are attention layers' only) */
            if (P > 0 || L->out_scale != 1.0f ||
                L->conv_width < 1 || L->conv_index != n_conv++ || !L->conv_kernel || !L->attn_norm ||
                !L->ffn_norm || !shape_ok(&L->conv_b, m->dim, m->dim) || !shape_ok(&L->conv_c, m->dim, m->dim) ||
                !shape_ok(&L->conv_u, m->dim, m->dim) || !shape_ok(&L->conv_out, m->dim, m->dim))
                return -2;
            continue;
        }
        const int hd = L->head_dim, n_kv = L->n_kv_heads;
        if (hd < 2 || hd % 2 || hd > m->head_dim || n_kv < 1 || n_kv > m->n_kv_heads || m->n_heads % n_kv ||
            L->ffn_dim < 1 || L->ffn_dim > m->ffn_dim || L->kv_row < 0 || L->kv_row >= m->kv_rows ||
            (int64_t)n_kv * hd > m->kv_row_width ||
            (int64_t)(m->n_heads / n_kv) * (hd + 2) + hd > INFER_TEAM_SCRATCH_FLOATS || !isfinite(L->out_scale))
            return -2;
        if (!!L->attn_norm != !!L->ffn_norm || (L->own_kv && !!L->q_norm != !!L->k_norm) ||
            !!L->q_bias != !!L->k_bias || !!L->q_bias != !!L->v_bias || (L->q_bias && !L->own_kv) ||
            (m->qk_norm_whole && L->q_norm && !L->own_kv) ||
            !!L->gate_exps_bias != !!L->up_exps_bias ||
            ((L->gate_exps_bias || L->down_exps_bias || L->router_bias) && !layer_moe) ||
            (L->v_from_k && !L->own_kv) || L->window < 0 || !!L->ple_post_norm != (P > 0) ||
            (L->rope != INFER_ROPE_NONE && L->rope != INFER_ROPE_NORM && L->rope != INFER_ROPE_NEOX) ||
            (L->rope != INFER_ROPE_NONE && (!L->rope_inv_freq || L->rope_dims < 2 || L->rope_dims % 2 ||
                                            L->rope_dims > hd)))
            return -2;
        const int64_t q_dim = (int64_t)m->n_heads * hd, kv_dim = (int64_t)n_kv * hd;
        if (!shape_ok(&L->wq, (m->attn_output_gate ? 2 : 1) * q_dim, m->dim) || !shape_ok(&L->wo, m->dim, q_dim) ||
            (L->own_kv && !shape_ok(&L->wk, kv_dim, m->dim)) ||
            (L->own_kv && !L->v_from_k && !shape_ok(&L->wv, kv_dim, m->dim)) ||
            (P > 0 && (!shape_ok(&L->ple_gate, P, m->dim) || !shape_ok(&L->ple_proj, m->dim, P))))
            return -2;
        /* parallel: one norm for both halves, no post norms */
        if (m->parallel && (!L->attn_norm || L->ffn_norm != L->attn_norm || L->post_attn_norm || L->post_ffn_norm ||
                            L->ffn_norm_b != L->attn_norm_b))
            return -2;
        /* norm biases: LayerNorms only, both or neither, and with the model's output norm's */
        if (!!L->attn_norm_b != !!L->ffn_norm_b || !!L->attn_norm_b != !!m->output_norm_b ||
            (L->attn_norm_b && !L->attn_norm))
            return -2;
    }
    if (n_conv != m->n_conv_layers || n_dn != m->n_deltanet_layers || n_m2 != m->n_mamba2_layers) return -2;
    const infer_kernel_table *kt = infer_kernels();
    if (!kt->rmsnorm || !kt->silu_mul || !kt->gelu_mul || !kt->add || !kt->scale || !kt->rope_norm ||
        !kt->rope_neox || !kt->attn_block_f16 || !kt->attn_block_f32 || m->embd.type < 0 ||
        m->embd.type >= INFER_TYPE_COUNT || !kt->dequantize[m->embd.type] || !matrix_ok(kt, &m->output) ||
        (m->layer_norm && !kt->layernorm))
        return -1;
    if (P > 0 && (m->ple_embd.type < 0 || m->ple_embd.type >= INFER_TYPE_COUNT ||
                  !kt->dequantize[m->ple_embd.type] || !matrix_ok(kt, &m->ple_model_proj)))
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_block_layer *L = &m->layers[l];
        const int layer_moe = m->n_experts > 0 && !L->dense_ffn;
        if (!matrix_ok(kt, &L->gate) || !matrix_ok(kt, &L->up) || !matrix_ok(kt, &L->down) ||
            (layer_moe && !matrix_ok(kt, &L->router)) ||
            (layer_moe && m->shared_ffn_dim > 0 && (!matrix_ok(kt, &L->shexp_gate) || !matrix_ok(kt, &L->shexp_up) ||
                                                    !matrix_ok(kt, &L->shexp_down))))
            return -1;
        if (L->mamba2) {
            if (!matrix_ok(kt, &L->ssm_in) || !matrix_ok(kt, &L->ssm_out)) return -1;
            continue;
        }
        if (L->deltanet) {
            const infer_decode_matrix *dn[5] = {&L->ssm_qkv, &L->ssm_gate, &L->ssm_alpha, &L->ssm_beta, &L->ssm_out};
            for (int i = 0; i < 5; i++)
                if (!matrix_ok(kt, dn[i])) return -1;
            continue;
        }
        if (L->conv_width) {
            const infer_decode_matrix *conv[4] = {&L->conv_b, &L->conv_c, &L->conv_u, &L->conv_out};
            for (int i = 0; i < 4; i++)
                if (!matrix_ok(kt, conv[i])) return -1;
            continue;
        }
        const infer_decode_matrix *all[6] = {&L->wq, &L->wo,
                                             L->own_kv ? &L->wk : NULL, L->own_kv && !L->v_from_k ? &L->wv : NULL,
                                             P > 0 ? &L->ple_gate : NULL, P > 0 ? &L->ple_proj : NULL};
        for (int i = 0; i < 6; i++)
            if (all[i] && !matrix_ok(kt, all[i])) return -1;
    }
    return 0;
}

int infer_block_decode(const infer_block_model *m, const infer_block_scratch *s,
                       const infer_block_seq *seqs, int n_seqs) {
    const int rc = infer_block_check_model(m);
    if (rc) return rc;
    if (!s || !seqs || n_seqs < 1 || n_seqs > s->max_batch || n_seqs > INFER_BLOCK_MAX_BATCH ||
        (int64_t)n_seqs * m->n_kv_heads > INFER_TEAM_MAX_CHUNKS ||
        (m->n_experts > 0 && (!s->probs || !s->moe_in || !s->moe_rows || !s->moe_out)) ||
        (m->n_deltanet_layers > 0 && !s->dn) || (m->n_mamba2_layers > 0 && !s->m2) ||
        (m->attn_output_gate && !s->q_gate))
        return -2;
    const int recurrent = m->n_deltanet_layers > 0 || m->n_mamba2_layers > 0;
    for (int b = 0; b < n_seqs; b++) {
        const infer_block_seq *sq = &seqs[b];
        if (sq->token < 0 || sq->token >= m->vocab_size || sq->pos < 0 || sq->pos >= sq->n_ctx ||
            !sq->k_cache || !sq->v_cache || !sq->logits || (m->n_conv_layers > 0 && (!sq->conv_cache || !s->conv)) ||
            (recurrent && (!sq->ssm_state || !sq->ssm_conv)))
            return -2;
        for (int c = 0; c < b; c++)   /* two tokens of one batch must not share a cache */
            if (seqs[c].k_cache == sq->k_cache || seqs[c].v_cache == sq->v_cache ||
                (m->n_conv_layers > 0 && seqs[c].conv_cache == sq->conv_cache) ||
                (recurrent && (seqs[c].ssm_state == sq->ssm_state || seqs[c].ssm_conv == sq->ssm_conv)))
                return -2;
    }
    decode_ctx d;
    memset(&d, 0, sizeof d);
    d.m = m;
    d.s = s;
    d.seqs = seqs;
    d.n_seqs = n_seqs;
    d.kt = infer_kernels();
    /* parts of a whole batch: outputs in gate, (max, sum) pairs in up, both max_batch x ffn_dim */
    const int64_t q_dim = (int64_t)m->n_heads * m->head_dim;
    d.attn_splits = ATTN_SPLITS * q_dim <= m->ffn_dim && ATTN_SPLITS * 2 * (int64_t)m->n_heads <= m->ffn_dim &&
                            (int64_t)INFER_BLOCK_MAX_BATCH * m->n_kv_heads * ATTN_SPLITS <= INFER_TEAM_MAX_CHUNKS
                        ? ATTN_SPLITS : 1;
    infer_decode_team team;
    infer_team_run(&team, &d, decode_leader, compute_chunk, copy_chunk, sizeof(infer_decode_job),
                   1024 * (int64_t)d.n_seqs);   /* chunks grow with the batch */
    return 0;
}
