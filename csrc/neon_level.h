/* neon_level.h: which of the two NEON builds a *_neon.c translation unit is.
 *
 * setup.py and csrc/selftest/build.sh compile every *_neon.c twice:
 *   - for plain armv8-a: the "neon" set, which every AArch64 CPU runs (Advanced SIMD
 *     is mandatory there); integer dot products by widening multiplies;
 *   - with -DINFER_NEON_DOTPROD for armv8.2-a+dotprod: the "neon_dotprod" set, which
 *     dispatch.c offers only when the CPU reports SDOT (Cortex-A55/A76 and later,
 *     Graviton 2+, every Apple core; not Cortex-A53/A72 or Graviton 1).
 * The second build's fill functions carry the suffix _dotprod, so both link into one
 * module.  Everything else in the files is static.
 */
#ifndef INFER_NEON_LEVEL_H
#define INFER_NEON_LEVEL_H

#if defined(INFER_NEON_DOTPROD)
/* Apple clang targets a dotprod core by default and setup.py passes it no -march
 * (universal builds share one command line); anywhere else a missing flag is a
 * build bug, which would otherwise quietly give a second copy of the baseline set. */
#if !defined(__ARM_FEATURE_DOTPROD) && !defined(__APPLE__)
#error "INFER_NEON_DOTPROD needs -march=armv8.2-a+dotprod"
#endif
#define INFER_NEON_NAME(name) name##_dotprod
#else
#define INFER_NEON_NAME(name) name
#endif

/* SDOT only in the dotprod build: the baseline build keeps the widening multiplies
 * even where the compiler's default target has SDOT, so it runs on ARMv8.0. */
#if defined(INFER_NEON_DOTPROD) && defined(__ARM_FEATURE_DOTPROD)
#define INFER_NEON_SDOT 1
#else
#define INFER_NEON_SDOT 0
#endif

#endif
