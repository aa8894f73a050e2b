/* dispatch.c: CPU feature detection and the kernel table.
 *
 * Compiled without ISA flags: it only asks the CPU what it has.  A feature counts
 * only when the OS saves its register state too (XGETBV), as ggml does.
 * INFER_ISA=scalar|avx2|avx512|neon|neon_dotprod forces a lower set (tests run every
 * path).
 */
#include "infer_kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define INFER_X86 1
#if defined(_MSC_VER)
#include <intrin.h>
static void cpuid(int leaf, int sub, unsigned r[4]) {
    int v[4];
    __cpuidex(v, leaf, sub);
    r[0] = (unsigned)v[0]; r[1] = (unsigned)v[1]; r[2] = (unsigned)v[2]; r[3] = (unsigned)v[3];
}
static unsigned long long xgetbv0(void) { return _xgetbv(0); }
#else
#include <cpuid.h>
static void cpuid(int leaf, int sub, unsigned r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif
#endif

#if defined(__aarch64__) || defined(_M_ARM64)
#define INFER_ARM64 1
/* setup.py builds the dotprod copy of the NEON files with every compiler but MSVC
 * (whose ARM64 intrinsics have no SDOT we could rely on): there the baseline NEON
 * set is the best one. */
#if !defined(_MSC_VER)
#define INFER_NEON_DOTPROD_BUILT 1
#endif
#if defined(__linux__) || defined(__FreeBSD__)
#include <sys/auxv.h>
#define HWCAP_BIT_ASIMDDP (1ul << 20)   /* AT_HWCAP bit, Linux and FreeBSD alike */
#elif defined(_WIN32) && defined(INFER_NEON_DOTPROD_BUILT)
#include <windows.h>
#ifndef PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE
#define PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE 43
#endif
#endif

#ifdef INFER_NEON_DOTPROD_BUILT
/* 1 if the CPU has SDOT/UDOT (ARMv8.2 dotprod; optional until ARMv8.4).  Only plain
 * integer code here, so it runs on any AArch64 CPU. */
static int cpu_has_dotprod(void) {
#if defined(__APPLE__)
    return 1;   /* every arm64 Mac (M1 and later) is ARMv8.4+ */
#elif defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_BIT_ASIMDDP) != 0;
#elif defined(__FreeBSD__)
    unsigned long hwcap = 0;
    return elf_aux_info(AT_HWCAP, &hwcap, sizeof hwcap) == 0 && (hwcap & HWCAP_BIT_ASIMDDP) != 0;
#elif defined(_WIN32)
    return IsProcessorFeaturePresent(PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE) != 0;
#else
    return 0;   /* cannot tell: the baseline NEON set is safe */
#endif
}
#endif
#endif

static unsigned detect(void) {
    unsigned mask = 1u << INFER_ISA_SCALAR;
#ifdef INFER_X86
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    if (max_leaf < 7) return mask;
    cpuid(1, 0, r);
    int fma = (r[2] >> 12) & 1, osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1;
    int f16c = (r[2] >> 29) & 1;
    if (!osxsave) return mask;
    unsigned long long xcr0 = xgetbv0();
    int ymm_ok = (xcr0 & 0x6) == 0x6;            /* XMM and YMM state */
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    cpuid(7, 0, r);
    int avx2 = (r[1] >> 5) & 1;
    int avx512f = (r[1] >> 16) & 1, avx512bw = (r[1] >> 30) & 1, avx512vl = (r[1] >> 31) & 1;
    int avx512dq = (r[1] >> 17) & 1;
    int avx512vnni = (r[2] >> 11) & 1;
    if (ymm_ok && avx && avx2 && fma && f16c) mask |= 1u << INFER_ISA_AVX2;
    if ((mask & (1u << INFER_ISA_AVX2)) && zmm_ok && avx512f && avx512bw && avx512vl &&
        avx512dq && avx512vnni)
        mask |= 1u << INFER_ISA_AVX512;
#endif
#ifdef INFER_ARM64
    mask |= 1u << INFER_ISA_NEON;   /* Advanced SIMD is mandatory on AArch64 */
#ifdef INFER_NEON_DOTPROD_BUILT
    if (cpu_has_dotprod()) mask |= 1u << INFER_ISA_NEON_DOTPROD;
#endif
#endif
    return mask;
}

static const char *const isa_names[INFER_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon",
                                                        "neon_dotprod"};

const char *infer_isa_name(int isa) {
    return (isa >= 0 && isa < INFER_ISA_COUNT) ? isa_names[isa] : NULL;
}

static infer_kernel_table tables[INFER_ISA_COUNT];
static unsigned available;
static int active = -1;

static void fill(int isa, infer_kernel_table *t) {
    memset(t, 0, sizeof *t);
    /* Each higher set starts from the lower ones, so a SIMD file may cover
     * only part of the table. */
    infer_fill_table_scalar(t);
    infer_fill_kquants_scalar(t);
    infer_fill_ops_scalar(t);
    infer_fill_kquants235_scalar(t);
    infer_fill_iq4_scalar(t);
    infer_fill_iquants_scalar(t);
    infer_fill_repack_scalar(t);
#ifdef INFER_X86
    if (isa == INFER_ISA_AVX2 || isa == INFER_ISA_AVX512) {
        infer_fill_table_avx2(t);
        infer_fill_kquants_avx2(t);
        infer_fill_ops_avx2(t);
        infer_fill_kquants235_avx2(t);
        infer_fill_iq4_avx2(t);
        infer_fill_iquants_avx2(t);
    }
    if (isa == INFER_ISA_AVX512) {
        infer_fill_table_avx512(t);
        infer_fill_kquants_avx512(t);
        infer_fill_ops_avx512(t);
        infer_fill_kquants235_avx512(t);
        infer_fill_iq4_avx512(t);
        infer_fill_repack_avx512(t);
    }
#endif
#ifdef INFER_ARM64
    if (isa == INFER_ISA_NEON || isa == INFER_ISA_NEON_DOTPROD) {
        infer_fill_table_neon(t);
        infer_fill_kquants_neon(t);
        infer_fill_ops_neon(t);
        infer_fill_kquants235_neon(t);
        infer_fill_iq4_neon(t);
        infer_fill_iquants_neon(t);
    }
#ifdef INFER_NEON_DOTPROD_BUILT
    if (isa == INFER_ISA_NEON_DOTPROD) {
        infer_fill_table_neon_dotprod(t);
        infer_fill_kquants_neon_dotprod(t);
        infer_fill_ops_neon_dotprod(t);
        infer_fill_kquants235_neon_dotprod(t);
        infer_fill_iq4_neon_dotprod(t);
        infer_fill_iquants_neon_dotprod(t);
    }
#endif
#endif
    t->name = isa_names[isa];
}

static int best_isa(unsigned mask) {
    for (int isa = INFER_ISA_COUNT - 1; isa >= 0; isa--)
        if (mask & (1u << isa)) return isa;
    return INFER_ISA_SCALAR;
}

static void init(void) {
    /* Benign race: every thread computes the same values. */
    if (active >= 0) return;
    available = detect();
    for (int isa = 0; isa < INFER_ISA_COUNT; isa++)
        if (available & (1u << isa)) fill(isa, &tables[isa]);
    int chosen = best_isa(available);
    const char *env = getenv("INFER_ISA");
    if (env && *env) {
        for (int isa = 0; isa < INFER_ISA_COUNT; isa++)
            if (strcmp(env, isa_names[isa]) == 0 && (available & (1u << isa))) chosen = isa;
    }
    active = chosen;
}

unsigned infer_isa_available(void) { init(); return available; }
infer_isa infer_isa_active(void) { init(); return (infer_isa)active; }
const infer_kernel_table *infer_kernels(void) { init(); return &tables[active]; }

const infer_kernel_table *infer_kernels_for(int isa) {
    init();
    if (isa < 0 || isa >= INFER_ISA_COUNT || !(available & (1u << isa))) return NULL;
    return &tables[isa];
}

int infer_set_isa(int isa) {
    init();
    if (isa < 0 || isa >= INFER_ISA_COUNT || !(available & (1u << isa))) return -1;
    active = isa;
    return 0;
}
