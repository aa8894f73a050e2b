/* decode_team.h: the thread team of the fused decode steps (llama_block.c,
 * gemma3_block.c).
 *
 * One thread-pool run per token.  Thread 0 (the leader) walks the model and does
 * the small serial steps.  Each parallel step is a job of numbered chunks (row
 * ranges, a KV head's attention) that the leader publishes with
 * infer_team_job(); every thread, the leader included, claims chunks with one
 * compare-and-swap on a ticket, computes a chunk into its own scratch and then
 * commits it to the shared outputs, first come first served.  On a busy machine a
 * helper may be descheduled holding a chunk for milliseconds; the leader does not
 * wait for it: after a short grace it computes that chunk too, and whichever copy
 * commits first is kept.  Both copies are the same numbers as long as a chunk's
 * `compute` is a pure function of the job and the chunk number (it must not
 * modify its inputs: it writes only the scratch), so results depend neither on
 * the thread count nor on who won.
 *
 * Helpers copy the published job under a seqlock; one that finds it changed (it
 * was descheduled long enough for the leader to move on) drops its chunk.
 */
#ifndef INFER_DECODE_TEAM_H
#define INFER_DECODE_TEAM_H

#include <stddef.h>
#include <stdint.h>
#include "atomics.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INFER_TEAM_MAX_CHUNKS 512       /* chunks per job */
#define INFER_TEAM_SCRATCH_FLOATS 8192  /* scratch per thread, on its stack */
#define INFER_TEAM_JOB_BYTES 256        /* the largest job description */

/* Chunk c of `job` into scratch (pure: reads the job's inputs, writes scratch). */
typedef void (*infer_team_compute_fn)(void *ctx, const void *job, int64_t c, float *scratch);
/* Chunk c's outputs from the scratch compute filled. */
typedef void (*infer_team_copy_fn)(void *ctx, const void *job, int64_t c, const float *scratch);

typedef struct infer_decode_team infer_decode_team;
/* The leader's walk through the model; it calls infer_team_job for each step. */
typedef void (*infer_team_leader_fn)(void *ctx, infer_decode_team *team);

typedef struct {
    int64_t gen;   /* the ticket generation it was published under */
    union {
        long double align_;
        void *align_p;
        unsigned char bytes[INFER_TEAM_JOB_BYTES];
    } body;
} infer_team_published;

struct infer_decode_team {
    void *ctx;
    infer_team_compute_fn compute;
    infer_team_copy_fn copy;
    infer_team_leader_fn leader;
    size_t job_size;
    int nth;                      /* set by infer_team_run */
    int64_t grace_spins;          /* the leader's wait for a helper's chunk before it computes it too */
    float *leader_scratch;
    infer_team_published job;     /* helpers copy it under job_seq */
    infer_atomic_i64 job_seq;     /* odd while the leader rewrites `job` */
    /* ticket = generation (16 bits) | chunk count (24) | next chunk (24) */
    infer_atomic_i64 ticket;
    infer_atomic_i64 done;
    infer_atomic_i64 finished;
    /* per chunk: generation << 2 | 0 (open), 1 (being committed), 2 (committed) */
    infer_atomic_i64 state[INFER_TEAM_MAX_CHUNKS];
};

/* Run `leader` on thread 0 with every pool thread helping; returns when it has.
 * job_size (<= INFER_TEAM_JOB_BYTES) is the size of the job descriptions.
 * grace_spins (<= 0: 1024, tens of microseconds) is how long the leader, done with
 * its own chunks, waits for a helper's before computing them too: it should exceed
 * a chunk's time, or the leader redoes chunks that a running helper is about to
 * commit (a batch of 8 tokens makes each chunk 8x longer). */
void infer_team_run(infer_decode_team *t, void *ctx, infer_team_leader_fn leader,
                    infer_team_compute_fn compute, infer_team_copy_fn copy, size_t job_size,
                    int64_t grace_spins);

/* Leader only: run chunks 0..total-1 (total <= INFER_TEAM_MAX_CHUNKS) of `job`
 * on the team; returns once every chunk is committed. */
void infer_team_job(infer_decode_team *t, const void *job, int64_t total);

/* Chunk length for a matrix-vector job over `rows` rows on nth threads: one
 * chunk per thread (fewer hand-offs), >= 16 rows and a multiple of 16 so chunks never
 * share an output cache line (and the four-row kernels group rows the same way
 * whatever the chunking), at most INFER_TEAM_MAX_CHUNKS chunks and as long as
 * the scratch allows (max_rows). */
int64_t infer_team_chunk_rows(int64_t rows, int nth, int64_t max_rows);

#ifdef __cplusplus
}
#endif
#endif
