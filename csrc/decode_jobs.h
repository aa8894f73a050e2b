/* decode_jobs.h: the jobs of the fused decode step (transformer_block.c) besides
 * the thread team of decode_team.h: the weight-matrix description, the job
 * description the team runs, and the matrix-product job helpers.
 *
 * A step decodes a batch of B tokens (one per sequence), so a matrix job
 * multiplies every weight row with B activation rows: each weight row is read
 * from memory once for the whole batch (the mat-mul kernels' row loop).
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

/* Bytes one quantized-input buffer needs for n_tokens inputs of n values each
 * (any format: the widest is f32). */
size_t infer_decode_act_bytes(int64_t n, int64_t n_tokens);

/* ---- the jobs (run by the team of decode_team.h) -------------------------------- */
enum { INFER_JOB_MATMUL, INFER_JOB_GATE_UP, INFER_JOB_ATTENTION, INFER_JOB_HEAD,
       INFER_JOB_DELTANET,     /* the recurrence of a DeltaNet layer (transformer_block.c) */
       INFER_JOB_MAMBA2 };     /* the selective scan of a Mamba2 layer (likewise) */

typedef struct {
    int kind;
    int n_mats;
    int n_tokens;                 /* B: activation rows, one per sequence */
    int layer;                    /* attention */
    const infer_decode_matrix *mats[3];
    const uint8_t *inputs[3];     /* n_tokens quantized rows each, packed */
    float *outs[3];               /* n_tokens rows each, out_stride[i] floats apart */
    int64_t out_stride[3];
    /* matrix jobs: rows [row0, row_end) of the matrices laid end to end, in
     * chunks of chunk_rows (attention: floats of one chunk's output) */
    int64_t row0, row_end, chunk_rows;
    const float *rope_cs;         /* attention: the layer's angles (see transformer_block.c) */
    /* gate/up jobs: when quant_type >= 0, each chunk quantizes its GLU rows straight
     * into the next product's input (format quant_type, quant_row_bytes per token)
     * instead of copying them out as floats */
    int quant_type;
    uint8_t *quant_out;
    size_t quant_row_bytes;
    /* gate/up jobs: biases of the gate and up rows (an expert's; NULL: none), added before the GLU */
    const float *gate_bias, *up_bias;
} infer_decode_job;
typedef char infer_decode_job_fits_the_team[sizeof(infer_decode_job) <= INFER_TEAM_JOB_BYTES ? 1 : -1];

/* Total rows of j's n_mats matrices, and the chunking of a matrix job over them
 * on nth threads: chunk_rows such that chunk_rows * floats_per_row fits a
 * thread's scratch.  The caller then runs [row0, row_end) pieces of at most
 * INFER_TEAM_MAX_CHUNKS chunks (infer_decode_run_rows). */
void infer_decode_matrix_job(infer_decode_job *j, int kind, int n_mats, int n_tokens, int nth,
                             int64_t floats_per_row);

/* Run the job over all its rows on the team, in as many team jobs as the chunk
 * limit needs. */
void infer_decode_run_rows(infer_decode_team *team, infer_decode_job *j);

/* For matrix i of a matrix job, the part [lo, hi) of chunk c's rows in it;
 * returns whether it is non-empty. */
int infer_decode_chunk_part(const infer_decode_job *j, int64_t c, int i, int64_t *lo, int64_t *hi);

/* dst[t * (hi - lo) + i] = row lo + i of w . token t's input, for i < hi - lo and
 * t < n_tokens: the matmul driver's row loop (four-row kernels from lo, weight
 * rows prefetched ahead, four tokens at a time where the table has vec_dot_4x4).
 * Chunks start on multiples of 16 within matrices whose row counts are multiples
 * of 4 (all real ones), so the grouping, and each result, do not depend on the
 * chunking. */
void infer_decode_dot_rows(const infer_decode_matrix *w, const uint8_t *x, int n_tokens, float *dst,
                           int64_t lo, int64_t hi);

/* Chunk c of a matrix job into scratch: the parts of every matrix, each
 * n_tokens x (hi - lo), one after another.  Returns the floats written. */
int64_t infer_decode_matmul_chunk(const infer_decode_job *j, int64_t c, float *scratch);

/* The team's copy callback for the matrix and attention jobs: moves chunk c's
 * results from scratch into the job's outputs.  A gate/up job's results (n_tokens
 * x the chunk's rows) go to outs[0]; an attention job's chunk is chunk_rows
 * floats at outs[0] + c * chunk_rows.  (Head jobs have their own copy.) */
void infer_decode_copy_chunk(void *ctx, const void *job, int64_t c, const float *scratch);

/* Quantize n_tokens rows of n values at x (packed) for j's first
 * n_mats matrices and point j->inputs at them: one copy per distinct activation
 * format (slot k of xq holds the k-th format in the order the matrices come), so
 * q/k/v or gate/up share one quantized input. */
void infer_decode_quantize_inputs(const infer_kernel_table *kt, infer_decode_job *j, const float *x,
                                  int64_t n, int n_tokens, int n_mats, uint8_t *const xq[3]);

#ifdef __cplusplus
}
#endif
#endif
