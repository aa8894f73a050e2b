/* decode_jobs.c: the job helpers the fused decode steps share (see decode_jobs.h). */
#include "decode_jobs.h"
#include "infer_kernels.h"

#include <string.h>

size_t infer_decode_act_bytes(int64_t n) {
    /* The widest activation formats: f32 (4 bytes/value) > Q8_1 (36/32) > Q8_K (292/256). */
    return (size_t)n * 4 + 64;
}

int64_t infer_decode_matvec_job(infer_decode_job *j, int n_mats, int nth) {
    j->kind = INFER_JOB_MATVEC;
    j->n_mats = n_mats;
    j->rows = 0;
    for (int i = 0; i < n_mats; i++) j->rows += j->mats[i]->rows;
    j->chunk_rows = infer_team_chunk_rows(j->rows, nth, INFER_DECODE_MAX_CHUNK_ROWS);
    return (j->rows + j->chunk_rows - 1) / j->chunk_rows;
}

void infer_decode_dot_rows(const infer_decode_matrix *w, const void *x, float *dst, int64_t lo, int64_t hi) {
    infer_matmul_rows(w->type, w->data + (size_t)lo * w->row_bytes, w->row_bytes, w->cols, 0,
                      hi - lo, x, 1, dst, hi - lo);
}

int infer_decode_chunk_part(const infer_decode_job *j, int64_t c, int i, int64_t *lo, int64_t *hi) {
    int64_t base = 0;
    for (int k = 0; k < i; k++) base += j->mats[k]->rows;
    const int64_t r0 = c * j->chunk_rows;
    const int64_t r1 = r0 + j->chunk_rows < j->rows ? r0 + j->chunk_rows : j->rows;
    *lo = r0 > base ? r0 - base : 0;
    *hi = r1 - base < j->mats[i]->rows ? r1 - base : j->mats[i]->rows;
    return *lo < *hi;
}

void infer_decode_copy_chunk(void *ctx, const void *job, int64_t c, const float *scratch) {
    const infer_decode_job *j = (const infer_decode_job *)job;
    (void)ctx;
    if (j->kind == INFER_JOB_MATVEC) {
        int64_t lo, hi;
        for (int i = 0; i < j->n_mats; i++)
            if (infer_decode_chunk_part(j, c, i, &lo, &hi)) {
                memcpy(j->outs[i] + lo, scratch, (size_t)(hi - lo) * sizeof(float));
                scratch += hi - lo;
            }
    } else if (j->kind == INFER_JOB_GATE_UP) {
        int64_t r0 = c * j->chunk_rows, r1 = r0 + j->chunk_rows;
        if (r1 > j->mats[0]->rows) r1 = j->mats[0]->rows;
        memcpy(j->outs[0] + r0, scratch, (size_t)(r1 - r0) * sizeof(float));
    } else {
        memcpy(j->outs[0] + (size_t)c * (size_t)j->chunk_rows, scratch,
               (size_t)j->chunk_rows * sizeof(float));
    }
}

void infer_decode_quantize_inputs(const infer_kernel_table *kt, infer_decode_job *j, const float *x,
                                  int64_t n, int n_mats, uint8_t *const xq[3]) {
    int types[3], n_types = 0;
    for (int i = 0; i < n_mats; i++) {
        int at = j->mats[i]->act_type, slot = -1;
        for (int k = 0; k < n_types; k++)
            if (types[k] == at) slot = k;
        if (slot < 0) {
            slot = n_types++;
            types[slot] = at;
            if (at == INFER_TYPE_F32) memcpy(xq[slot], x, (size_t)n * sizeof(float));
            else kt->quantize[at](x, xq[slot], n);
        }
        j->inputs[i] = xq[slot];
    }
}
