/* types.c: type traits and portable fp16/bf16 conversions. */
#include "infer_kernels.h"

#include <string.h>

typedef struct { const char *name; int block; size_t bytes; int vec_dot_type; } traits;

static const traits type_traits[INFER_TYPE_COUNT] = {
    [INFER_TYPE_F32]  = {"f32", 1, 4, INFER_TYPE_F32},
    [INFER_TYPE_F16]  = {"f16", 1, 2, INFER_TYPE_F32},
    [INFER_TYPE_BF16] = {"bf16", 1, 2, INFER_TYPE_F32},
    [INFER_TYPE_Q4_0] = {"q4_0", QK4_0, sizeof(block_q4_0), INFER_TYPE_Q8_0},
    [INFER_TYPE_Q4_1] = {"q4_1", QK4_1, sizeof(block_q4_1), INFER_TYPE_Q8_1},
    [INFER_TYPE_Q5_0] = {"q5_0", QK5_0, sizeof(block_q5_0), INFER_TYPE_Q8_0},
    [INFER_TYPE_Q8_0] = {"q8_0", QK8_0, sizeof(block_q8_0), INFER_TYPE_Q8_0},
    [INFER_TYPE_Q8_1] = {"q8_1", QK8_1, sizeof(block_q8_1), -1},
    [INFER_TYPE_Q4_K] = {"q4_k", QK_K, sizeof(block_q4_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q6_K] = {"q6_k", QK_K, sizeof(block_q6_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q8_K] = {"q8_k", QK_K, sizeof(block_q8_K), -1},
    [INFER_TYPE_Q5_1] = {"q5_1", QK5_1, sizeof(block_q5_1), INFER_TYPE_Q8_1},
    [INFER_TYPE_Q2_K] = {"q2_k", QK_K, sizeof(block_q2_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q3_K] = {"q3_k", QK_K, sizeof(block_q3_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q5_K] = {"q5_k", QK_K, sizeof(block_q5_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ4_NL] = {"iq4_nl", QK4_NL, sizeof(block_iq4_nl), INFER_TYPE_Q8_0},
    [INFER_TYPE_IQ4_XS] = {"iq4_xs", QK_K, sizeof(block_iq4_xs), INFER_TYPE_Q8_K},
    [INFER_TYPE_MXFP4] = {"mxfp4", QK_MXFP4, sizeof(block_mxfp4), INFER_TYPE_Q8_0},
    [INFER_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, sizeof(block_iq2_xxs), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ2_XS] = {"iq2_xs", QK_K, sizeof(block_iq2_xs), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ2_S] = {"iq2_s", QK_K, sizeof(block_iq2_s), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, sizeof(block_iq3_xxs), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ3_S] = {"iq3_s", QK_K, sizeof(block_iq3_s), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ1_S] = {"iq1_s", QK_K, sizeof(block_iq1_s), INFER_TYPE_Q8_K},
    [INFER_TYPE_TQ1_0] = {"tq1_0", QK_K, sizeof(block_tq1_0), INFER_TYPE_Q8_K},
    [INFER_TYPE_TQ2_0] = {"tq2_0", QK_K, sizeof(block_tq2_0), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q4_0_R16] = {"q4_0_r16", QK4_0, sizeof(block_q4_0), INFER_TYPE_Q8_0S},
    [INFER_TYPE_Q4_1_R16] = {"q4_1_r16", QK4_1, sizeof(block_q4_1), INFER_TYPE_Q8_1},
    [INFER_TYPE_Q8_0_R16] = {"q8_0_r16", QK8_0, sizeof(block_q8_0), INFER_TYPE_Q8_0S},
    [INFER_TYPE_Q8_0S] = {"q8_0s", QK8_0, sizeof(block_q8_0s), -1},
    [INFER_TYPE_Q5_0_R16] = {"q5_0_r16", QK5_0, sizeof(block_q5_0), INFER_TYPE_Q8_0S},
    [INFER_TYPE_Q4_K_R16] = {"q4_k_r16", QK_K, sizeof(block_q4_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q6_K_R16] = {"q6_k_r16", QK_K, sizeof(block_q6_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q5_K_R16] = {"q5_k_r16", QK_K, sizeof(block_q5_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_IQ4_XS_R16] = {"iq4_xs_r16", QK_K, sizeof(block_iq4_xs), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q5_1_R16] = {"q5_1_r16", QK5_1, sizeof(block_q5_1), INFER_TYPE_Q8_1},
    [INFER_TYPE_IQ4_NL_R16] = {"iq4_nl_r16", QK4_NL, sizeof(block_iq4_nl), INFER_TYPE_Q8_0S},
    [INFER_TYPE_Q3_K_R16] = {"q3_k_r16", QK_K, sizeof(block_q3_K), INFER_TYPE_Q8_K},
    [INFER_TYPE_Q2_K_R16] = {"q2_k_r16", QK_K, sizeof(block_q2_K), INFER_TYPE_Q8_K},
};

static const traits *get(int type) {
    if (type < 0 || type >= INFER_TYPE_COUNT || type_traits[type].name == NULL) return NULL;
    return &type_traits[type];
}

int infer_type_block_size(int type) { const traits *t = get(type); return t ? t->block : 0; }
size_t infer_type_block_bytes(int type) { const traits *t = get(type); return t ? t->bytes : 0; }
int infer_type_vec_dot_type(int type) { const traits *t = get(type); return t ? t->vec_dot_type : -1; }
const char *infer_type_name(int type) { const traits *t = get(type); return t ? t->name : NULL; }

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float infer_fp16_to_fp32(infer_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  /* inf / NaN */
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in f32 */
        float v = (float)mant * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

infer_half infer_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)  /* inf or NaN (NaN kept quiet) */
        return (infer_half)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (infer_half)(sign | 0x7c00);  /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {
        /* result is subnormal or zero: round ax * 2^24 to nearest even integer */
        if (ax < 0x33000000u) return (infer_half)sign;  /* < 2^-25: rounds to zero */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;       /* value = m * 2^(e-150); want m * 2^(e-150+24) */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (infer_half)(sign | q);
    }
    /* normal: rebias exponent, round mantissa to 10 bits, nearest even */
    uint32_t r = ax - 0x38000000u;  /* exponent 127 -> 15 */
    uint32_t q = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (infer_half)(sign | q);
}

float infer_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t infer_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);  /* quiet NaN */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}
