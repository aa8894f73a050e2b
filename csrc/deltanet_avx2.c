/* deltanet_avx2.c: the gated DeltaNet head loop (deltanet.c's) with AVX2 + FMA,
 * 8 values of a state row a vector; the tail (d % 8) runs the scalar formula. */
#include "deltanet.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

void infer_delta_net_head_avx2(const infer_delta_net_job *job, int64_t h, float *delta, float *acc) {
    const int64_t d = job->d, kh = h % job->n_k_heads, d8 = d - d % 8;
    float *S = job->state + h * d * d;
    for (int64_t t = 0; t < job->n_tokens; t++) {
        const float *q = job->q + (t * job->n_k_heads + kh) * d;
        const float *k = job->k + (t * job->n_k_heads + kh) * d;
        const float *v = job->v + (t * job->n_v_heads + h) * d;
        const float decay = expf(job->g[t * job->n_v_heads + h]);
        const float beta = job->beta[t * job->n_v_heads + h];
        float *o = job->out + (t * job->n_v_heads + h) * d;
        const __m256 vdecay = _mm256_set1_ps(decay);
        for (int64_t j = 0; j < d; j++) acc[j] = 0.0f;
        for (int64_t i = 0; i < d; i++) {   /* S *= exp(g); acc = S^T k */
            float *row = S + i * d;
            const float ki = k[i];
            const __m256 vk = _mm256_set1_ps(ki);
            int64_t j = 0;
            for (; j < d8; j += 8) {
                const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + j), vdecay);
                _mm256_storeu_ps(row + j, r);
                _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(r, vk, _mm256_loadu_ps(acc + j)));
            }
            for (; j < d; j++) {
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
            const __m256 vk = _mm256_set1_ps(ki), vq = _mm256_set1_ps(qi);
            int64_t j = 0;
            for (; j < d8; j += 8) {
                const __m256 r = _mm256_fmadd_ps(vk, _mm256_loadu_ps(delta + j), _mm256_loadu_ps(row + j));
                _mm256_storeu_ps(row + j, r);
                _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(r, vq, _mm256_loadu_ps(acc + j)));
            }
            for (; j < d; j++) {
                row[j] += ki * delta[j];
                acc[j] += row[j] * qi;
            }
        }
        for (int64_t j = 0; j < d; j++) o[j] = acc[j] * job->scale;
    }
}
#endif
