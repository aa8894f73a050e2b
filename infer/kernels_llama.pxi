# The fused Llama decode step (csrc/llama_block.c): one C call per decoded token.
from libc.stdlib cimport calloc, free
from libc.stdint cimport uint8_t

cdef extern from "llama_block.h" nogil:
    ctypedef struct infer_llama_layer:
        const float *attn_norm
        const float *ffn_norm
        infer_decode_matrix wq, wk, wv, wo, gate, up, down
    ctypedef struct infer_llama_model:
        int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size
        float rope_base, rms_eps
        const infer_llama_layer *layers
        infer_decode_matrix embd, output
        const float *output_norm
    ctypedef struct infer_llama_state:
        int n_ctx
        int kv_f16
        void *k_cache
        void *v_cache
        float *x
        float *h
        float *q
        float *att
        float *k
        float *v
        float *gate
        float *up
        float *rope_cos
        float *rope_sin
        uint8_t *xq[3]
        float *logits
    int infer_llama_decode(const infer_llama_model *m, infer_llama_state *s, int token, int pos) noexcept


cdef class LlamaDecoder:
    """The decode step of one Llama context: weights, KV cache and scratch bound once.

    config: object with dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim,
    vocab_size, rope_base, rms_eps.  embd/output: matrix tuples (data uint8 rows,
    qtype, act_type, rows, cols).  layers: per layer (attn_norm, ffn_norm, wq, wk,
    wv, wo, gate, up, down).  k_cache/v_cache: C-contiguous float16 or float32
    (F16 bits) or float32 arrays (n_layers, n_kv_heads, n_ctx, head_dim), as kv_store
    writes them.
    """
    cdef infer_llama_model m
    cdef infer_llama_state s
    cdef infer_llama_layer *layers
    cdef list keep
    cdef object lock

    def __cinit__(self):
        self.layers = NULL

    def __init__(self, config, embd, output, output_norm, layers, k_cache, v_cache, int n_ctx):
        import numpy as np
        import threading
        cdef int i
        self.keep = []
        self.lock = threading.Lock()
        c = config
        self.m.dim, self.m.n_layers, self.m.n_heads = c.dim, c.n_layers, c.n_heads
        self.m.n_kv_heads, self.m.head_dim, self.m.ffn_dim = c.n_kv_heads, c.head_dim, c.ffn_dim
        self.m.vocab_size = c.vocab_size
        self.m.rope_base, self.m.rms_eps = c.rope_base, c.rms_eps
        if len(layers) != c.n_layers:
            raise ValueError(f"layers: expected {c.n_layers}, got {len(layers)}")
        self.m.embd = _decode_matrix(embd, self.keep)
        self.m.output = _decode_matrix(output, self.keep)
        self.m.output_norm = _decode_vector(output_norm, c.dim, self.keep)
        self.layers = <infer_llama_layer *>calloc(c.n_layers, sizeof(infer_llama_layer))
        if self.layers == NULL:
            raise MemoryError()
        for i, L in enumerate(layers):
            self.layers[i].attn_norm = _decode_vector(L[0], c.dim, self.keep)
            self.layers[i].ffn_norm = _decode_vector(L[1], c.dim, self.keep)
            self.layers[i].wq = _decode_matrix(L[2], self.keep)
            self.layers[i].wk = _decode_matrix(L[3], self.keep)
            self.layers[i].wv = _decode_matrix(L[4], self.keep)
            self.layers[i].wo = _decode_matrix(L[5], self.keep)
            self.layers[i].gate = _decode_matrix(L[6], self.keep)
            self.layers[i].up = _decode_matrix(L[7], self.keep)
            self.layers[i].down = _decode_matrix(L[8], self.keep)
        self.m.layers = self.layers

        kv_dim = c.n_kv_heads * c.head_dim
        q_dim = c.n_heads * c.head_dim
        need = c.n_layers * n_ctx * kv_dim
        if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (np.uint16, np.float32):
            raise TypeError("k_cache, v_cache: expected both uint16 (F16 bits) or both float32")
        if k_cache.size != need or v_cache.size != need:
            raise ValueError(f"k_cache, v_cache: expected {need} values each")
        if not (k_cache.flags.c_contiguous and v_cache.flags.c_contiguous):
            raise ValueError("k_cache, v_cache: must be C-contiguous")
        cdef uint8_t[::1] kb = k_cache.reshape(-1).view(np.uint8)
        cdef uint8_t[::1] vb = v_cache.reshape(-1).view(np.uint8)
        self.keep += [k_cache, v_cache]
        self.s.k_cache = &kb[0]
        self.s.v_cache = &vb[0]
        self.s.kv_f16 = 1 if k_cache.dtype == np.uint16 else 0
        self.s.n_ctx = n_ctx
        f32 = np.float32
        self.s.x = _decode_buffer(np.zeros(c.dim, f32), self.keep)
        self.s.h = _decode_buffer(np.zeros(c.dim, f32), self.keep)
        self.s.q = _decode_buffer(np.zeros(q_dim, f32), self.keep)
        self.s.att = _decode_buffer(np.zeros(q_dim, f32), self.keep)
        self.s.k = _decode_buffer(np.zeros(kv_dim, f32), self.keep)
        self.s.v = _decode_buffer(np.zeros(kv_dim, f32), self.keep)
        self.s.gate = _decode_buffer(np.zeros(c.ffn_dim, f32), self.keep)
        self.s.up = _decode_buffer(np.zeros(c.ffn_dim, f32), self.keep)
        self.s.rope_cos = _decode_buffer(np.zeros(c.head_dim, f32), self.keep)
        self.s.rope_sin = _decode_buffer(np.zeros(c.head_dim, f32), self.keep)
        cdef uint8_t[::1] xq
        widest = max(c.dim, c.ffn_dim, q_dim)
        for i in range(3):
            buf = np.zeros(infer_decode_act_bytes(widest), np.uint8)
            xq = buf
            self.s.xq[i] = &xq[0]
            self.keep.append(buf)
        self.s.logits = NULL

    def __dealloc__(self):
        free(self.layers)

    def decode(self, int token, int pos, float[::1] logits):
        """Run `token` at position `pos` (its K/V go to slot pos); logits -> `logits`."""
        if self.keep is None:
            raise RuntimeError("decoder is released")
        if logits.shape[0] != self.m.vocab_size:
            raise ValueError(f"logits: expected {self.m.vocab_size} values, got {logits.shape[0]}")
        if not 0 <= token < self.m.vocab_size:
            raise ValueError(f"token: id {token} outside the vocabulary [0, {self.m.vocab_size})")
        if not 0 <= pos < self.s.n_ctx:
            raise ValueError(f"pos: {pos} outside the context [0, {self.s.n_ctx})")
        cdef int rc
        if not self.lock.acquire(False):
            raise RuntimeError("LlamaDecoder: used from two threads at once")
        try:
            self.s.logits = &logits[0]
            with nogil:
                rc = infer_llama_decode(&self.m, &self.s, token, pos)
            self.s.logits = NULL
        finally:
            self.lock.release()
        if rc == -1:
            raise NotImplementedError("a kernel this model needs is missing from the active kernel set")
        if rc != 0:
            raise ValueError("infer_llama_decode: bad arguments")

    def release(self):
        """Drop every reference to the weights and caches (the model is closing)."""
        self.keep = None
        self.m.layers = NULL
