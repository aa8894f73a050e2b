/* deltanet.h: the gated DeltaNet recurrence's work (deltanet.c), shared with its
 * SIMD versions (deltanet_avx2.c). */
#ifndef INFER_DELTANET_H
#define INFER_DELTANET_H

#include <stdint.h>

typedef struct {
    const float *q, *k, *v, *g, *beta;
    float *state, *out;
    int64_t n_tokens, n_k_heads, n_v_heads, d;
    float scale;
} infer_delta_net_job;

/* Value head h over every token of the job; delta and acc: d floats of scratch each. */
typedef void (*infer_delta_net_head_fn)(const infer_delta_net_job *job, int64_t h, float *delta, float *acc);
void infer_delta_net_head_scalar(const infer_delta_net_job *job, int64_t h, float *delta, float *acc);
/* The head function of the active kernel set (AVX2's where it is AVX2 or AVX-512). */
infer_delta_net_head_fn infer_delta_net_head_active(void);
#if defined(__x86_64__) || defined(_M_X64)
void infer_delta_net_head_avx2(const infer_delta_net_job *job, int64_t h, float *delta, float *acc);
#endif

#endif
