/* gemma3_block.h: one decode step of a Gemma 3 model in one C call.
 *
 * infer/variants/gemma3.py describes the model in Python (and runs prefill that
 * way); this is the same computation for a single token in one C call, so a
 * decoded token costs one Python call and one thread-pool run instead of ~450
 * kernel calls.  The thread team is decode_team.h's, shared with llama_block.c.
 */
#ifndef INFER_GEMMA3_BLOCK_H
#define INFER_GEMMA3_BLOCK_H

#include <stdint.h>
#include "infer_kernels.h"
#include "decode_jobs.h"   /* infer_decode_matrix, infer_decode_act_bytes */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    infer_decode_matrix wq, wk, wv, wo, gate, up, down;
    float rope_base, rope_scale;   /* this layer's RoPE: pos * scale * base^(-2i/head_dim) */
    int window;                    /* attend to the last `window` positions; 0 = all */
} infer_gemma3_layer;

typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size;
    float rms_eps, attn_scale, embd_scale;
    const infer_gemma3_layer *layers;   /* n_layers of them */
    infer_decode_matrix embd, output;
    const float *output_norm;
} infer_gemma3_model;

/* Scratch and cache of one context; all buffers owned by the caller. */
typedef struct {
    int n_ctx;
    int kv_f16;                 /* 1: caches hold fp16, 0: f32 */
    void *k_cache, *v_cache;    /* [n_layers][n_kv_heads][n_ctx][head_dim], as kv_store writes */
    float *x, *h;               /* dim */
    float *q, *att;             /* n_heads * head_dim */
    float *k, *v;               /* n_kv_heads * head_dim */
    float *gate, *up;           /* ffn_dim */
    float *rope_cos, *rope_sin; /* head_dim / 2: pair i's cosine and sine (NEOX) */
    uint8_t *xq[3];             /* quantized inputs, each infer_decode_act_bytes(max(dim, ffn_dim, q_dim)) */
    float *logits;              /* vocab_size */
} infer_gemma3_state;

/* Embed `token` (scaled by embd_scale), run every layer at position `pos` (K/V
 * written at slot pos), then the output head into s->logits.  Returns 0, or -1
 * if a kernel the model needs is missing from the active table, -2 on bad
 * arguments. */
int infer_gemma3_decode(const infer_gemma3_model *m, infer_gemma3_state *s, int token, int pos);

#ifdef __cplusplus
}
#endif
#endif
