/* atomics.h: the few atomic operations the thread pool and the fused decode
 * steps need, with one GCC/Clang branch (__atomic builtins) and one Windows
 * branch (Interlocked*), plus the spin-wait hints.
 *
 * Every operation is sequentially consistent (a full barrier on Windows): the
 * thread pool's sleep hand-off is a store-then-load on two words from both sides
 * (a Dekker pattern), which acquire/release alone would not order.  On x86 and
 * AArch64 a sequentially consistent load costs what an acquire load does, and the
 * read-modify-writes are locked/exclusive either way.
 */
#ifndef INFER_ATOMICS_H
#define INFER_ATOMICS_H

#include <stdint.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
typedef volatile LONG64 infer_atomic_i64;
static inline int64_t infer_atomic_load(infer_atomic_i64 *p) { return InterlockedCompareExchange64(p, 0, 0); }
static inline void infer_atomic_store(infer_atomic_i64 *p, int64_t v) { InterlockedExchange64(p, v); }
/* Returns the new value. */
static inline int64_t infer_atomic_add(infer_atomic_i64 *p, int64_t v) { return InterlockedExchangeAdd64(p, v) + v; }
/* 1 when *p held `expect` and now holds v, else 0 (and *p is unchanged). */
static inline int infer_atomic_cas(infer_atomic_i64 *p, int64_t expect, int64_t v) {
    return InterlockedCompareExchange64(p, v, expect) == expect;
}
/* A full barrier: orders every access before it ahead of every access after it. */
static inline void infer_atomic_fence(void) { MemoryBarrier(); }
static inline void infer_cpu_relax(void) { YieldProcessor(); }
static inline void infer_yield_thread(void) { SwitchToThread(); }
#else
#include <sched.h>
typedef volatile int64_t infer_atomic_i64;
static inline int64_t infer_atomic_load(infer_atomic_i64 *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline void infer_atomic_store(infer_atomic_i64 *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static inline int64_t infer_atomic_add(infer_atomic_i64 *p, int64_t v) {
    return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST);
}
static inline int infer_atomic_cas(infer_atomic_i64 *p, int64_t expect, int64_t v) {
    return __atomic_compare_exchange_n(p, &expect, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
static inline void infer_atomic_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void infer_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
static inline void infer_yield_thread(void) { sched_yield(); }
#endif

#endif /* INFER_ATOMICS_H */
