/* ops_internal.h: what the ops_<isa>.c files share (not part of the public API). */
#ifndef INFER_OPS_INTERNAL_H
#define INFER_OPS_INTERNAL_H

#include "infer_kernels.h"

/* Attention walks the cache in chunks of this many positions: the scores of a
 * chunk, one rescale of each query's accumulator if its running max grew (online
 * softmax), then the weighted V rows.  The scratch is a chunk, never the context. */
#define ATTN_CHUNK 64

/* A decode-shaped call (a few queries) over a long span reads its cache rows from
 * memory: in a decode step the weights read since the layer's last step have
 * evicted them.  The hardware prefetchers stop at page boundaries, so the kernels
 * also prefetch the rows ATTN_PREFETCH_BYTES ahead of those they read.  Measured
 * (Zen 5, alternated in one process, one token over 24 layers' caches): Gemma 3's
 * KV head of 256 over 4096 positions 0.70-0.78x the time, SmolLM2's three of 64
 * 0.81-0.96x.  Over a span that stays in cache the extra instructions cost 0-23%,
 * so a call with many queries (prefill, which reads each chunk for all of them)
 * or a span under ATTN_PREFETCH_MIN_SPAN_BYTES of K rows does not prefetch.
 * The rows go to the second-level cache (INFER_PREFETCH_SOON): into the first, 16 KB
 * ahead of a pass over 64 rows, they evicted each other (Gemma 3's KV head of 256:
 * 32 KB of K a pass).  The same 24 layers then took 0.69x the time with Gemma 3's
 * shape and 0.73x with SmolLM2's (2 threads; 0.74x at one), and a decode step at
 * depth 4000 0.85x on SmolLM2 and 0.97x on Gemma 3 (whose step is mostly its head).
 * Into L2, short spans gain too, and a nearer distance does: from 128 KB and 16 KB
 * ahead to 8 KB and 4 KB, SmolLM2's heads over 200 positions from memory took 0.74x
 * the time (over 1000, 0.79x; Gemma 3's over 4096 the same), and its decode step for
 * 8 sequences at depths up to 300 0.91-0.94x (one sequence: within noise). */
#define ATTN_PREFETCH_MAX_Q 8
#define ATTN_PREFETCH_MIN_SPAN_BYTES (8 * 1024)
#define ATTN_PREFETCH_BYTES (4 * 1024)

/* Cache rows [row, row + n) of d values (f16 or f32) at base into the cache. */
static inline void attn_prefetch_rows(const void *base, int64_t row, int64_t n, int64_t d, int f16) {
    const size_t row_bytes = (size_t)d * (f16 ? 2 : 4);
    const char *p = (const char *)base + (size_t)row * row_bytes;
    for (size_t o = 0; o < (size_t)n * row_bytes; o += 64) INFER_PREFETCH_SOON(p + o);
}

/* Helpers taking a constant flag (F16 or F32 cache, queries per pass) must be
 * inlined so that each kernel compiles without the branches. */
#if defined(_MSC_VER)
#define ALWAYS_INLINE __forceinline
#else
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

#endif
