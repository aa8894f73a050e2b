/* mamba2_avx2.c: the Mamba2 scan's head loop (mamba2.c's) with AVX2 + FMA, 8 state
 * values a vector, as ggml's ssm_scan sums them; the tail (d_state % 8) runs the
 * scalar formula. */
#include "mamba2.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

static float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

void infer_mamba2_head_avx2(const infer_mamba2_job *job, int64_t h) {
    const int64_t hd = job->head_dim, ds = job->d_state, ng = job->n_groups, ds8 = ds - ds % 8;
    const int64_t inner = job->n_heads * hd, row = inner + 2 * ng * ds;
    const int64_t g = h / (job->n_heads / ng);
    float *S = job->state + h * hd * ds;
    for (int64_t t = 0; t < job->n_tokens; t++) {
        const float *x = job->xbc + t * row + h * hd;
        const float *B = job->xbc + t * row + inner + g * ds;
        const float *C = job->xbc + t * row + inner + ng * ds + g * ds;
        const float dt = job->dt[t * job->n_heads + h];
        const float decay = expf(dt * job->a[h]);
        const __m256 vdecay = _mm256_set1_ps(decay);
        float *y = job->y + t * inner + h * hd;
        for (int64_t i = 0; i < hd; i++) {
            float *s = S + i * ds;
            const float x_dt = x[i] * dt;
            const __m256 vx = _mm256_set1_ps(x_dt);
            __m256 acc = _mm256_setzero_ps();
            int64_t j = 0;
            for (; j < ds8; j += 8) {
                const __m256 r = _mm256_fmadd_ps(_mm256_loadu_ps(B + j), vx,
                                                 _mm256_mul_ps(_mm256_loadu_ps(s + j), vdecay));
                _mm256_storeu_ps(s + j, r);
                acc = _mm256_fmadd_ps(r, _mm256_loadu_ps(C + j), acc);
            }
            float sum = hsum8(acc);
            for (; j < ds; j++) {
                s[j] = s[j] * decay + B[j] * x_dt;
                sum += s[j] * C[j];
            }
            y[i] = sum + x[i] * job->d_skip[h];
        }
    }
}
#endif
