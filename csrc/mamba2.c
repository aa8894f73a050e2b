/* The Mamba2 selective scan (Granite 4.0-H's SSM layers; llama.cpp's ggml_ssm_scan
 * with a scalar decay per head, ggml-cpu/ops.cpp): the scalar C99 head loop, the AVX2
 * one (mamba2_avx2.c) where the active kernel set is AVX2 or AVX-512.  Heads are
 * independent and share out over the thread pool. */
#include "infer_kernels.h"
#include "mamba2.h"

#include <math.h>

typedef infer_mamba2_job mamba2_job;

typedef struct {
    const mamba2_job *job;
    infer_mamba2_head_fn head;
} mamba2_run;

/* Head h over every token: S (head_dim x d_state) = S exp(dt A) + (x dt) B^T, then
 * y = S C + D x, with B and C of h's group (ggml's repeat_interleave order). */
void infer_mamba2_head_scalar(const mamba2_job *job, int64_t h) {
    const int64_t hd = job->head_dim, ds = job->d_state, ng = job->n_groups;
    const int64_t inner = job->n_heads * hd, row = inner + 2 * ng * ds;
    const int64_t g = h / (job->n_heads / ng);
    float *S = job->state + h * hd * ds;
    for (int64_t t = 0; t < job->n_tokens; t++) {
        const float *x = job->xbc + t * row + h * hd;
        const float *B = job->xbc + t * row + inner + g * ds;
        const float *C = job->xbc + t * row + inner + ng * ds + g * ds;
        const float dt = job->dt[t * job->n_heads + h];
        const float decay = expf(dt * job->a[h]);
        float *y = job->y + t * inner + h * hd;
        for (int64_t i = 0; i < hd; i++) {
            float *s = S + i * ds;
            const float x_dt = x[i] * dt;
            float sum = 0.0f;
            for (int64_t j = 0; j < ds; j++) {
                s[j] = s[j] * decay + B[j] * x_dt;
                sum += s[j] * C[j];
            }
            y[i] = sum + x[i] * job->d_skip[h];
        }
    }
}

static void mamba2_task(void *arg, int ith, int nth) {
    const mamba2_run *run = (const mamba2_run *)arg;
    for (int64_t h = ith; h < run->job->n_heads; h += nth) {
        run->head(run->job, h);
    }
}

infer_mamba2_head_fn infer_mamba2_head_active(void) {
#if defined(__x86_64__) || defined(_M_X64)
    if (infer_isa_active() == INFER_ISA_AVX2 || infer_isa_active() == INFER_ISA_AVX512) {
        return infer_mamba2_head_avx2;
    }
#endif
    return infer_mamba2_head_scalar;
}

int infer_mamba2_scan(const float *xbc, const float *dt, const float *a, const float *d_skip, float *state,
                      float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t d_state,
                      int64_t n_groups) {
    mamba2_job job;
    if (n_tokens < 0 || n_heads < 1 || head_dim < 1 || d_state < 1 || n_groups < 1 || n_heads % n_groups) {
        return -1;
    }
    if (n_tokens == 0) {
        return 0;
    }
    job.xbc = xbc; job.dt = dt; job.a = a; job.d_skip = d_skip; job.state = state; job.y = y;
    job.n_tokens = n_tokens; job.n_heads = n_heads; job.head_dim = head_dim; job.d_state = d_state;
    job.n_groups = n_groups;
    mamba2_run run;
    run.job = &job;
    run.head = infer_mamba2_head_active();
    if (n_heads == 1 || n_tokens * n_heads * head_dim * d_state < 32768) {
        mamba2_task(&run, 0, 1);
    } else {
        infer_parallel_run(mamba2_task, &run);
    }
    return 0;
}
