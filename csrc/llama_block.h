/* llama_block.h: one decode step of a Llama-family model in one C call.
 *
 * infer/variants/llama.py describes the model in Python (and runs prefill that
 * way); this is the same computation for a single token in one C call, so a
 * decoded token costs one Python call and one thread-pool run instead of hundreds.
 */
#ifndef INFER_LLAMA_BLOCK_H
#define INFER_LLAMA_BLOCK_H

#include <stdint.h>
#include "infer_kernels.h"
#include "decode_jobs.h"   /* infer_decode_matrix, infer_decode_act_bytes */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const float *attn_norm, *ffn_norm;
    infer_decode_matrix wq, wk, wv, wo, gate, up, down;
} infer_llama_layer;

typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size;
    float rope_base, rms_eps;
    const infer_llama_layer *layers;   /* n_layers of them */
    infer_decode_matrix embd, output;
    const float *output_norm;
} infer_llama_model;

/* Scratch and cache of one context; all buffers owned by the caller. */
typedef struct {
    int n_ctx;
    int kv_f16;                 /* 1: caches hold fp16, 0: f32 */
    void *k_cache, *v_cache;    /* [n_layers][n_kv_heads][n_ctx][head_dim], as kv_store writes */
    float *x, *h;               /* dim */
    float *q, *att;             /* n_heads * head_dim */
    float *k, *v;               /* n_kv_heads * head_dim */
    float *gate, *up;           /* ffn_dim */
    float *rope_cos, *rope_sin; /* head_dim: pair i's cosine and sine at 2i and 2i+1 */
    uint8_t *xq[3];             /* quantized inputs, each infer_decode_act_bytes(max(dim, ffn_dim, q_dim)) */
    float *logits;              /* vocab_size */
} infer_llama_state;

/* Embed `token`, run every layer at position `pos` (writing K/V at slot pos),
 * then the output head into s->logits.  Returns 0, or -1 if a kernel the model
 * needs is missing from the active table, -2 on bad arguments. */
int infer_llama_decode(const infer_llama_model *m, infer_llama_state *s, int token, int pos);

#ifdef __cplusplus
}
#endif
#endif
