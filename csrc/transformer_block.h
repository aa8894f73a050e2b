/* transformer_block.h: one decode step of a transformer of the Llama family, for
 * a batch of sequences, in one C call.
 *
 * infer/variants/spec.py describes the model (TransformerSpec) and
 * infer/variants/transformer.py runs prefill from it in Python; this is the same
 * computation for one token of each of B sequences, each at its own position
 * with its own KV cache.  The matrix products run once with B columns (each
 * weight row is read once for the whole batch), attention per sequence.  A step
 * costs one Python call and one thread-pool run instead of hundreds.
 *
 * Every optional piece of the spec is a NULL pointer or a 0 here: biases,
 * q/k norms (per head, before or after RoPE, or over the whole projection),
 * pre and post norms, RoPE (per layer: none, adjacent pairs or halves, with its
 * own frequencies), sliding windows, soft-capping, scales; and Gemma 4's:
 * per-layer head sizes, KV heads and FFN widths, layers that read an earlier
 * layer's cache (own_kv 0), V from K's projection, V norms, layer output scales
 * and per-layer embeddings (PLE).
 *
 * A sequence's cache is kv_rows rows of n_ctx * kv_row_width elements; layer l's
 * K (or V) is [n_kv_heads(l)][n_ctx][head_dim(l)] at the start of row kv_row(l).
 * With every layer of the model's sizes and its own row, that is the
 * [n_layers][n_kv_heads][n_ctx][head_dim] cache kv_store writes.
 *
 * A layer with conv_width > 0 is a gated short convolution (LFM2's shortconv)
 * instead of attention: b, c, u = h Wb, h Wc, h Wu; the gated input b * u goes to
 * the sequence's conv cache at its position (like K and V, so truncation and
 * copies stay exact); y = c * sum_k kernel[:, k] * cache[pos - width + 1 + k]
 * (positions before 0 are zeros); x += y Wconv_out.
 *
 * A layer with deltanet set is Qwen3.5's gated DeltaNet instead of attention
 * (TransformerContext._deltanet): mixed, z, a, b = h Wqkv, h Wgate, h Walpha, h Wbeta;
 * a causal depthwise conv of dn_conv_width taps over the sequence's last
 * dn_conv_width - 1 inputs (its ssm_conv, oldest first, shifted by one) and mixed,
 * then SiLU, gives q, k (dn_k_heads heads, L2-normalised) and v (dn_v_heads heads)
 * of dn_d_state values; g = softplus(a + ssm_dt) * ssm_a, beta = sigmoid(b); the
 * recurrence (deltanet.c's head function, on the sequence's ssm_state) gives out;
 * x += (rmsnorm(out, ssm_norm) per head * silu(z)) Wssm_out.
 * A layer with mamba2 set is Granite 4.0-H's Mamba2 mixer instead of attention
 * (TransformerContext._mamba2): z | xBC | dt = h Wssm_in (m2_d_inner, m2_conv_dim =
 * m2_d_inner + 2 m2_n_groups m2_d_state and m2_n_heads values); the causal conv of
 * m2_conv_width taps over the sequence's ssm_conv and xBC, plus ssm_conv_b, then
 * SiLU; dt = softplus(dt + ssm_dt); the scan (mamba2.c's head function, on the
 * sequence's ssm_state of m2_n_heads x head_dim x m2_d_state) with ssm_a and
 * ssm_d gives y; y *= silu(z), RMS-normalised per group of m2_d_inner / m2_n_groups
 * (no weight), times ssm_norm; x += y Wssm_out.
 * With attn_output_gate, wq projects q and a gate per head ([q | gate] of head_dim
 * each) and the attention output is multiplied by sigmoid(gate) before wo.
 */
#ifndef INFER_TRANSFORMER_BLOCK_H
#define INFER_TRANSFORMER_BLOCK_H

#include <stdint.h>
#include "infer_kernels.h"
#include "decode_jobs.h"   /* infer_decode_matrix, infer_decode_act_bytes */

