/* decode_team.c: the thread team of the fused decode steps (see decode_team.h). */
#include "decode_team.h"
#include "infer_kernels.h"

#include <stddef.h>
#include <string.h>

#define T_NEXT(t) ((int64_t)((t) & 0xFFFFFF))
#define T_TOTAL(t) ((int64_t)(((t) >> 24) & 0xFFFFFF))
#define T_GEN(t) ((int64_t)((t) >> 48))

/* Commit chunk c of generation gen from scratch unless another thread did. */
static void commit(infer_decode_team *t, const void *job, int64_t gen, int64_t c, const float *scratch) {
    if (!infer_atomic_cas(&t->state[c], gen << 2, (gen << 2) | 1))
        return;
    t->copy(t->ctx, job, c, scratch);
    infer_atomic_store(&t->state[c], (gen << 2) | 2);
    infer_atomic_add(&t->done, 1);
}

/* Claim and run chunks of the published job until none are left. */
static void work(infer_decode_team *t, float *scratch) {
    infer_team_published local;
    uint64_t tk = (uint64_t)infer_atomic_load(&t->ticket);
    while (T_NEXT(tk) < T_TOTAL(tk)) {
        if (infer_atomic_cas(&t->ticket, (int64_t)tk, (int64_t)(tk + 1))) {
            const int64_t seq = infer_atomic_load(&t->job_seq);
            memcpy(&local, (const void *)&t->job, offsetof(infer_team_published, body) + t->job_size);
            infer_atomic_fence();
            if (!(seq & 1) && seq == infer_atomic_load(&t->job_seq) && local.gen == T_GEN(tk)) {
                t->compute(t->ctx, local.body.bytes, T_NEXT(tk), scratch);
                commit(t, local.body.bytes, T_GEN(tk), T_NEXT(tk), scratch);
            }
        }
        tk = (uint64_t)infer_atomic_load(&t->ticket);
    }
}

static void backoff(int *spins) {
    if (++*spins < 2048) infer_cpu_relax();
    else infer_yield_thread();
}

void infer_team_job(infer_decode_team *t, const void *job, int64_t total) {
    float *scratch = t->leader_scratch;
    if (t->nth == 1) {
        for (int64_t c = 0; c < total; c++) {
            t->compute(t->ctx, job, c, scratch);
            t->copy(t->ctx, job, c, scratch);
        }
        return;
    }
    const int64_t gen = (T_GEN((uint64_t)infer_atomic_load(&t->ticket)) + 1) & 0xFFFF;
    infer_atomic_add(&t->job_seq, 1);  /* odd: being rewritten */
    memcpy(t->job.body.bytes, job, t->job_size);
    t->job.gen = gen;
    infer_atomic_add(&t->job_seq, 1);
    for (int64_t c = 0; c < total; c++) infer_atomic_store(&t->state[c], gen << 2);
    infer_atomic_store(&t->done, 0);
    infer_atomic_store(&t->ticket, (int64_t)(((uint64_t)gen << 48) | ((uint64_t)total << 24)));
    work(t, scratch);
    int spins = 0;
    while (infer_atomic_load(&t->done) < total) {
        /* Grace for a running helper to finish its chunk (tens of microseconds).
         * Pure spinning: yielding here would hand the core to another process
         * for a whole time slice. */
        if (spins++ < t->grace_spins) {
            infer_cpu_relax();
            continue;
        }
        for (int64_t c = 0; c < total; c++) {
            if (infer_atomic_load(&t->state[c]) == gen << 2) {
                t->compute(t->ctx, t->job.body.bytes, c, scratch);  /* its helper is not running */
                commit(t, t->job.body.bytes, gen, c, scratch);
            }
        }
        /* what is left is being copied by a helper right now */
        int copy_spins = 0;
        while (infer_atomic_load(&t->done) < total) backoff(&copy_spins);
    }
}

static void team_worker(void *arg, int ith, int nth) {
    infer_decode_team *t = (infer_decode_team *)arg;
    float scratch[INFER_TEAM_SCRATCH_FLOATS];
    if (ith == 0) {
        t->nth = nth;
        t->leader_scratch = scratch;
        t->leader(t->ctx, t);
        infer_atomic_store(&t->finished, 1);
        return;
    }
    int spins = 0;
    while (!infer_atomic_load(&t->finished)) {
        uint64_t tk = (uint64_t)infer_atomic_load(&t->ticket);
        if (T_NEXT(tk) < T_TOTAL(tk)) {
            work(t, scratch);
            spins = 0;
        } else {
            backoff(&spins);
        }
    }
}

void infer_team_run(infer_decode_team *t, void *ctx, infer_team_leader_fn leader,
                    infer_team_compute_fn compute, infer_team_copy_fn copy, size_t job_size,
                    int64_t grace_spins) {
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
    t->leader = leader;
    t->compute = compute;
    t->copy = copy;
    t->job_size = job_size < INFER_TEAM_JOB_BYTES ? job_size : INFER_TEAM_JOB_BYTES;
    t->grace_spins = grace_spins > 0 ? grace_spins : 1024;
    infer_parallel_run(team_worker, t);
}

int64_t infer_team_chunk_rows(int64_t rows, int nth, int64_t max_rows) {
    /* One chunk per thread: each claim, job copy and commit is a contended cache
     * line, and on a quiet machine the threads finish equal halves together
     * (measured on 2 cores: 8 chunks per thread 295-340 tok/s, 1 chunk 375). */
    int64_t chunk = (rows + nth - 1) / nth;
    if (chunk < (rows + INFER_TEAM_MAX_CHUNKS - 1) / INFER_TEAM_MAX_CHUNKS)
        chunk = (rows + INFER_TEAM_MAX_CHUNKS - 1) / INFER_TEAM_MAX_CHUNKS;
    if (chunk > max_rows) {
        /* more chunks than threads (the scratch is full): a multiple of nth of
         * them, so that no thread is left with one chunk more than the others
         * (three chunks of a batched gate/up on two threads took 1.33x two) */
        int64_t n = (rows + max_rows - 1) / max_rows;
        n = (n + nth - 1) / nth * nth;
        chunk = (rows + n - 1) / n;
    }
    return chunk < 16 ? 16 : (chunk + 15) & ~(int64_t)15;
}
