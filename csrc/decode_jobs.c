/* decode_jobs.c: the job helpers of the fused decode step (see decode_jobs.h). */
#include "decode_jobs.h"
#include "infer_kernels.h"

#include <string.h>

size_t infer_decode_act_bytes(int64_t n, int64_t n_tokens) {
    /* The widest activation formats: f32 (4 bytes/value) > Q8_1 (36/32) > Q8_K (292/256). */
    return (size_t)n * (size_t)n_tokens * 4 + 64;
}

void infer_decode_matrix_job(infer_decode_job *j, int kind, int n_mats, int n_tokens, int nth,
                             int64_t floats_per_row) {
    int64_t rows = 0;
    for (int i = 0; i < n_mats; i++) rows += j->mats[i]->rows;
    j->kind = kind;
    j->n_mats = n_mats;
    j->n_tokens = n_tokens;
    j->row0 = 0;
    j->row_end = rows;
    /* chunk_rows (a multiple of 16) * floats_per_row must fit the scratch */
    int64_t max_rows = INFER_TEAM_SCRATCH_FLOATS / floats_per_row / 16 * 16;
    if (max_rows < 16) max_rows = 16;
    j->chunk_rows = infer_team_chunk_rows(rows, nth, max_rows);
}

void infer_decode_run_rows(infer_decode_team *team, infer_decode_job *j) {
    const int64_t end = j->row_end, piece = j->chunk_rows * INFER_TEAM_MAX_CHUNKS;
    for (int64_t r = 0; r < end; r += piece) {
        j->row0 = r;
        j->row_end = r + piece < end ? r + piece : end;
        infer_team_job(team, j, (j->row_end - r + j->chunk_rows - 1) / j->chunk_rows);
    }
    j->row0 = 0;
    j->row_end = end;
}

void infer_decode_dot_rows(const infer_decode_matrix *w, const uint8_t *x, int n_tokens, float *dst,
                           int64_t lo, int64_t hi) {
    infer_matmul_rows(w->type, w->data + (size_t)lo * w->row_bytes, w->row_bytes, w->cols, 0,
                      hi - lo, x, n_tokens, dst, hi - lo);
}

int infer_decode_chunk_part(const infer_decode_job *j, int64_t c, int i, int64_t *lo, int64_t *hi) {
    int64_t base = 0;
    for (int k = 0; k < i; k++) base += j->mats[k]->rows;
    const int64_t r0 = j->row0 + c * j->chunk_rows;
    const int64_t r1 = r0 + j->chunk_rows < j->row_end ? r0 + j->chunk_rows : j->row_end;
    *lo = r0 > base ? r0 - base : 0;
    *hi = r1 - base < j->mats[i]->rows ? r1 - base : j->mats[i]->rows;
    return *lo < *hi;
}

int64_t infer_decode_matmul_chunk(const infer_decode_job *j, int64_t c, float *scratch) {
    int64_t lo, hi, written = 0;
    for (int i = 0; i < j->n_mats; i++)
        if (infer_decode_chunk_part(j, c, i, &lo, &hi)) {
            infer_decode_dot_rows(j->mats[i], j->inputs[i], j->n_tokens, scratch + written, lo, hi);
            written += (hi - lo) * j->n_tokens;
        }
    return written;
}

void infer_decode_copy_chunk(void *ctx, const void *job, int64_t c, const float *scratch) {
    const infer_decode_job *j = (const infer_decode_job *)job;
    (void)ctx;
    if (j->kind == INFER_JOB_ATTENTION) {
        memcpy(j->outs[0] + (size_t)c * (size_t)j->chunk_rows, scratch,
               (size_t)j->chunk_rows * sizeof(float));
        return;
    }
    /* a gate/up chunk's results are gate's rows (its first matrix) */
    const int n_mats = j->kind == INFER_JOB_GATE_UP ? 1 : j->n_mats;
    int64_t lo, hi;
    for (int i = 0; i < n_mats; i++)
        if (infer_decode_chunk_part(j, c, i, &lo, &hi)) {
            for (int t = 0; t < j->n_tokens; t++)
                memcpy(j->outs[i] + t * j->out_stride[i] + lo, scratch + t * (hi - lo),
                       (size_t)(hi - lo) * sizeof(float));
            scratch += (hi - lo) * j->n_tokens;
        }
}

void infer_decode_quantize_inputs(const infer_kernel_table *kt, infer_decode_job *j, const float *x,
                                  int64_t n, int n_tokens, int n_mats, uint8_t *const xq[3]) {
    int types[3], n_types = 0;
    for (int i = 0; i < n_mats; i++) {
        const int at = j->mats[i]->act_type;
        int slot = -1;
        for (int k = 0; k < n_types; k++)
            if (types[k] == at) slot = k;
        if (at == INFER_TYPE_F32) {   /* float inputs are read as they are */
            j->inputs[i] = (const uint8_t *)x;
            continue;
        }
        if (slot < 0) {
            slot = n_types++;
            types[slot] = at;
            /* the rows are whole blocks, back to back in x and in xq: one call for all
             * the tokens (the AVX-512 quantizer works 16 blocks at a time) */
            kt->quantize[at](x, xq[slot], n * n_tokens);
        }
        j->inputs[i] = xq[slot];
    }
}
