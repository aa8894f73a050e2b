/* The Mamba2 selective scan (Granite 4.0-H's SSM layers; llama.cpp's ggml_ssm_scan
 * with a scalar decay per head, ggml-cpu/ops.cpp): scalar C99, the loop over the
 * state runs contiguous so the compiler vectorises it without reordering sums
 * across tokens.  Heads are independent and share out over the thread pool. */
#include "infer_kernels.h"

#include <math.h>

typedef struct {
    const float *xbc, *dt, *a, *d_skip;
    float *state, *y;
    int64_t n_tokens, n_heads, head_dim, d_state, n_groups;
} mamba2_job;

/* Head h over every token: S (head_dim x d_state) = S exp(dt A) + (x dt) B^T, then
 * y = S C + D x, with B and C of h's group (ggml's repeat_interleave order). */
static void mamba2_head(const mamba2_job *job, int64_t h) {
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
    const mamba2_job *job = (const mamba2_job *)arg;
    for (int64_t h = ith; h < job->n_heads; h += nth) {
        mamba2_head(job, h);
    }
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
    if (n_heads == 1 || n_tokens * n_heads * head_dim * d_state < 32768) {
        mamba2_task(&job, 0, 1);
    } else {
        infer_parallel_run(mamba2_task, &job);
    }
    return 0;
}
