/* llama_block.c: a whole decode step of a Llama-family model (see llama_block.h).
 *
 * All kernel threads run `decode_worker` together.  Small serial stages (embed,
 * norms, quantizing an input, RoPE) run on thread 0; matrix-vector products are
 * split by rows and attention by heads.  Threads meet at a barrier between
 * stages that depend on each other.
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
#else
static inline void cpu_relax(void) {}
#endif

/* ---- barrier ----------------------------------------------------------------
 * Spins briefly, then yields: the machine may have fewer free cores than threads. */
typedef struct {
    volatile int count;
    volatile int phase;
} barrier_t;

static void barrier_wait(barrier_t *b, int nth) {
    if (nth == 1) return;
    int phase = __atomic_load_n(&b->phase, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == nth) {
        __atomic_store_n(&b->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->phase, phase + 1, __ATOMIC_RELEASE);
        return;
    }
    int spins = 0;
    while (__atomic_load_n(&b->phase, __ATOMIC_ACQUIRE) == phase) {
        if (++spins < 4096) cpu_relax();
        else yield_cpu();
    }
}

size_t infer_llama_act_bytes(int64_t n) {
    /* The widest activation formats: f32 (4 bytes/value) > Q8_1 (36/32) > Q8_K (292/256). */
    return (size_t)n * 4 + 64;
}

/* ---- the decode step ---------------------------------------------------------------- */
typedef struct {
    const infer_llama_model *m;
    infer_llama_state *s;
    const infer_kernel_table *kt;
    infer_attn_fn attn;
    int token, pos;
    barrier_t barrier;
} decode_job;

/* Matrices sharing an input get one quantized copy of it per distinct input format:
 * slot k of s->xq holds the k-th distinct format in the order the matrices come. */
static void input_slots(const infer_llama_matrix **mats, int n_mats, int *slot_of, int *types,
                        int *n_types) {
    *n_types = 0;
    for (int i = 0; i < n_mats; i++) {
        int at = mats[i]->act_type, slot = -1;
        for (int k = 0; k < *n_types; k++)
            if (types[k] == at) slot = k;
        if (slot < 0) {
            slot = (*n_types)++;
            types[slot] = at;
        }
        slot_of[i] = slot;
    }
}

/* Thread 0: quantize x into every slot the matrices need. */
static void quantize_inputs(const infer_kernel_table *kt, infer_llama_state *s, const float *x,
                            int64_t n, const infer_llama_matrix **mats, int n_mats) {
    int slot_of[3], types[3], n_types;
    input_slots(mats, n_mats, slot_of, types, &n_types);
    for (int k = 0; k < n_types; k++) {
        if (types[k] == INFER_TYPE_F32) memcpy(s->xq[k], x, (size_t)n * sizeof(float));
        else kt->quantize[types[k]](x, s->xq[k], n);
    }
}

/* Every thread: where each matrix's quantized input is. */
static void input_ptrs(infer_llama_state *s, const infer_llama_matrix **mats, int n_mats,
                       const void **inputs) {
    int slot_of[3], types[3], n_types;
    input_slots(mats, n_mats, slot_of, types, &n_types);
    for (int i = 0; i < n_mats; i++) inputs[i] = s->xq[slot_of[i]];
}

