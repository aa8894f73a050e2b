/* rows.c: the row-wise float ops over many rows (a prompt's tokens), split between
 * the pool's threads when the work is large enough to pay for waking them. */
#include <math.h>

#include "infer_kernels.h"

/* Below this many elements one thread does it all (a decode step's rows). */
#define ROWS_PARALLEL_MIN 16384
/* Elementwise ops split into ranges of whole multiples of this (cache lines, SIMD). */
#define ELEMENT_GRAIN 64

typedef enum { OP_RMSNORM, OP_LAYERNORM, OP_SOFTMAX, OP_SILU_MUL, OP_GELU_MUL, OP_SWIGLU_OAI } row_op;

typedef struct {
    row_op op;
    const infer_kernel_table *t;
    const float *x, *weight, *bias, *up;
    float *out;
    int64_t rows, n;
    float eps;
} rows_task;

/* As numpy: a row holding a NaN becomes all NaN.  Checked here, once for every ISA:
 * the kernels' max ignores NaN (x > max is false) and their vector exp maps it to a
 * finite value, so without it scalar gave NaN and AVX-512 dropped the NaN entry. */
static void softmax_row(const infer_kernel_table *t, float *x, int64_t n) {
    int nan = 0;
    for (int64_t i = 0; i < n; i++) nan |= x[i] != x[i];
    if (nan) {
        for (int64_t i = 0; i < n; i++) x[i] = NAN;
        return;
    }
    t->softmax(x, n);
}

static void rows_worker(void *arg, int ith, int nth) {
    const rows_task *a = (const rows_task *)arg;
    if (a->op == OP_SILU_MUL || a->op == OP_GELU_MUL || a->op == OP_SWIGLU_OAI) {
        /* one row of rows * n elements, cut into nth ranges */
        const int64_t total = a->rows * a->n, grains = (total + ELEMENT_GRAIN - 1) / ELEMENT_GRAIN;
        const int64_t i0 = grains * ith / nth * ELEMENT_GRAIN;
        int64_t i1 = grains * (ith + 1) / nth * ELEMENT_GRAIN;
        if (i1 > total) i1 = total;
        if (i1 <= i0) return;
        const infer_glu_fn fn = a->op == OP_SWIGLU_OAI ? infer_swiglu_oai
                                : a->op == OP_SILU_MUL ? a->t->silu_mul : a->t->gelu_mul;
        fn(a->x + i0, a->up + i0, a->out + i0, i1 - i0);
        return;
    }
    const int64_t r0 = a->rows * ith / nth, r1 = a->rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t off = r * a->n;
        switch (a->op) {
        case OP_RMSNORM: a->t->rmsnorm(a->x + off, a->weight, a->out + off, a->n, a->eps); break;
        case OP_LAYERNORM:
            a->t->layernorm(a->x + off, a->weight, a->bias, a->out + off, a->n, a->eps);
            break;
        case OP_SOFTMAX: softmax_row(a->t, a->out + off, a->n); break;
        default: break;
        }
    }
}

static void run(rows_task *a) {
    a->t = infer_kernels();
    if (a->rows * a->n < ROWS_PARALLEL_MIN || infer_get_num_threads() < 2)
        rows_worker(a, 0, 1);
    else
        infer_parallel_run(rows_worker, a);
}

void infer_rmsnorm_rows(const float *x, const float *weight, float *out, int64_t rows, int64_t n,
                        float eps) {
    rows_task a = {.op = OP_RMSNORM, .x = x, .weight = weight, .out = out, .rows = rows, .n = n,
                   .eps = eps};
    run(&a);
}

void infer_layernorm_rows(const float *x, const float *weight, const float *bias, float *out,
                          int64_t rows, int64_t n, float eps) {
    rows_task a = {.op = OP_LAYERNORM, .x = x, .weight = weight, .bias = bias, .out = out,
                   .rows = rows, .n = n, .eps = eps};
    run(&a);
}

void infer_softmax_rows(float *x, int64_t rows, int64_t n) {
    rows_task a = {.op = OP_SOFTMAX, .out = x, .rows = rows, .n = n};
    run(&a);
}

void infer_swiglu_oai(const float *gate, const float *up, float *out, int64_t n) {
    /* ggml-cpu's expression, term for term (out may alias gate or up) */
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i] < INFER_SWIGLU_OAI_LIMIT ? gate[i] : INFER_SWIGLU_OAI_LIMIT;
        float y = up[i] < INFER_SWIGLU_OAI_LIMIT ? up[i] : INFER_SWIGLU_OAI_LIMIT;
        y = y > -INFER_SWIGLU_OAI_LIMIT ? y : -INFER_SWIGLU_OAI_LIMIT;
        out[i] = x / (1.0f + expf(INFER_SWIGLU_OAI_ALPHA * (-x))) * (y + 1.0f);
    }
}

void infer_glu(int gelu, const float *gate, const float *up, float *out, int64_t n) {
    rows_task a = {.op = gelu == INFER_GLU_SWIGLU_OAI ? OP_SWIGLU_OAI : gelu ? OP_GELU_MUL : OP_SILU_MUL,
                   .x = gate, .up = up, .out = out,
                   .rows = 1, .n = n};
    run(&a);
}
