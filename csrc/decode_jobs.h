/* decode_jobs.h: what the fused decode steps (llama_block.c, gemma3_block.c)
 * share besides the thread team of decode_team.h: the weight-matrix description,
 * the job description their team runs, and the matrix-vector job helpers.
 */
#ifndef INFER_DECODE_JOBS_H
#define INFER_DECODE_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include "decode_team.h"
#include "infer_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const uint8_t *data;   /* rows of `row_bytes` bytes each, in format `type` */
    int type;
    int act_type;          /* format the input is quantized into (vec_dot_type) */
    int64_t rows, cols;
    size_t row_bytes;
} infer_decode_matrix;

/* Bytes one quantized-input buffer needs for an input of n values (any format). */
size_t infer_decode_act_bytes(int64_t n);

/* ---- the jobs (run by the team of decode_team.h) -------------------------------- */
enum { INFER_JOB_MATVEC, INFER_JOB_GATE_UP, INFER_JOB_ATTENTION };

#define INFER_DECODE_MAX_CHUNK_ROWS (INFER_TEAM_SCRATCH_FLOATS / 2)   /* gate and up rows of a chunk */

typedef struct {
    int kind;
    int n_mats;
    const infer_decode_matrix *mats[3];
    const void *inputs[3];
    float *outs[3];
    int64_t rows, chunk_rows;   /* matvec: all rows of the matrices, rows per chunk */
    int layer;                  /* attention */
} infer_decode_job;
typedef char infer_decode_job_fits_the_team[sizeof(infer_decode_job) <= INFER_TEAM_JOB_BYTES ? 1 : -1];

/* Make j (mats, inputs, outs already set) a matrix-vector job over its first
 * n_mats matrices on nth threads; returns its chunk count. */
int64_t infer_decode_matvec_job(infer_decode_job *j, int n_mats, int nth);

/* dst[i] = row lo + i of w . x for i < hi - lo: the matmul driver's row loop
 * (four-row kernels from lo, weight rows prefetched ahead).  Chunks start on
 * multiples of 16 within matrices whose row counts are multiples of 4 (all real
 * ones), so the grouping, and each result, do not depend on the chunking. */
void infer_decode_dot_rows(const infer_decode_matrix *w, const void *x, float *dst, int64_t lo, int64_t hi);

/* The team's copy callback for every job kind: moves chunk c's results from the
 * scratch compute filled into the job's outputs.  A gate/up job's results go to
 * outs[0] (its first matrix's rows); an attention job's chunks are chunk_rows
 * floats each, laid one after another from outs[0]. */
void infer_decode_copy_chunk(void *ctx, const void *job, int64_t c, const float *scratch);

/* Quantize x (n values) for j's first n_mats matrices and point j->inputs at it:
 * one copy per distinct activation format (slot k of xq holds the k-th format in
 * the order the matrices come), so q/k/v or gate/up share one quantized input. */
void infer_decode_quantize_inputs(const infer_kernel_table *kt, infer_decode_job *j, const float *x,
                                  int64_t n, int n_mats, uint8_t *const xq[3]);

/* For matrix i of a matvec job, the part [lo, hi) of chunk c's rows in it;
 * returns whether it is non-empty. */
int infer_decode_chunk_part(const infer_decode_job *j, int64_t c, int i, int64_t *lo, int64_t *hi);

#ifdef __cplusplus
}
#endif
#endif