/* Rows of several matrices (sharing an input) split evenly over the threads. */
static void matvec_rows(decode_job *j, const infer_llama_matrix **mats, const void **inputs,
                        float **outs, int n_mats, int ith, int nth) {
    int64_t total = 0;
    for (int i = 0; i < n_mats; i++) total += mats[i]->rows;
    int64_t r0 = total * ith / nth, r1 = total * (ith + 1) / nth;
    int64_t base = 0;
    for (int i = 0; i < n_mats; i++) {
        const infer_llama_matrix *w = mats[i];
        int64_t lo = r0 > base ? r0 - base : 0;
        int64_t hi = r1 - base < w->rows ? r1 - base : w->rows;
        infer_vec_dot_fn dot = j->kt->vec_dot[w->type];
        for (int64_t r = lo; r < hi; r++)
            outs[i][r] = dot(w->cols, w->data + (size_t)r * w->row_bytes, inputs[i]);
        base += w->rows;
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

static void decode_worker(void *arg, int ith, int nth) {
    decode_job *j = (decode_job *)arg;
    const infer_llama_model *m = j->m;
    infer_llama_state *s = j->s;
    const infer_kernel_table *kt = j->kt;
    const int hd = m->head_dim, q_dim = m->n_heads * hd;
    const int group = m->n_heads / m->n_kv_heads, n = j->pos + 1;
    const size_t kv_elt = s->kv_f16 ? sizeof(infer_half) : sizeof(float);
    const float scale = 1.0f / sqrtf((float)hd);
    const void *in[3];

    if (ith == 0) {
        kt->dequantize[m->embd.type](m->embd.data + (size_t)j->token * m->embd.row_bytes, s->x, m->dim);
        /* theta_i = pos * base^(-2i/head_dim), shared by every head and layer */
        for (int i = 0; i < hd / 2; i++) {
            double theta = (double)j->pos * pow((double)m->rope_base, -2.0 * i / hd);
            s->rope_cos[2 * i] = s->rope_cos[2 * i + 1] = (float)cos(theta);
            s->rope_sin[2 * i] = s->rope_sin[2 * i + 1] = (float)sin(theta);
        }
    }
    for (int l = 0; l < m->n_layers; l++) {
        const infer_llama_layer *L = &m->layers[l];
        const size_t layer_off = (size_t)l * m->n_kv_heads * s->n_ctx * hd;
        char *kc = (char *)s->k_cache + layer_off * kv_elt;
        char *vc = (char *)s->v_cache + layer_off * kv_elt;

        const infer_llama_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *qkv_out[3] = {s->q, s->k, s->v};
        if (ith == 0) {
            kt->rmsnorm(s->x, L->attn_norm, s->h, m->dim, m->rms_eps);
            quantize_inputs(kt, s, s->h, m->dim, qkv, 3);
        }
        barrier_wait(&j->barrier, nth);
        input_ptrs(s, qkv, 3, in);
        matvec_rows(j, qkv, in, qkv_out, 3, ith, nth);
        barrier_wait(&j->barrier, nth);

        if (ith == 0) {
            /* GGUF "llama" layout: RoPE rotates adjacent pairs (2i, 2i+1) of each head */
            for (int h = 0; h < m->n_heads; h++) kt->rope_norm(s->q + (size_t)h * hd, s->rope_cos, s->rope_sin, hd);
            for (int h = 0; h < m->n_kv_heads; h++) kt->rope_norm(s->k + (size_t)h * hd, s->rope_cos, s->rope_sin, hd);
            store_kv(kc, s->k, m->n_kv_heads, hd, s->n_ctx, j->pos, s->kv_f16);
            store_kv(vc, s->v, m->n_kv_heads, hd, s->n_ctx, j->pos, s->kv_f16);
        }
        barrier_wait(&j->barrier, nth);

        for (int h = ith; h < m->n_heads; h += nth) {
            const size_t head_off = (size_t)(h / group) * s->n_ctx * hd * kv_elt;
            j->attn(s->q + (size_t)h * hd, kc + head_off, vc + head_off, n, hd, scale,
                    s->att + (size_t)h * hd);
        }
        barrier_wait(&j->barrier, nth);

        const infer_llama_matrix *o[1] = {&L->wo};
        float *o_out[1] = {s->h};
        if (ith == 0) quantize_inputs(kt, s, s->att, q_dim, o, 1);
        barrier_wait(&j->barrier, nth);
        input_ptrs(s, o, 1, in);
        matvec_rows(j, o, in, o_out, 1, ith, nth);
        barrier_wait(&j->barrier, nth);

        const infer_llama_matrix *gu[2] = {&L->gate, &L->up};
        float *gu_out[2] = {s->gate, s->up};
        if (ith == 0) {
            kt->add(s->x, s->h, m->dim);
            kt->rmsnorm(s->x, L->ffn_norm, s->h, m->dim, m->rms_eps);
            quantize_inputs(kt, s, s->h, m->dim, gu, 2);
        }
        barrier_wait(&j->barrier, nth);
        input_ptrs(s, gu, 2, in);
        matvec_rows(j, gu, in, gu_out, 2, ith, nth);
        barrier_wait(&j->barrier, nth);

        const infer_llama_matrix *dn[1] = {&L->down};
        float *dn_out[1] = {s->h};
        if (ith == 0) {
            kt->silu_mul(s->gate, s->up, s->gate, m->ffn_dim);
            quantize_inputs(kt, s, s->gate, m->ffn_dim, dn, 1);
        }
        barrier_wait(&j->barrier, nth);
        input_ptrs(s, dn, 1, in);
        matvec_rows(j, dn, in, dn_out, 1, ith, nth);
        barrier_wait(&j->barrier, nth);
        if (ith == 0) kt->add(s->x, s->h, m->dim);
        /* the next layer starts on thread 0 only; others wait at its first barrier */
    }
    const infer_llama_matrix *head[1] = {&m->output};
    float *head_out[1] = {s->logits};
    if (ith == 0) {
        kt->rmsnorm(s->x, m->output_norm, s->h, m->dim, m->rms_eps);
        quantize_inputs(kt, s, s->h, m->dim, head, 1);
    }
    barrier_wait(&j->barrier, nth);
    input_ptrs(s, head, 1, in);
    matvec_rows(j, head, in, head_out, 1, ith, nth);
}

static int matrix_ok(const infer_kernel_table *kt, const infer_llama_matrix *w) {
    if (w->type < 0 || w->type >= INFER_TYPE_COUNT || !kt->vec_dot[w->type]) return 0;
    if (w->act_type < 0 || w->act_type >= INFER_TYPE_COUNT) return 0;
    return w->act_type == INFER_TYPE_F32 || kt->quantize[w->act_type] != NULL;
}

int infer_llama_decode(const infer_llama_model *m, infer_llama_state *s, int token, int pos) {
    if (token < 0 || token >= m->vocab_size || pos < 0 || pos >= s->n_ctx) return -2;
    const infer_kernel_table *kt = infer_kernels();
    if (!kt->rmsnorm || !kt->silu_mul || !kt->add || !kt->rope_norm ||
        !(s->kv_f16 ? kt->attn_f16 : kt->attn_f32) || m->embd.type < 0 || m->embd.type >= INFER_TYPE_COUNT ||
        !kt->dequantize[m->embd.type] || !matrix_ok(kt, &m->output))
        return -1;
    for (int l = 0; l < m->n_layers; l++) {
        const infer_llama_layer *L = &m->layers[l];
        const infer_llama_matrix *all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++)
            if (!matrix_ok(kt, all[i])) return -1;
    }
    decode_job j;
    memset(&j, 0, sizeof j);
    j.m = m;
    j.s = s;
    j.kt = kt;
    j.token = token;
    j.pos = pos;
    j.attn = s->kv_f16 ? kt->attn_f16 : kt->attn_f32;
    infer_parallel_run(decode_worker, &j);
    return 0;
}
