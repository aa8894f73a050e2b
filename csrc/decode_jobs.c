/* decode_jobs.c: the job helpers the fused decode steps share (see decode_jobs.h). */
#include "decode_jobs.h"
#include "infer_kernels.h"

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