#ifdef __cplusplus
extern "C" {
#endif

enum { INFER_ROPE_NONE = 0, INFER_ROPE_NORM = 1, INFER_ROPE_NEOX = 2 };
/* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_*: how router logits become expert weights
 * (infer_block_model.expert_gating) */
enum { INFER_GATING_SOFTMAX = 0, INFER_GATING_SIGMOID = 1, INFER_GATING_SOFTMAX_WEIGHT = 2 };

/* The most sequences one step takes (the team's chunk and scratch limits). */
#define INFER_BLOCK_MAX_BATCH 16
/* The most experts a token is routed to in a mixture of experts (real models: 2-8). */
#define INFER_BLOCK_MAX_EXPERTS_USED 64

typedef struct {
    const float *attn_norm, *ffn_norm;          /* dim; both NULL: no pre-norms (the halves read x) */
    const float *q_norm, *k_norm;               /* head_dim, per head (q_dim and kv_dim with
                                                   qk_norm_whole); or NULL */
    const float *post_attn_norm, *post_ffn_norm;   /* dim, or NULL */
    const float *q_bias, *k_bias, *v_bias;      /* q_dim, kv_dim, kv_dim; or all NULL */
    /* gate, up, down: with a mixture of experts, every expert's matrix stacked
     * (expert e: rows e * ffn_dim.. of gate and up, e * dim.. of down) */
    infer_decode_matrix wq, wk, wv, wo, gate, up, down;
    infer_decode_matrix router;    /* n_experts x dim (a mixture of experts; else unused) */
    /* the shared expert (shared_ffn_dim > 0): its FFN and the F32 vector (dim) of its gate */
    infer_decode_matrix shexp_gate, shexp_up, shexp_down;
    const float *shexp_gate_inp;
    /* wk, wv: no data without own_kv; wv: none with v_from_k */
    int head_dim, n_kv_heads, ffn_dim;   /* this layer's sizes (<= the model's) */
    int kv_row;                    /* the cache row holding this layer's K/V */
    int own_kv;                    /* 0: attends to kv_row as an earlier layer stored it */
    int v_from_k;                  /* V is K's projection, before K's norm and RoPE */
    float out_scale;               /* multiplies the layer's output (1: none) */
    infer_decode_matrix ple_gate, ple_proj;   /* per_layer_dim x dim, dim x per_layer_dim (PLE) */
    const float *ple_post_norm;    /* dim; NULL without PLE */
    int rope;                      /* INFER_ROPE_* */
    int rope_dims;                 /* rotated elements of a head (even, <= head_dim) */
    const double *rope_inv_freq;   /* rope_dims / 2 frequencies (infer_rope_inv_freq) */
    float rope_attn_factor;        /* multiplies cos and sin */
    int window;                    /* attend to the last `window` positions; 0 = all */
    /* shortconv layers only (conv_width > 0; wq, wk, wv, wo and the q/k pieces unused) */
    int conv_width;                /* taps of the depthwise convolution; 0: an attention layer */
    int conv_index;                /* the layer's slot in each sequence's conv cache */
    const float *conv_kernel;      /* dim x conv_width, tap conv_width - 1 on the current position */
    infer_decode_matrix conv_b, conv_c, conv_u, conv_out;   /* dim x dim each */
    /* a mixture of experts' layer: ffn_dim is one expert's width */
    int dense_ffn;                 /* 1: a dense FFN in a model with experts (LFM2-MoE's leading layers) */
    const float *exp_probs_b;      /* n_experts selection biases (llama.cpp's exp_probs_b), or NULL */
    /* the layer's xIELU (infer_block_model.ffn_xielu) as ggml_xielu's op parameters:
     * u > 0: alpha_p u^2 + beta u; else (expm1(min(u, eps)) - u) alpha_n + beta u */
    float xielu_alpha_n, xielu_alpha_p, xielu_beta, xielu_eps;
    /* gated DeltaNet layers only (deltanet 1; wq, wk, wv, wo and the q/k pieces unused) */
    int deltanet;
    int dn_index;                  /* the layer's slot in each sequence's ssm_state and ssm_conv */
    infer_decode_matrix ssm_qkv;   /* dn_conv_dim x dim */
    infer_decode_matrix ssm_gate;  /* dn_value_dim x dim */
    infer_decode_matrix ssm_alpha, ssm_beta;   /* dn_v_heads x dim each */
    infer_decode_matrix ssm_out;   /* dim x dn_value_dim */
    const float *ssm_conv;         /* dn_conv_dim x dn_conv_width, tap dn_conv_width - 1 on the current input */
    const float *ssm_dt, *ssm_a;   /* dn_v_heads each (ssm_a = -exp(A_log)) */
    const float *ssm_norm;         /* dn_d_state */
    /* gpt-oss: each may be NULL */
    const float *attn_sinks;       /* n_heads logits that join each softmax's denominator only */
    const float *o_bias;           /* dim, added to the attention output's projection */
    const float *router_bias;      /* n_experts, added to the router's logits */
    const float *gate_exps_bias, *up_exps_bias;   /* n_experts x ffn_dim: expert e's at e * ffn_dim */
    const float *down_exps_bias;   /* n_experts x dim */
    const float *attn_norm_b, *ffn_norm_b;   /* dim: the LayerNorms' biases (layer_norm only), or NULL */
    /* an FFN without a gate (ffn_relu_sqr, ffn_xielu, ffn_gelu; no experts): ffn_dim and dim
     * biases of the up and down products, both or neither (Phi-2, StarCoder2) */
    const float *ffn_up_b, *ffn_down_b;
    /* Mamba2 layers only (mamba2 1; wq, wk, wv, wo and the q/k pieces unused): dn_index
     * is the slot in each sequence's ssm_state and ssm_conv; ssm_conv (m2_conv_dim x
     * m2_conv_width), ssm_dt, ssm_a (m2_n_heads), ssm_norm (m2_d_inner) and ssm_out
     * (dim x m2_d_inner) as above with Mamba2's sizes */
    int mamba2;
    infer_decode_matrix ssm_in;    /* (2 m2_d_inner + 2 m2_n_groups m2_d_state + m2_n_heads) x dim */
    const float *ssm_d;            /* m2_n_heads: the skip D x */
    const float *ssm_conv_b;       /* m2_conv_dim, or NULL */
} infer_block_layer;

typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size;   /* sizes: the largest layer's */
    int kv_rows, kv_row_width;     /* the cache's rows, elements per position in a row */
    int v_norm;                    /* V RMS-normalised per head without a weight */
    const float *ones;             /* head_dim ones (the V norm's weight) */
    int per_layer_dim;             /* PLE width; 0: none */
    infer_decode_matrix ple_embd, ple_model_proj;   /* vocab x (n_layers * per_layer_dim), its x dim */
    const float *ple_proj_norm;    /* per_layer_dim */
    int gelu;                      /* FFN activation: 0 SiLU, 1 GELU (tanh) */
    float rms_eps;
    float attn_scale;              /* multiplies q.k */
    float attn_softcap;            /* scores -> c tanh(score / c); 0 = off */
    float embd_scale, residual_scale, logit_scale;
    float final_softcap;           /* logits -> c tanh(logit / c); 0 = off */
    /* a mixture of experts in every layer (but dense_ffn ones) when n_experts > 0:
     * softmax over the router's logits, the n_experts_used most probable (the lower index first
     * among equals), their weights divided by their sum (clamped at 2^-14) if
     * expert_norm, times expert_scale */
    int n_experts, n_experts_used, expert_norm;
    float expert_scale;
    /* a shared expert of this width on every token, times sigmoid(h . shexp_gate_inp); 0: none */
    int shared_ffn_dim;
    const infer_block_layer *layers;   /* n_layers of them */
    infer_decode_matrix embd, output;
    const float *output_norm;
    int qk_norm_whole;             /* 1: q_norm / k_norm span all of q / k (OLMo 2), 0: one head */
    int qk_norm_after_rope;        /* 1: the per-head q/k norms follow RoPE (Hunyuan), 0: precede it */
    int n_conv_layers;             /* layers with conv_width > 0 (the conv caches' first dimension) */
    /* INFER_GATING_*: softmax (above), or each expert's own sigmoid; with a layer's
     * exp_probs_b the experts are chosen by probability + bias, weighted by the
     * probability alone; or softmax_weight: the top n_experts_used by logit, weighted
     * by the softmax of their logits alone (gpt-oss) */
    int expert_gating;
    /* 1: an FFN without a gate, relu(h Wup)^2 Wdown (Arcee; no experts): a layer's gate,
     * of up's shape, is not read.  0: act(h Wgate) * h Wup (act by gelu). */
    int ffn_relu_sqr;
    /* 1: likewise without a gate, xielu(h Wup) Wdown with each layer's parameters (Apertus) */
    int ffn_xielu;
    /* gated DeltaNet layers (deltanet set): n_deltanet_layers of them, their sizes;
     * ones (above) then holds max(head_dim, dn_d_state) ones */
    int n_deltanet_layers;
    int dn_conv_width, dn_d_state, dn_k_heads, dn_v_heads;
    float dn_l2_eps;               /* the q/k L2 norms' epsilon over d_state (rms_eps / d_state) */
    int attn_output_gate;          /* 1: wq also projects a sigmoid gate of each head's output */
    /* attention temperature (Ministral 3): q at position p is multiplied by
     * 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1); attn_temp_scale 0: off */
    float attn_temp_scale;
    int attn_temp_floor;
    int swiglu_oai;                /* 1: the FFN activation is gpt-oss's clamped SwiGLU (over gelu) */
    int layer_norm;                /* 1: attn_norm, ffn_norm and output_norm are LayerNorms (weight, no
                                      bias; Cohere), 0: RMSNorms; rms_eps is their epsilon */
    int parallel;                  /* 1: x += FFN(h) + attention(h), both from h = norm(x) (Cohere 2;
                                      ffn_norm is attn_norm and there are no post norms) */
    const float *output_norm_b;    /* dim: the output LayerNorm's bias (layer_norm only), or NULL */
    /* 1: likewise without a gate, gelu(h Wup) Wdown, GELU's tanh approximation (Phi-2, StarCoder2) */
    int ffn_gelu;
    const float *output_b;         /* vocab_size: added to the logits before logit_scale, or NULL */
    /* Mamba2 layers (mamba2 set): n_mamba2_layers of them, their sizes (no model has
     * both these and deltanet layers); ones then holds at least m2_d_inner / m2_n_groups */
    int n_mamba2_layers;
    int m2_conv_width, m2_d_state, m2_d_inner, m2_n_heads, m2_n_groups;
    /* 1: the shared expert is added without a gate (Granite 4.0-H; shexp_gate_inp unused) */
    int shared_ungated;
} infer_block_model;

