/* The gated DeltaNet recurrence (Qwen3.5's linear-attention layers; llama.cpp's
 * ggml_gated_delta_net, ggml-cpu/ops.cpp): the scalar C99 head loop, the AVX2 one
 * (deltanet_avx2.c) where the active kernel set is AVX2 or AVX-512.  Heads are
 * independent and share out over the thread pool. */
#include "infer_kernels.h"
#include "deltanet.h"

#include <math.h>
#include <string.h>

typedef infer_delta_net_job delta_net_job;

typedef struct {
    const delta_net_job *job;
    infer_delta_net_head_fn head;
} delta_net_run;

/* One value head over every token.  S is the head's state, S[i * d + j] (key index
 * i, value index j): every step below is a sweep over rows of S, contiguous in j,
 * so the loops vectorise without reordering any sum, and two sweeps per token
 * suffice.  delta and acc: d floats of scratch each. */
void infer_delta_net_head_scalar(const delta_net_job *job, int64_t h, float *delta, float *acc) {
    const int64_t d = job->d, kh = h % job->n_k_heads;   /* q/k heads tiled over v heads */
    float *S = job->state + h * d * d;
    for (int64_t t = 0; t < job->n_tokens; t++) {
        const float *q = job->q + (t * job->n_k_heads + kh) * d;
        const float *k = job->k + (t * job->n_k_heads + kh) * d;
        const float *v = job->v + (t * job->n_v_heads + h) * d;
        const float decay = expf(job->g[t * job->n_v_heads + h]);
        const float beta = job->beta[t * job->n_v_heads + h];
        float *o = job->out + (t * job->n_v_heads + h) * d;
        for (int64_t j = 0; j < d; j++) acc[j] = 0.0f;
        for (int64_t i = 0; i < d; i++) {   /* S *= exp(g); acc = S^T k */
            float *row = S + i * d;
            const float ki = k[i];
            for (int64_t j = 0; j < d; j++) {
                row[j] *= decay;
                acc[j] += row[j] * ki;
            }
        }
        for (int64_t j = 0; j < d; j++) {   /* delta = beta (v - S^T k) */
            delta[j] = (v[j] - acc[j]) * beta;
            acc[j] = 0.0f;
        }
        for (int64_t i = 0; i < d; i++) {   /* S += k delta^T; acc = S^T q */
            float *row = S + i * d;
            const float ki = k[i], qi = q[i];
            for (int64_t j = 0; j < d; j++) {
                row[j] += ki * delta[j];
                acc[j] += row[j] * qi;
            }
        }
        for (int64_t j = 0; j < d; j++) o[j] = acc[j] * job->scale;
    }
}

static void delta_net_task(void *arg, int ith, int nth) {
    const delta_net_run *run = (const delta_net_run *)arg;
    float delta[INFER_DELTA_NET_MAX_STATE], acc[INFER_DELTA_NET_MAX_STATE];
    for (int64_t h = ith; h < run->job->n_v_heads; h += nth) {
        run->head(run->job, h, delta, acc);
    }
}

infer_delta_net_head_fn infer_delta_net_head_active(void) {
#if defined(__x86_64__) || defined(_M_X64)
    if (infer_isa_active() == INFER_ISA_AVX2 || infer_isa_active() == INFER_ISA_AVX512) {
        return infer_delta_net_head_avx2;
    }
#endif
    return infer_delta_net_head_scalar;
}

int infer_gated_delta_net(const float *q, const float *k, const float *v, const float *g,
                          const float *beta, float *state, float *out, int64_t n_tokens,
                          int64_t n_k_heads, int64_t n_v_heads, int64_t d, float scale) {
    delta_net_job job;
    if (n_tokens < 0 || n_k_heads < 1 || n_v_heads < 1 || n_v_heads % n_k_heads || d < 1
            || d > INFER_DELTA_NET_MAX_STATE) {
        return -1;
    }
    if (n_tokens == 0) {
        return 0;
    }
    job.q = q; job.k = k; job.v = v; job.g = g; job.beta = beta;
    job.state = state; job.out = out;
    job.n_tokens = n_tokens; job.n_k_heads = n_k_heads; job.n_v_heads = n_v_heads; job.d = d;
    job.scale = scale;
    delta_net_run run;
    run.job = &job;
    run.head = infer_delta_net_head_active();
    if (n_v_heads == 1 || n_tokens * n_v_heads * d * d < 32768) {
        delta_net_task(&run, 0, 1);
    } else {
        infer_parallel_run(delta_net_task, &run);
    }
    return 0;
}
