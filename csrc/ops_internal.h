/* ops_internal.h: what the ops_<isa>.c files share (not part of the public API). */
#ifndef INFER_OPS_INTERNAL_H
#define INFER_OPS_INTERNAL_H

/* Attention walks the cache in chunks of this many positions: the scores of a
 * chunk, one rescale of each query's accumulator if its running max grew (online
 * softmax), then the weighted V rows.  The scratch is a chunk, never the context. */
#define ATTN_CHUNK 64

/* Helpers taking a constant flag (F16 or F32 cache, queries per pass) must be
 * inlined so that each kernel compiles without the branches. */
#if defined(_MSC_VER)
#define ALWAYS_INLINE __forceinline
#else
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

#endif