/* One sequence of a batch: its cache, its token and position, its logits. */
typedef struct {
    int n_ctx;
    int kv_f16;                 /* 1: caches hold fp16, 0: f32 */
    void *k_cache, *v_cache;    /* [kv_rows][n_ctx * kv_row_width] (see above) */
    int token, pos;             /* K/V of `token` go to slot pos */
    float *logits;              /* vocab_size */
    float *conv_cache;          /* [n_conv_layers][n_ctx][dim] gated inputs; NULL without shortconv layers */
    /* [n_deltanet_layers][dn_v_heads][dn_d_state][dn_d_state] recurrent states and
     * [n_deltanet_layers][dn_conv_width - 1][dn_conv_dim] last conv inputs, advanced
     * by one token; NULL without deltanet layers.  Mamba2 layers keep theirs in the
     * same two: [n_mamba2_layers][m2_n_heads][m2_d_inner / m2_n_heads][m2_d_state] and
     * [n_mamba2_layers][m2_conv_width - 1][m2_conv_dim] */
    float *ssm_state, *ssm_conv;
} infer_block_seq;

/* Activations of a batch of up to max_batch tokens; all buffers owned by the
 * caller, sized by infer_block_scratch_floats / infer_decode_act_bytes. */
typedef struct {
    int max_batch;
    float *x, *h;               /* max_batch x dim */
    float *q, *att;             /* max_batch x q_dim */
    float *k, *v;               /* max_batch x kv_dim */
    float *gate, *up;           /* max_batch x max(ffn_dim, shared_ffn_dim) */
    float *rope_cs;             /* 2 angle slots x max_batch x 2 x head_dim (cos, sin) */
    float *ple;                 /* max_batch x n_layers x per_layer_dim (PLE; else NULL) */
    float *ple_proj;            /* max_batch x n_layers x per_layer_dim (PLE; else NULL) */
    float *probs;               /* max_batch x n_experts (a mixture of experts; else unused) */
    float *moe_in, *moe_rows, *moe_out;   /* max_batch x dim each (likewise) */
    uint8_t *xq[3];             /* each infer_decode_act_bytes(max(dim, ffn_dim, q_dim, shared_ffn_dim, per_layer_dim), max_batch) */
    float *conv;                /* max_batch x 4 x dim (b, c, u per token, then y); NULL without shortconv */
    /* deltanet layers: max_batch x (2 dn_conv_dim + 2 dn_value_dim + 2 dn_v_heads) (else NULL);
     * attn_output_gate: max_batch x 2 q_dim (else NULL) */
    float *dn;
    float *q_gate;
    float *m2;                  /* Mamba2 layers: max_batch x infer_block_mamba2_floats (else NULL) */
} infer_block_scratch;

/* Floats of infer_block_scratch.dn per token. */
int64_t infer_block_deltanet_floats(const infer_block_model *m);
/* Floats of infer_block_scratch.m2 per token (0 without Mamba2 layers). */
int64_t infer_block_mamba2_floats(const infer_block_model *m);

/* Decode seqs[i].token at seqs[i].pos for every i < n_seqs (distinct caches),
 * writing their K/V and logits.  Returns 0; -1 if a kernel the model needs is
 * missing from the active table; -2 on bad arguments (nothing is written). */
int infer_block_decode(const infer_block_model *m, const infer_block_scratch *s,
                       const infer_block_seq *seqs, int n_seqs);

/* out[i] = 1 / (1 + expf(-x[i])) for i < n (in place allowed): the sigmoid the step
 * gates with, which the Python blocks call too so that both round alike. */
void infer_block_sigmoid(const float *x, float *out, int64_t n);

/* Checks what infer_block_decode would check of the model alone: 0, -1 or -2. */
int infer_block_check_model(const infer_block_model *m);

#ifdef __cplusplus
}
#endif
#endif
