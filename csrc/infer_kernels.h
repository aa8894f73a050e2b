/* infer_kernels.h: the public C API of infer's kernels.
 *
 * Block structs are laid out exactly as GGUF/ggml store them (see ggml-common.h);
 * their sizes are asserted at compile time.  Type ids are ggml's, so a GGUF tensor
 * type maps straight onto them.
 *
 * Every kernel has a portable scalar implementation (the oracle, *_scalar.c).  SIMD
 * translation units (*_avx2.c, *_avx512.c, *_neon.c) override entries of the
 * dispatch table; dispatch.c fills the table once, best ISA last.
 */
#ifndef INFER_KERNELS_H
#define INFER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids (ggml.h enum ggml_type). */
typedef enum {
    INFER_TYPE_F32  = 0,
    INFER_TYPE_F16  = 1,
    INFER_TYPE_Q4_0 = 2,
    INFER_TYPE_Q4_1 = 3,
    INFER_TYPE_Q5_0 = 6,
    INFER_TYPE_Q5_1 = 7,
    INFER_TYPE_Q8_0 = 8,
    INFER_TYPE_Q8_1 = 9,
    INFER_TYPE_Q2_K = 10,
    INFER_TYPE_Q3_K = 11,
    INFER_TYPE_Q4_K = 12,
    INFER_TYPE_Q5_K = 13,
    INFER_TYPE_Q6_K = 14,
    INFER_TYPE_Q8_K = 15,
    INFER_TYPE_IQ4_NL = 20,
    INFER_TYPE_IQ4_XS = 23,
    INFER_TYPE_IQ2_XXS = 16,
    INFER_TYPE_IQ2_XS = 17,
    INFER_TYPE_IQ3_XXS = 18,
    INFER_TYPE_IQ1_S = 19,
    INFER_TYPE_IQ3_S = 21,
    INFER_TYPE_IQ2_S = 22,
    INFER_TYPE_BF16 = 30,
    INFER_TYPE_TQ1_0 = 34,
    INFER_TYPE_TQ2_0 = 35,
    INFER_TYPE_MXFP4 = 39,
    /* infer's own formats, never in a file (ids past ggml's): weights repacked at
     * load so 16 rows interleave (repack_scalar.c), and the activation format that pairs
     * with three of them. */
    INFER_TYPE_Q4_0_R16 = 56,
    INFER_TYPE_Q4_1_R16 = 57,
    INFER_TYPE_Q8_0_R16 = 58,
    INFER_TYPE_Q8_0S = 59,
    INFER_TYPE_Q5_0_R16 = 60,
    INFER_TYPE_Q4_K_R16 = 61,   /* repack_k.h */
    INFER_TYPE_Q6_K_R16 = 62,
    INFER_TYPE_Q5_K_R16 = 63,
    INFER_TYPE_IQ4_XS_R16 = 64,
    INFER_TYPE_Q5_1_R16 = 65,   /* repack.h */
    INFER_TYPE_IQ4_NL_R16 = 66,
    INFER_TYPE_Q3_K_R16 = 67,   /* repack_k.h */
    INFER_TYPE_Q2_K_R16 = 68,
    INFER_TYPE_COUNT = 72  /* size of per-type tables; ids above are < this */
} infer_type;

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK8_0 32
#define QK8_1 32
#define QK5_1 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* Force-inlined helper for SIMD files: MSVC (the Windows wheels) has no
 * __attribute__, so use this rather than spelling the GCC attribute. */
#if defined(_MSC_VER) && !defined(__clang__)
#define INFER_ALWAYS_INLINE static __forceinline
#else
#define INFER_ALWAYS_INLINE static inline __attribute__((always_inline))
#endif

typedef uint16_t infer_half;   /* IEEE fp16 bits, little-endian */

