# C declarations of csrc/infer_kernels.h, shared by the Cython modules.
from libc.stdint cimport int64_t, uint16_t

cdef extern from "infer_kernels.h" nogil:
    ctypedef uint16_t infer_half
    int INFER_TYPE_COUNT
    int INFER_ISA_COUNT

    int infer_type_block_size(int type) noexcept
    size_t infer_type_block_bytes(int type) noexcept
    int infer_type_vec_dot_type(int type) noexcept
    const char *infer_type_name(int type) noexcept

    float infer_fp16_to_fp32(infer_half h) noexcept
    infer_half infer_fp32_to_fp16(float f) noexcept

    ctypedef void (*infer_dequantize_fn)(const void *src, float *dst, int64_t n) noexcept
    ctypedef void (*infer_dequantize_f16_fn)(const void *src, infer_half *dst, int64_t n) noexcept
    ctypedef void (*infer_quantize_fn)(const float *src, void *dst, int64_t n) noexcept
    ctypedef float (*infer_vec_dot_fn)(int64_t n, const void *w, const void *a) noexcept
    ctypedef void (*infer_rmsnorm_fn)(const float *x, const float *weight, float *out, int64_t n, float eps) noexcept
    ctypedef void (*infer_layernorm_fn)(const float *x, const float *weight, const float *bias, float *out, int64_t n, float eps) noexcept
    ctypedef void (*infer_softmax_fn)(float *x, int64_t n) noexcept
    ctypedef void (*infer_glu_fn)(const float *gate, const float *up, float *out, int64_t n) noexcept
    ctypedef void (*infer_add_fn)(float *a, const float *b, int64_t n) noexcept
    ctypedef void (*infer_scale_fn)(float *x, float s, int64_t n) noexcept
    ctypedef void (*infer_rope_fn)(float *x, const float *cs, const float *sn, int64_t rot_dim) noexcept
    ctypedef void (*infer_attn_fn)(const float *q, const void *k, const void *v, int64_t n_pos, int64_t head_dim, float scale, float *out) noexcept
    ctypedef void (*infer_attn_block_fn)(int64_t n_q, const float *const *q, float *const *out, const int64_t *lo, const int64_t *hi, const void *k, const void *v, int64_t head_dim, float scale, float softcap, float *ml) noexcept
    int INFER_ATTN_MAX_HEAD_DIM

    ctypedef struct infer_kernel_table:
        const char *name
        infer_dequantize_fn dequantize[64]
        infer_dequantize_f16_fn dequantize_f16[64]
        infer_quantize_fn quantize[64]
        infer_vec_dot_fn vec_dot[64]
        infer_rmsnorm_fn rmsnorm
        infer_layernorm_fn layernorm
        infer_softmax_fn softmax
        infer_glu_fn silu_mul
        infer_glu_fn gelu_mul
        infer_add_fn add
        infer_scale_fn scale
        infer_rope_fn rope_norm
        infer_rope_fn rope_neox
        infer_attn_fn attn_f32
        infer_attn_fn attn_f16
        infer_attn_block_fn attn_block_f32
        infer_attn_block_fn attn_block_f16
        const void *matmul_r16[64]     # by *_R16 type (a function pointer; tested for NULL)
        unsigned char repack_to[64]    # by file type: its *_R16 type, or 0

    int infer_repack_type(int type) noexcept
    int infer_repack_r16(int type, const void *src, size_t row_bytes, int64_t rows, int64_t cols, void *dst) noexcept

    int infer_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rot_dim, const int64_t *positions, int64_t pos0, float freq_base, float freq_scale, const float *freq_factors, float attn_factor, int neox) noexcept
    void infer_rope_inv_freq(double *inv_freq, int64_t rot_dim, float freq_base, float freq_scale, const float *freq_factors) noexcept
    int infer_attention(const float *q, const void *k_cache, const void *v_cache, int kv_type, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx, int64_t pos0, int64_t window, float scale, float softcap, float *out) noexcept
    void infer_rmsnorm_rows(const float *x, const float *weight, float *out, int64_t rows, int64_t n, float eps) noexcept
    void infer_layernorm_rows(const float *x, const float *weight, const float *bias, float *out, int64_t rows, int64_t n, float eps) noexcept
    void infer_softmax_rows(float *x, int64_t rows, int64_t n) noexcept
    void infer_glu(int gelu, const float *gate, const float *up, float *out, int64_t n) noexcept
    enum: INFER_GLU_SWIGLU_OAI
    int infer_attention_sinks(const float *q, const void *k_cache, const void *v_cache, int kv_type, int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx, int64_t pos0, int64_t window, float scale, float softcap, const float *sinks, float *out) noexcept
    int infer_kv_store(const float *x, void *cache, int kv_type, int64_t n_tokens, int64_t n_kv_heads, int64_t head_dim, int64_t n_ctx, int64_t pos0) noexcept

    int INFER_DELTA_NET_MAX_STATE
    int infer_gated_delta_net(const float *q, const float *k, const float *v, const float *g, const float *beta, float *state, float *out, int64_t n_tokens, int64_t n_k_heads, int64_t n_v_heads, int64_t d, float scale) noexcept
    int infer_mamba2_scan(const float *xbc, const float *dt, const float *a, const float *d_skip, float *state, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t d_state, int64_t n_groups) noexcept

    unsigned infer_isa_available() noexcept
    const infer_kernel_table *infer_kernels() noexcept
    int infer_isa_active() noexcept
    const char *infer_isa_name(int isa) noexcept
    int infer_set_isa(int isa) noexcept
    const infer_kernel_table *infer_kernels_for(int isa) noexcept

    ctypedef void (*infer_task_fn)(void *arg, int ith, int nth) noexcept
    void infer_parallel_run(infer_task_fn fn, void *arg) noexcept
    void infer_set_num_threads(int n) noexcept
    int infer_get_num_threads() noexcept
    int infer_default_num_threads() noexcept

    size_t infer_activation_row_bytes(int type, int64_t cols) noexcept
    int infer_quantize_activations(int type, const float *x, int64_t n_tokens, int64_t cols, void *xq) noexcept
    int infer_matvec_q(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols, const void *xq, float *out) noexcept
    int infer_matmul_q(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols, const void *xq, int64_t n_tokens, float *out) noexcept
    int infer_matvec(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols, const float *x, float *out, void *scratch) noexcept
    int infer_matmul(int type, const void *w, size_t row_bytes, int64_t rows, int64_t cols, const float *x, int64_t n_tokens, float *out, void *scratch) noexcept
