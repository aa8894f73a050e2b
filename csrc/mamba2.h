/* mamba2.h: the Mamba2 scan's work (mamba2.c), shared with its SIMD version
 * (mamba2_avx2.c). */
#ifndef INFER_MAMBA2_H
#define INFER_MAMBA2_H

#include <stdint.h>

typedef struct {
    const float *xbc, *dt, *a, *d_skip;
    float *state, *y;
    int64_t n_tokens, n_heads, head_dim, d_state, n_groups;
} infer_mamba2_job;

/* Head h over every token of the job. */
typedef void (*infer_mamba2_head_fn)(const infer_mamba2_job *job, int64_t h);
void infer_mamba2_head_scalar(const infer_mamba2_job *job, int64_t h);
/* The head function of the active kernel set (AVX2's where it is AVX2 or AVX-512):
 * the scan and the fused decode step (transformer_block.c) both take it, so that
 * they round alike. */
infer_mamba2_head_fn infer_mamba2_head_active(void);
#if defined(__x86_64__) || defined(_M_X64)
void infer_mamba2_head_avx2(const infer_mamba2_job *job, int64_t h);
#endif

#endif