typedef struct { infer_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { infer_half d; infer_half m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { infer_half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { infer_half d; int8_t qs[QK8_0]; } block_q8_0;
/* element = d*q + m, q in 0..31: low 4 bits as Q4_1, bit 4 of element j is bit j of qh */
typedef struct { infer_half d; infer_half m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
/* element = d * kvalues_iq4nl[nibble]; nibbles as Q4_0 (j low, j+16 high) */
typedef struct { infer_half d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
/* OCP microscaling FP4: element = 2^(e-127) * E2M1(nibble), kept as
 * infer_e8m0_half(e) * kvalues_mxfp4[nibble] (doubled E2M1 levels, halved scale);
 * nibbles as Q4_0.  17 bytes: blocks sit at odd offsets, read them bytewise. */
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;
/* s = d * sum(qs): the min term of Q4_1 . Q8_1 needs it. */
typedef struct { infer_half d; infer_half s; int8_t qs[QK8_1]; } block_q8_1;
/* Q8_0 with the exact sum of its qs: the offset term of the *_R16 kernels, which
 * multiply unsigned bytes by these (Q8_0_R16 stores w + 128, Q4_0_R16 q, not q - 8,
 * Q5_0_R16 q, not q - 16). */
typedef struct { infer_half d; int16_t sum; int8_t qs[QK8_0]; } block_q8_0s;
typedef struct {
    infer_half d;                    /* super-block scale for quantized scales */
    infer_half dmin;                 /* super-block scale for quantized mins */
    uint8_t scales[K_SCALE_SIZE];    /* 8 scales and 8 mins, 6 bits each */
    uint8_t qs[QK_K / 2];            /* 4-bit quants */
} block_q4_K;
typedef struct {
    uint8_t ql[QK_K / 2];            /* low 4 bits */
    uint8_t qh[QK_K / 4];            /* high 2 bits */
    int8_t scales[QK_K / 16];        /* 16 sub-block scales */
    infer_half d;
} block_q6_K;
/* 16 sub-blocks of 16: element = d*(sc&15)*q - dmin*(sc>>4), q in 0..3 */
typedef struct {
    uint8_t scales[QK_K / 16];       /* 4-bit scale (low) and min (high) per sub-block */
    uint8_t qs[QK_K / 4];            /* 2-bit quants */
    infer_half d;
    infer_half dmin;
} block_q2_K;
/* 16 sub-blocks of 16: element = d*(sc-32)*(q-4), q in 0..7, sc 6 bits */
typedef struct {
    uint8_t hmask[QK_K / 8];         /* bit 2 of q (set means no -4 offset) */
    uint8_t qs[QK_K / 4];            /* low 2 bits of q */
    uint8_t scales[12];              /* 16 scales of 6 bits */
    infer_half d;
} block_q3_K;
/* As Q4_K with a fifth bit per element in qh: q in 0..31 */
typedef struct {
    infer_half d;
    infer_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];            /* bit 4 of q */
    uint8_t qs[QK_K / 2];            /* low 4 bits of q */
} block_q5_K;
/* 8 sub-blocks of 32: element = d*(ls-32)*kvalues_iq4nl[nibble], ls 6 bits */
typedef struct {
    infer_half d;
    uint16_t scales_h;               /* top 2 bits of ls, sub-block j at bits 2j..2j+1 */
    uint8_t scales_l[QK_K / 64];     /* low 4 bits of ls, two sub-blocks a byte */
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
/* Activation-only format: d is f32 and may be negative.  Packed to 2-byte alignment
 * like the other blocks, so a Q8_K row may start at any even offset of a byte buffer
 * (the compiler then reads d without assuming 4-byte alignment). */
#pragma pack(push, 2)
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
#pragma pack(pop)

/* The IQ (grid) and TQ (ternary) formats, 256 elements each, all paired with Q8_K.
 * Sub-blocks of 32 pick grid points of 8 (IQ3: 4) elements by index; signs, scales and
 * index high bits are packed as below (iquants_scalar.c spells out each layout). */
typedef struct { infer_half d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;
typedef struct { infer_half d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;
typedef struct {
    infer_half d;
    uint8_t qs[QK_K / 4];            /* 32 grid index low bytes, then 32 sign bytes */
    uint8_t qh[QK_K / 32];           /* index bits 8..9, four per byte */
    uint8_t scales[QK_K / 32];       /* two 4-bit scales per sub-block of 32 */
} block_iq2_s;
typedef struct { infer_half d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;
typedef struct {
    infer_half d;
    uint8_t qs[QK_K / 4];            /* grid index low bytes */
    uint8_t qh[QK_K / 32];           /* index bit 8 */
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];       /* two 4-bit scales per 64 elements */
} block_iq3_s;
typedef struct { infer_half d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; } block_iq1_s;
typedef struct {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];  /* 5 trits per byte */
    uint8_t qh[QK_K / 64];                   /* 4 trits per byte */
    infer_half d;
} block_tq1_0;
typedef struct { uint8_t qs[QK_K / 4]; infer_half d; } block_tq2_0;

/* The layouts GGUF files have.  MSVC defines __STDC_VERSION__ (and has
 * _Static_assert) only under /std:c11, which setuptools does not pass: there an
 * array of negative size stops the build instead. */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define INFER_STATIC_ASSERT(cond, name) _Static_assert(cond, #name)
#else
#define INFER_STATIC_ASSERT(cond, name) typedef char infer_assert_##name[(cond) ? 1 : -1]
#endif
INFER_STATIC_ASSERT(sizeof(block_q4_0) == 18, block_q4_0_size);
INFER_STATIC_ASSERT(sizeof(block_q4_1) == 20, block_q4_1_size);
INFER_STATIC_ASSERT(sizeof(block_q5_0) == 22, block_q5_0_size);
INFER_STATIC_ASSERT(sizeof(block_q8_0) == 34, block_q8_0_size);
INFER_STATIC_ASSERT(sizeof(block_q8_1) == 36, block_q8_1_size);
INFER_STATIC_ASSERT(sizeof(block_q8_0s) == 36, block_q8_0s_size);
INFER_STATIC_ASSERT(sizeof(block_q4_K) == 144, block_q4_K_size);
INFER_STATIC_ASSERT(sizeof(block_q6_K) == 210, block_q6_K_size);
INFER_STATIC_ASSERT(sizeof(block_q8_K) == 292, block_q8_K_size);
INFER_STATIC_ASSERT(sizeof(block_q5_1) == 24, block_q5_1_size);
INFER_STATIC_ASSERT(sizeof(block_q2_K) == 84, block_q2_K_size);
INFER_STATIC_ASSERT(sizeof(block_q3_K) == 110, block_q3_K_size);
INFER_STATIC_ASSERT(sizeof(block_q5_K) == 176, block_q5_K_size);
INFER_STATIC_ASSERT(sizeof(block_iq4_nl) == 18, block_iq4_nl_size);
INFER_STATIC_ASSERT(sizeof(block_iq4_xs) == 136, block_iq4_xs_size);
INFER_STATIC_ASSERT(sizeof(block_mxfp4) == 17, block_mxfp4_size);
INFER_STATIC_ASSERT(sizeof(block_iq2_xxs) == 66, block_iq2_xxs_size);
INFER_STATIC_ASSERT(sizeof(block_iq2_xs) == 74, block_iq2_xs_size);
INFER_STATIC_ASSERT(sizeof(block_iq2_s) == 82, block_iq2_s_size);
INFER_STATIC_ASSERT(sizeof(block_iq3_xxs) == 98, block_iq3_xxs_size);
INFER_STATIC_ASSERT(sizeof(block_iq3_s) == 110, block_iq3_s_size);
INFER_STATIC_ASSERT(sizeof(block_iq1_s) == 50, block_iq1_s_size);
INFER_STATIC_ASSERT(sizeof(block_tq1_0) == 54, block_tq1_0_size);
INFER_STATIC_ASSERT(sizeof(block_tq2_0) == 66, block_tq2_0_size);

/* ---- type traits ---------------------------------------------------------- */
/* Elements per block (1 for F32/F16/BF16); 0 for an unsupported type. */
int infer_type_block_size(int type);
/* Bytes per block; 0 for an unsupported type. */
size_t infer_type_block_bytes(int type);
/* Activation format a weight type's dot product pairs with (ggml vec_dot_type);
 * -1 for an unsupported type.  F32 and F16 weights pair with F32 activations here. */
int infer_type_vec_dot_type(int type);
/* Short lower-case name ("q4_1"), or NULL. */
const char *infer_type_name(int type);

/* ---- fp16 / bf16 scalar conversions (portable) ----------------------------- */
float infer_fp16_to_fp32(infer_half h);
infer_half infer_fp32_to_fp16(float f);     /* round to nearest even */
float infer_bf16_to_fp32(uint16_t h);
uint16_t infer_fp32_to_bf16(float f);       /* round to nearest even, NaN quiet */
/* An MXFP4 block's scale 2^(e-127) halved (its levels are doubled), as ggml's
 * GGML_E8M0_TO_FP32_HALF: 2^(e-128) as f32 bits, e = 0 and 1 the subnormals 2^-128 and
 * 2^-127; e = 255 is 2^127, not NaN (ggml reads no E8M0 value as NaN). */
static inline float infer_e8m0_half(uint8_t e) {
    union { uint32_t bits; float value; } v;
    v.bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.value;
}

/* ---- kernel signatures ----------------------------------------------------- */
/* n is the element count, a multiple of the type's block size. */
typedef void (*infer_dequantize_fn)(const void *src, float *dst, int64_t n);
typedef void (*infer_dequantize_f16_fn)(const void *src, infer_half *dst, int64_t n);
typedef void (*infer_quantize_fn)(const float *src, void *dst, int64_t n);
/* Dot of n elements: w in weight format, a in its vec_dot_type format. */
typedef float (*infer_vec_dot_fn)(int64_t n, const void *w, const void *a);
typedef void (*infer_vec_dot_4_fn)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                   float *out);
typedef void (*infer_vec_dot_4x4_fn)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                     size_t a_stride, float *out, size_t out_stride);
typedef void (*infer_vec_dot_4xn_fn)(int64_t n, const void *w, size_t row_bytes, const void *a,
                                     size_t a_stride, int n_tok, float *out, size_t out_stride);
typedef void (*infer_vec_dot_rx8_fn)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows,
                                     const void *a, size_t a_stride, float *out, size_t out_stride);
/* n_groups groups of 16 rows of a *_R16 format (one after another from w) against
 * n_tok >= 1 activation rows (a_stride bytes apart): out[t * out_stride + r] = row r .
 * token t for r < 16 * n_groups.  Each token's results do not depend on n_tok. */
typedef void (*infer_matmul_r16_fn)(int64_t n, const void *w, int64_t n_groups, const void *a,
                                    size_t a_stride, int64_t n_tok, float *out, size_t out_stride);

typedef void (*infer_rmsnorm_fn)(const float *x, const float *weight, float *out,
                                 int64_t n, float eps);
typedef void (*infer_layernorm_fn)(const float *x, const float *weight, const float *bias,
                                   float *out, int64_t n, float eps);
typedef void (*infer_softmax_fn)(float *x, int64_t n);
/* out[i] = act(gate[i]) * up[i] */
typedef void (*infer_glu_fn)(const float *gate, const float *up, float *out, int64_t n);

/* a[i] += b[i] */
typedef void (*infer_add_fn)(float *a, const float *b, int64_t n);
/* x[i] *= s */
typedef void (*infer_scale_fn)(float *x, float s, int64_t n);
/* Rotates one head in place by the angles of one position.  NORMAL ordering
 * (GGUF `llama`): pairs (2i, 2i+1); cs and sn hold rot_dim entries, the cosine
 * and sine of pair i repeated at 2i and 2i+1.  NEOX ordering (gemma3, qwen2):
 * pairs (i, i + rot_dim/2); cs and sn hold rot_dim/2 entries.  Elements from
 * rot_dim on are left alone (the caller never passes them). */
typedef void (*infer_rope_fn)(float *x, const float *cs, const float *sn, int64_t rot_dim);
/* One query row against n_pos >= 1 consecutive cache rows of one KV head (rows of
 * head_dim elements, F32 or F16 bits as the entry's name says), online softmax:
 * out = sum_p softmax_p(scale * q.k_p) v_p.  out may alias q.
 * head_dim <= INFER_ATTN_MAX_HEAD_DIM. */
#define INFER_ATTN_MAX_HEAD_DIM 1024
typedef void (*infer_attn_fn)(const float *q, const void *k, const void *v, int64_t n_pos,
                              int64_t head_dim, float scale, float *out);
/* The same for n_q query rows at once, each over its own cache rows [lo[u], hi[u]]
 * (lo[u] <= hi[u]) of one KV head: rows are read once for all n_q queries (the
 * query heads of a KV head, consecutive tokens).  out[u] may alias q[u].  When ml
 * is not NULL, ml[2u] and ml[2u+1] receive the max of the scaled scores and the
 * sum of exp(score - max), so that attention over split position ranges can be
 * merged.  softcap > 0 caps every scaled score s to softcap * tanh(s / softcap)
 * (Gemma 2); 0 leaves them alone.  n_q <= INFER_ATTN_MAX_Q, n_q * head_dim <=
 * INFER_ATTN_MAX_QD (stack scratch). */
#define INFER_ATTN_MAX_Q 16
#define INFER_ATTN_MAX_QD 4096
typedef void (*infer_attn_block_fn)(int64_t n_q, const float *const *q, float *const *out,
                                    const int64_t *lo, const int64_t *hi, const void *k,
                                    const void *v, int64_t head_dim, float scale, float softcap,
                                    float *ml);

/* Weight rows stream from memory once per product, so the kernels that take four
 * rows at a time (vec_dot_4xn, vec_dot_rx8) request the rows INFER_PREFETCH_ROWS
 * past theirs themselves, a few cache lines per block (infer_prefetch_part): the
 * driver's burst of four rows' lines before each call (43 lines for a 640-column
 * Q8_0 row group) overflowed the core's miss buffers and lost most of them, which
 * left a mat-vec streaming from memory at a third of its in-cache speed.  Rows past
 * the matrix are harmless: a prefetch never faults. */
#define INFER_PREFETCH_ROWS 16
/* INFER_PREFETCH: weights, read once (non-temporal).  INFER_PREFETCH_SOON: into the
 * core's second-level cache, not the first, where lines fetched ahead of a pass evict
 * the pass's own (the repacked kernels' weights for a batch of tokens, repack.h;
 * attention's cache rows, ops_internal.h).  INFER_PREFETCH_WRITE: a line about to be
 * written (the KV cache slot of a decoded token). */
#if defined(__GNUC__) || defined(__clang__)
#define INFER_PREFETCH(p) __builtin_prefetch((p), 0, 0)
#define INFER_PREFETCH_SOON(p) __builtin_prefetch((p), 0, 2)
#define INFER_PREFETCH_WRITE(p) __builtin_prefetch((p), 1, 2)
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <xmmintrin.h>
#define INFER_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_NTA)
#define INFER_PREFETCH_SOON(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#define INFER_PREFETCH_WRITE(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#else
#define INFER_PREFETCH(p) ((void)(p))
#define INFER_PREFETCH_SOON(p) ((void)(p))
#define INFER_PREFETCH_WRITE(p) ((void)(p))
#endif

/* The lines of bytes bytes from p, at once (a row ahead, where a kernel has no
 * block loop to spread them over). */
INFER_ALWAYS_INLINE void infer_prefetch_lines(const uint8_t *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) INFER_PREFETCH(p + off);
}

/* At step b of nb, the lines of span bytes from p up to (b + 1) / nb of the span
 * (*done: the bytes requested so far); nothing when p is NULL. */
INFER_ALWAYS_INLINE void infer_prefetch_part_to(const uint8_t *p, size_t *done, size_t span, int64_t b,
                                                int64_t nb, int soon) {
    if (!p) return;
    const size_t upto = (size_t)(b + 1) * span / (size_t)nb;
    for (; *done < upto; *done += 64) {
        if (soon) INFER_PREFETCH_SOON(p + *done);   /* a constant in each caller */
        else INFER_PREFETCH(p + *done);
    }
}

INFER_ALWAYS_INLINE void infer_prefetch_part(const uint8_t *p, size_t *done, size_t span, int64_t b, int64_t nb) {
    infer_prefetch_part_to(p, done, span, b, nb, 0);
}

/* The same into the second-level cache (INFER_PREFETCH_SOON). */
INFER_ALWAYS_INLINE void infer_prefetch_part_soon(const uint8_t *p, size_t *done, size_t span, int64_t b,
                                                  int64_t nb) {
    infer_prefetch_part_to(p, done, span, b, nb, 1);
}

#define INFER_DOT_4XN_MAX 4
#define INFER_DOT_RX8_MAX_N 4096   /* the transposed activations live on the stack */

/* The dispatch table: scalar entries first, SIMD fill functions override. */
typedef struct {
    const char *name;
    infer_dequantize_fn dequantize[INFER_TYPE_COUNT];
    infer_dequantize_f16_fn dequantize_f16[INFER_TYPE_COUNT];
    infer_quantize_fn quantize[INFER_TYPE_COUNT];
    infer_vec_dot_fn vec_dot[INFER_TYPE_COUNT];   /* indexed by weight type */
    infer_rmsnorm_fn rmsnorm;
    infer_layernorm_fn layernorm;
    infer_softmax_fn softmax;
    infer_glu_fn silu_mul;
    infer_glu_fn gelu_mul;
    infer_add_fn add;
    infer_scale_fn scale;
    infer_rope_fn rope_norm;
    infer_rope_fn rope_neox;
    infer_attn_fn attn_f32;        /* F32 cache */
    infer_attn_fn attn_f16;        /* F16 cache */
    infer_attn_block_fn attn_block_f32;
    infer_attn_block_fn attn_block_f16;
    /* Optional, by weight type: four weight rows (row_bytes apart) against one
     * activation row, out[k] = row k . a.  Mat-vec uses it when set, so the
     * activation loads and scales are shared by four rows. */
    infer_vec_dot_4_fn vec_dot_4[INFER_TYPE_COUNT];
    /* Optional, by weight type: four weight rows against four activation rows
     * (a_stride bytes apart), out[t * out_stride + k] = row k . token t.  Mat-mul uses
     * it so each weight block is unpacked once for four tokens. */
    infer_vec_dot_4x4_fn vec_dot_4x4[INFER_TYPE_COUNT];
    /* Optional, by weight type: four weight rows against n_tok (1..INFER_DOT_4XN_MAX)
     * activation rows, out[t * out_stride + k] = row k . token t.  Each result is
     * bit-identical to the kernel's own one-token result (so a batch of any size
     * gives each sequence the numbers it gets alone), not necessarily to vec_dot_4's
     * (the offset formats sum each block's integers exactly before scaling); the
     * mat-mul driver prefers it to vec_dot_4 and vec_dot_4x4 when set, for every
     * token count, a mat-vec included, and leaves the prefetch of the rows ahead to
     * it (INFER_PREFETCH_ROWS). */
    infer_vec_dot_4xn_fn vec_dot_4xn[INFER_TYPE_COUNT];
    /* Optional, by weight type, only where vec_dot_4xn is set: n_rows weight rows
     * against 8 activation rows, out[t * out_stride + r] = row r . token t, for
     * n <= INFER_DOT_RX8_MAX_N; each result bit-identical to vec_dot_4xn's.  The
     * mat-mul driver uses it for every whole group of 8 tokens. */
    infer_vec_dot_rx8_fn vec_dot_rx8[INFER_TYPE_COUNT];
    /* By weight type: 1 where vec_dot_4 prefetches the four rows INFER_PREFETCH_ROWS
     * ahead itself (as every vec_dot_4xn does), so the driver does not. */
    unsigned char vec_dot_4_prefetches[INFER_TYPE_COUNT];
    /* By *_R16 type: its only product kernel (no vec_dot: a row is spread over
     * its group); the mat-mul driver calls it for whole groups of 16 rows. */
    infer_matmul_r16_fn matmul_r16[INFER_TYPE_COUNT];
    /* By file type: the *_R16 type worth repacking it into for this table (its
     * kernel is faster than the file format's), or 0 to keep the file's rows. */
    unsigned char repack_to[INFER_TYPE_COUNT];
} infer_kernel_table;

/* ISA ids, lowest to highest. */
typedef enum {
    INFER_ISA_SCALAR = 0,
    INFER_ISA_AVX2 = 1,
    INFER_ISA_AVX512 = 2,
    INFER_ISA_NEON = 3,          /* any AArch64 CPU (ARMv8.0 Advanced SIMD) */
    INFER_ISA_NEON_DOTPROD = 4,  /* AArch64 with SDOT (ARMv8.2 dotprod) */
    INFER_ISA_COUNT = 5
} infer_isa;

/* Each ISA file defines its fill function; it overrides what it implements.
 * quants_*.c: the 32-element block formats and f16/bf16/f32;
 * kquants_*.c: the 256-element K formats; ops_*.c: float ops and attention. */
void infer_fill_table_scalar(infer_kernel_table *t);
void infer_fill_table_avx2(infer_kernel_table *t);
void infer_fill_table_avx512(infer_kernel_table *t);
void infer_fill_table_neon(infer_kernel_table *t);
void infer_fill_kquants_scalar(infer_kernel_table *t);
void infer_fill_kquants_avx2(infer_kernel_table *t);
void infer_fill_kquants_avx512(infer_kernel_table *t);
void infer_fill_kquants_neon(infer_kernel_table *t);
void infer_fill_ops_scalar(infer_kernel_table *t);
/* kquants235_*.c: Q2_K, Q3_K, Q5_K; iq4_*.c: IQ4_NL, IQ4_XS, MXFP4. */
void infer_fill_kquants235_scalar(infer_kernel_table *t);
void infer_fill_kquants235_avx2(infer_kernel_table *t);
void infer_fill_kquants235_avx512(infer_kernel_table *t);
void infer_fill_kquants235_neon(infer_kernel_table *t);
void infer_fill_kquants235_neon_dotprod(infer_kernel_table *t);
void infer_fill_iq4_scalar(infer_kernel_table *t);
void infer_fill_iq4_avx2(infer_kernel_table *t);
void infer_fill_iq4_avx512(infer_kernel_table *t);
void infer_fill_iq4_neon(infer_kernel_table *t);
void infer_fill_iq4_neon_dotprod(infer_kernel_table *t);
/* iquants_*.c: the IQ2/IQ3/IQ1 grid formats and TQ1_0/TQ2_0. */
void infer_fill_iquants_scalar(infer_kernel_table *t);
void infer_fill_iquants_avx2(infer_kernel_table *t);
void infer_fill_iquants_neon(infer_kernel_table *t);
void infer_fill_iquants_neon_dotprod(infer_kernel_table *t);
void infer_fill_ops_avx2(infer_kernel_table *t);
void infer_fill_ops_avx512(infer_kernel_table *t);
void infer_fill_ops_neon(infer_kernel_table *t);
/* The *_neon.c files built a second time for armv8.2-a+dotprod (neon_level.h). */
void infer_fill_table_neon_dotprod(infer_kernel_table *t);
void infer_fill_kquants_neon_dotprod(infer_kernel_table *t);
void infer_fill_ops_neon_dotprod(infer_kernel_table *t);

/* repack_scalar.c: the *_R16 formats.  infer_repack_type(type) is the *_R16 type of a
 * file type (0: none); infer_repack_r16 writes rows (a multiple of 16) rows of
 * cols values, row_bytes apart, into dst in that format (rows x the same row
 * size).  Returns 0, or -1 for a type without one or sizes that do not fit. */
int infer_repack_type(int type);
int infer_repack_r16(int type, const void *src, size_t row_bytes, int64_t rows, int64_t cols, void *dst);
void infer_fill_repack_scalar(infer_kernel_table *t);
void infer_fill_repack_avx512(infer_kernel_table *t);

/* ---- float-op drivers (attention.c): shape loops over the table's kernels ---- */
/* Bad arguments (sizes, types, rot_dim) return -1 and touch nothing; 0 on success. */

/* RoPE in place on x [n_tokens, n_heads, head_dim]; token t at position
 * positions[t], or pos0 + t when positions is NULL.  Angle of pair i:
 * pos * inv_freq[i] with infer_rope_inv_freq's frequencies, computed in double;
 * the rotated values are scaled by attn_factor (YaRN/LongRoPE magnitude; 1 for
 * none).  rot_dim even, 2 <= rot_dim <= head_dim <= INFER_ATTN_MAX_HEAD_DIM. */
int infer_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               int64_t rot_dim, const int64_t *positions, int64_t pos0,
               float freq_base, float freq_scale, const float *freq_factors,
               float attn_factor, int neox);

/* inv_freq[i] = freq_scale * freq_base^(-2i/rot_dim) / freq_factors[i] for the
 * rot_dim/2 pairs (freq_factors NULL: all 1), in double.  The one place RoPE
 * frequencies are computed: prefill (infer_rope) and the fused decode step
 * turn a position by exactly the same angles. */
void infer_rope_inv_freq(double *inv_freq, int64_t rot_dim, float freq_base, float freq_scale,
                         const float *freq_factors);

/* Causal attention of q [n_tokens, n_heads, head_dim] over a cache laid out
 * [n_kv_heads, n_ctx, head_dim] (kv_type INFER_TYPE_F32 or INFER_TYPE_F16).
 * Query head h reads KV head h / (n_heads / n_kv_heads).  Token t sits at
 * p = pos0 + t and attends to positions [lo, p], lo = max(0, p - window + 1)
 * when window > 0, else 0.  softcap as infer_attn_block_fn's (0: off).
 * Writes out [n_tokens, n_heads, head_dim] (may alias q).
 * Runs on the thread pool; a work item is a block of tokens times the query
 * heads of one KV head, which then read each K/V row once. */
int infer_attention(const float *q, const void *k_cache, const void *v_cache, int kv_type,
                    int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                    int64_t n_ctx, int64_t pos0, int64_t window, float scale, float softcap,
                    float *out);
/* infer_attention with learned attention sinks (gpt-oss): sinks[h] (n_heads values,
 * or NULL: none) is a logit of query head h that joins each softmax's denominator
 * only (ggml's soft_max with sinks): out = sum_p exp(s_p - M) v_p / (sum_p exp(s_p - M)
 * + exp(sinks[h] - M)), M the larger of the scores' max and sinks[h]. */
int infer_attention_sinks(const float *q, const void *k_cache, const void *v_cache, int kv_type,
                          int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                          int64_t n_ctx, int64_t pos0, int64_t window, float scale, float softcap,
                          const float *sinks, float *out);
/* The weight of an attention result of (max m, sum l) once a sink logit joins its
 * denominator: l / (l + exp(sink - m)), computed without overflow. */
float infer_sink_factor(float m, float l, float sink);

/* Writes x [n_tokens, n_kv_heads, head_dim] float32 into a cache laid out
 * [n_kv_heads, n_ctx, head_dim] (F32, or F16 rounded to nearest even) at
 * positions pos0 .. pos0 + n_tokens - 1. */
int infer_kv_store(const float *x, void *cache, int kv_type, int64_t n_tokens,
                   int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx, int64_t pos0);

/* ---- the gated DeltaNet recurrence (deltanet.c) ------------------------------ */
/* The largest head (state_size) the recurrence takes: its scratch is on the stack. */
#define INFER_DELTA_NET_MAX_STATE 1024
/* q, k [n_tokens, n_k_heads, d]; v, out [n_tokens, n_v_heads, d]; g, beta
 * [n_tokens, n_v_heads]; state [n_v_heads, d, d] with state[h][i][j] = S_h[i][j]
 * (key i, value j), updated in place.  Value head h reads q/k head h % n_k_heads
 * (llama.cpp's tiled order).  Per token: S *= exp(g); S += k (beta (v - S^T k))^T;
 * out = scale S^T q.  Returns -1 (touching nothing) for bad sizes, else 0. */
int infer_gated_delta_net(const float *q, const float *k, const float *v, const float *g,
                          const float *beta, float *state, float *out, int64_t n_tokens,
                          int64_t n_k_heads, int64_t n_v_heads, int64_t d, float scale);

/* ---- the Mamba2 selective scan (mamba2.c) ------------------------------------- */
/* xbc [n_tokens, n_heads * head_dim + 2 * n_groups * d_state]: per token x (head h at
 * h * head_dim), then B and C (n_groups x d_state each); dt [n_tokens, n_heads]
 * (after the softplus); a, d_skip [n_heads]; state [n_heads, head_dim, d_state],
 * updated in place; y [n_tokens, n_heads * head_dim].  Head h reads group
 * h / (n_heads / n_groups).  Per token: S = S exp(dt a) + (x dt) B^T; y = S C + d_skip x.
 * Returns -1 (touching nothing) for bad sizes, else 0. */
int infer_mamba2_scan(const float *xbc, const float *dt, const float *a, const float *d_skip, float *state,
                      float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t d_state,
                      int64_t n_groups);

/* ---- row drivers (rows.c): many rows of n consecutive floats, on the thread pool
 * when there are enough elements to share ---------------------------------------- */
void infer_rmsnorm_rows(const float *x, const float *weight, float *out, int64_t rows, int64_t n,
                        float eps);
void infer_layernorm_rows(const float *x, const float *weight, const float *bias, float *out,
                          int64_t rows, int64_t n, float eps);
void infer_softmax_rows(float *x, int64_t rows, int64_t n);   /* in place */
/* out = act(gate) * up over n elements; act is GELU (tanh) if gelu is 1, SiLU if 0, and
 * gpt-oss's clamped SwiGLU if INFER_GLU_SWIGLU_OAI (below). */
void infer_glu(int gelu, const float *gate, const float *up, float *out, int64_t n);
/* gpt-oss's clamped SwiGLU (ggml's swiglu_oai with llama.cpp's alpha 1.702 and limit 7):
 * g = min(gate, 7), u = clamp(up, -7, 7), out = g / (1 + exp(-1.702 g)) * (u + 1).
 * One plain loop (an infer_glu_fn); infer_glu(INFER_GLU_SWIGLU_OAI, ...) runs it over rows. */
#define INFER_GLU_SWIGLU_OAI 2
#define INFER_SWIGLU_OAI_ALPHA 1.702f
#define INFER_SWIGLU_OAI_LIMIT 7.0f
void infer_swiglu_oai(const float *gate, const float *up, float *out, int64_t n);

/* ---- dispatch (dispatch.c) -------------------------------------------------- */
/* Bit mask of ISAs this CPU (and OS) can run; bit i = infer_isa i. */
unsigned infer_isa_available(void);
/* Active table; initialised on first call from CPU detection and INFER_ISA. */
const infer_kernel_table *infer_kernels(void);
infer_isa infer_isa_active(void);
const char *infer_isa_name(int isa);
/* Force a set (must be available); returns 0 on success, -1 otherwise. */
int infer_set_isa(int isa);
/* The table of one ISA, for tests comparing paths; NULL if unavailable. */
const infer_kernel_table *infer_kernels_for(int isa);

/* ---- thread pool (threadpool.c) --------------------------------------------- */
/* Runs fn(arg, ith, nth) on nth = infer_get_num_threads() workers (the caller is
 * worker 0) and returns when all are done.  Not reentrant: calls from several
 * host threads at once are serialised by the pool. */
typedef void (*infer_task_fn)(void *arg, int ith, int nth);
void infer_parallel_run(infer_task_fn fn, void *arg);
void infer_set_num_threads(int n);
int infer_get_num_threads(void);
int infer_default_num_threads(void);


/* ---- mat-vec / mat-mul over the dispatch table (matmul.c) ------------------- */
/* w: rows weight rows of cols elements, row_bytes apart (row_bytes >= the packed row
 * size, so a row may be a view into a larger tensor).  Activations are quantized into
 * the weight type's vec_dot_type (F32 for f32/f16/bf16 weights: used as they are).
 * out is n_tokens x rows (row-major); for one token, out[r] = w[r] . x.
 * Functions returning int give 0 on success, -1 when the type has no kernel in the
 * active table or the sizes are not whole blocks, -2 when scratch allocation fails. */
/* Bytes of one activation row of cols values for weight type `type`; 0 if unsupported. */
size_t infer_activation_row_bytes(int type, int64_t cols);
/* x: n_tokens x cols floats -> xq: n_tokens rows of infer_activation_row_bytes each. */
int infer_quantize_activations(int type, const float *x, int64_t n_tokens, int64_t cols,
                               void *xq);
int infer_matvec_q(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                   const void *xq, float *out);
int infer_matmul_q(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                   const void *xq, int64_t n_tokens, float *out);
/* Rows [r0, r1) of infer_matmul_q on the calling thread only, for callers that split
 * the rows over their own threads (a fused block inside infer_parallel_run): uses the
 * four-row kernels and prefetching.  out[t * out_stride + r] for r in [r0, r1). */
int infer_matmul_rows(int type, const void *w, size_t row_bytes, int64_t cols, int64_t r0,
                      int64_t r1, const void *xq, int64_t n_tokens, float *out,
                      int64_t out_stride);
/* Quantize then multiply; scratch holds n_tokens activation rows, or NULL to allocate. */
int infer_matvec(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                 const float *x, float *out, void *scratch);
int infer_matmul(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols,
                 const float *x, int64_t n_tokens, float *out, void *scratch);

#ifdef __cplusplus
}
#endif
#endif
