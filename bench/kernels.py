"""Kernel benchmarks: dequantize and mat-vec of the 32-element block formats.

Every figure is printed next to a baseline measured in the same run, with the ratio:
  dequantize  vs the gguf package's numpy dequantizer, and a numpy copy of the output size
  matvec      vs numpy float32 mat-vec (OpenBLAS, one thread), 2 threads vs 1,
              and each SIMD kernel set vs scalar
  model       the mat-vec shapes of SmolLM2-135M decode, per thread count, in the file's
              formats and repacked (*_r16) as the loader does where the kernel set has them
  prefill     mat-mul of many tokens vs numpy float32 (OpenBLAS sgemm, one thread), file
              formats and repacked
  types       the K/IQ4/Q5_1 formats: dequantize G elem/s and 4096x4096 mat-vec us at one
              thread beside numpy and Q4_0, and mat-vec time per weight byte vs Q4_0's
  iquants     the IQ and TQ formats at one thread on the active kernel set: dequantize
              G elem/s vs the gguf package, 4096x4096 mat-vec us vs numpy float32 and
              Q4_0 (timed again before each format, the best as baseline: one Q4_0
              figure from a quiet moment would skew every ratio), and whether each is
              within 1.5x of Q4_0's time per weight byte
  limits      the machine's read bandwidth and int8 dot peak (bench/machine_probe.py),
              beside mat-vecs larger than the last-level cache at each thread count
              (GB/s of weights and its share of the probe's bandwidth, same run), in the
              file's layout and repacked as the model loader does (csrc/repack.h)
  ggml        llama.cpp's ggml CPU vec_dot as a 4096x4096 mat-vec for the same bytes, one
              thread, beside infer's: each as time per weight byte vs its own Q4_0 in
              this run, and infer/ggml (needs LLAMA_CPP_LIB_PATH = the folder with
              libggml-base.so and libggml-cpu.so, and a C compiler; see bench/ggml_matvec.py)

Run:  python bench/kernels.py
Knobs (environment):
  INFER_BENCH_SECONDS   time per measurement (default 0.3)
  INFER_BENCH_DEQ       dequantize tensor rows x cols (default 256x4096)
  INFER_BENCH_MATVEC    matvec rows x cols (default 4096x4096)
  INFER_BENCH_FORMATS   comma list (default q4_0,q4_1,q5_0,q8_0,f16,bf16)
  INFER_BENCH_THREADS   comma list of thread counts (default 1,2)
  INFER_BENCH_PREFILL   matmul rows x cols x tokens (default 1536x576x64)
  INFER_BENCH_TYPES     comma list for the types section (default q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_nl,iq4_xs,mxfp4)
  INFER_BENCH_IQ        comma list for the iquants section (default: all eight)
  INFER_BENCH_GGML      comma list for the ggml section (default: the K, IQ and TQ types)
  INFER_BENCH_LIMITS    rows x cols of the limits section's mat-vec (default 32768x4096, 75 MB of q4_0)
  INFER_BENCH_LIMITS_FORMATS  comma list for the limits section (default q4_0,q5_k,q6_k,iq4_xs)
  INFER_BENCH_SKIP      comma list of sections to skip (dequantize,matvec,model,prefill,limits,
                        types,iquants,ggml)
"""
import os
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # the numpy baseline uses one thread
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants as gq  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import infer.kernels as K  # noqa: E402

SECONDS = float(os.environ.get("INFER_BENCH_SECONDS", "0.3"))
DEQ_SHAPE = tuple(int(v) for v in os.environ.get("INFER_BENCH_DEQ", "256x4096").split("x"))
MV_SHAPE = tuple(int(v) for v in os.environ.get("INFER_BENCH_MATVEC", "4096x4096").split("x"))
FORMATS = os.environ.get("INFER_BENCH_FORMATS", "q4_0,q4_1,q5_0,q8_0,f16,bf16").split(",")
THREADS = [int(v) for v in os.environ.get("INFER_BENCH_THREADS", "1,2").split(",")]
SKIP = set(filter(None, os.environ.get("INFER_BENCH_SKIP", "").split(",")))
TYPES = os.environ.get("INFER_BENCH_TYPES", "q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_nl,iq4_xs,mxfp4").split(",")
# The issue's bar: a K or IQ type's mat-vec within 1.5x of Q4_0's time per weight byte.
PER_BYTE_BAR = 1.5
PREFILL_SHAPE = tuple(int(v) for v in os.environ.get("INFER_BENCH_PREFILL", "1536x576x64").split("x"))
IQ_FORMATS = os.environ.get(
    "INFER_BENCH_IQ", "iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,tq1_0,tq2_0").split(",")
GGML_FORMATS = os.environ.get(
    "INFER_BENCH_GGML", ",".join(["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"] + IQ_FORMATS)).split(",")
GGML_ROUNDS = 3
LIMITS_SHAPE = tuple(int(v) for v in os.environ.get("INFER_BENCH_LIMITS", "32768x4096").split("x"))
LIMITS_FORMATS = os.environ.get("INFER_BENCH_LIMITS_FORMATS", "q4_0,q5_k,q6_k,iq4_xs").split(",")
MODEL_SHAPES = [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)]


def per_call(fn, seconds=SECONDS, clock=time.thread_time):
    """Best per-call time over batches filling about `seconds`.

    One-thread figures use the calling thread's CPU time (time.thread_time): on a
    shared machine it leaves out the time other processes hold the core.  Figures
    with several threads need wall time (clock=time.perf_counter); the minimum over
    many short batches is the least disturbed one.
    """
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    # Wall-clock batches stay short (~50 us) so that some of them run undisturbed.
    batch = max(1, int((seconds / 20 if clock is time.thread_time else 50e-6) / once))
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while True:
        t0 = clock()
        for _ in range(batch):
            fn()
        elapsed = clock() - t0
        if elapsed > 0:
            best = min(best, elapsed / batch)
        if time.perf_counter() > deadline and best < float("inf"):
            return best


def wall(fn, seconds=SECONDS):
    return per_call(fn, seconds, clock=time.perf_counter)


def thread_columns(fn, fmt_us):
    """Wall time of fn at each thread count, with the ratio to the first count."""
    walls = {}
    for th in THREADS:
        K.set_num_threads(th)
        walls[th] = wall(fn)
    K.set_num_threads(THREADS[0])
    return [f"{fmt_us.format(walls[th] * 1e6)} ({walls[THREADS[0]] / walls[th]:.2f}x)" for th in THREADS]


def encode(fmt, w):
    """w in format fmt: by the gguf package's quantizer, else by infer's; the grid formats
    (they need an importance matrix) get random blocks of the same shape, with sane fp16 d;
    a repacked format ("q4_1_r16") is its file format's rows repacked as the loader does."""
    if fmt.endswith("_r16"):
        return K.repack(encode(fmt[:-len("_r16")], w), fmt[:-len("_r16")])[0]
    if fmt.startswith("iq") and fmt not in ("iq4_nl", "iq4_xs"):
        rng = np.random.default_rng(w.shape[0])
        n_blocks = w.size // K.block_size(fmt)
        raw = rng.integers(0, 256, (n_blocks, K.block_bytes(fmt)), dtype=np.uint8)
        raw[:, 0:2] = np.array([0.01], np.float16).view(np.uint8)   # d leads every IQ block
        return raw.reshape(w.shape[0], -1)
    try:
        return gq.quantize(w, T[fmt.upper()]).view(np.uint8).reshape(w.shape[0], -1)
    except NotImplementedError:
        out = np.empty(w.shape[0] * K.row_bytes(fmt, w.shape[1]), np.uint8)
        return K.quantize(np.ascontiguousarray(w, np.float32).reshape(-1), fmt, out).reshape(w.shape[0], -1)


def table(title, header, rows):
    print(f"\n## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.stdout.flush()


def bench_dequantize(rng, isas):
    rows, cols = DEQ_SHAPE
    n = rows * cols
    out = np.empty(n, np.float32)
    src_copy = np.empty(n, np.float32)
    K.set_num_threads(1)
    t_copy = per_call(lambda: np.copyto(out, src_copy))
    result = []
    for fmt in FORMATS:
        raw = encode(fmt, rng.standard_normal((rows, cols)).astype(np.float32))
        flat = raw.reshape(-1)
        t_gguf = per_call(lambda: gq.dequantize(raw, T[fmt.upper()]))
        for isa in isas:
            K.set_isa(isa)
            t = per_call(lambda: K.dequantize(flat, fmt, out))
            result.append([fmt, isa, f"{n / t / 1e9:.2f}", f"{(flat.nbytes + out.nbytes) / t / 1e9:.1f}",
                           f"{n / t_gguf / 1e9:.3f}", f"{t_gguf / t:.0f}x", f"{t_copy / t:.2f}"])
    table(f"dequantize {rows}x{cols} to float32, one thread",
          ["format", "isa", "G elem/s", "GB/s (in+out)", "gguf numpy G elem/s", "vs gguf",
           "vs numpy copy (time ratio)"], result)


def bench_matvec(rng, isas):
    rows, cols = MV_SHAPE
    w_f = rng.standard_normal((rows, cols)).astype(np.float32)
    x = rng.standard_normal(cols).astype(np.float32)
    out = np.empty(rows, np.float32)
    ref = np.empty(rows, np.float32)
    t_np = per_call(lambda: np.matmul(w_f, x, out=ref))
    result = []
    for fmt in FORMATS:
        w = encode(fmt, w_f)
        scalar_t = None
        for isa in isas:
            K.set_isa(isa)
            K.set_num_threads(1)
            t1 = per_call(lambda: K.matvec(w, fmt, x, out))
            if isa == "scalar":
                scalar_t = t1
            row = [fmt, isa, f"{t1 * 1e6:.0f}", f"{w.nbytes / t1 / 1e9:.1f}", f"{t_np / t1:.2f}x",
                   f"{scalar_t / t1:.1f}x"]
            row += thread_columns(lambda: K.matvec(w, fmt, x, out), "{:.0f}")
            result.append(row)
    K.set_num_threads(THREADS[0])
    table(f"matvec {rows}x{cols}, x quantized inside (numpy float32 one thread: {t_np * 1e6:.0f} us, "
          f"{w_f.nbytes / t_np / 1e9:.1f} GB/s)",
          ["format", "isa", "1 thr us (CPU)", "weight GB/s", "vs numpy f32", "vs scalar"]
          + [f"{th} thr wall us (vs {THREADS[0]})" for th in THREADS], result)


def bench_model(rng, isa):
    K.set_isa(isa)
    result = []
    formats = ["q4_1", "q8_0"]
    formats += [K.repack_type(f) for f in formats if K.repack_type(f)]   # as the loader repacks them
    for fmt in formats:
        for rows, cols in MODEL_SHAPES:
            w_f = rng.standard_normal((rows, cols)).astype(np.float32)
            w = encode(fmt, w_f)
            x = rng.standard_normal(cols).astype(np.float32)
            xq = np.empty(K.activation_bytes(fmt, cols), np.uint8)
            K.quantize_activations(x, fmt, xq)
            out = np.empty(rows, np.float32)
            ref = np.empty(rows, np.float32)
            t_np = per_call(lambda: np.matmul(w_f, x, out=ref))
            K.set_num_threads(1)
            t1 = per_call(lambda: K.matvec_q(w, fmt, xq, out))
            row = [fmt, f"{rows}x{cols}", f"{t_np * 1e6:.1f}", f"{t1 * 1e6:.1f}", f"{t_np / t1:.2f}x"]
            row += thread_columns(lambda: K.matvec_q(w, fmt, xq, out), "{:.1f}")
            result.append(row)
    x = rng.standard_normal(576).astype(np.float32)
    xq = np.empty(K.activation_bytes("q4_1", 576), np.uint8)
    t_q = per_call(lambda: K.quantize_activations(x, "q4_1", xq))
    K.set_num_threads(THREADS[0])
    table(f"model shapes, matvec_q on pre-quantized activations, {isa} "
          f"(quantize_activations of 576 values to q8_1: {t_q * 1e6:.2f} us per call)",
          ["format", "rows x cols", "numpy f32 us", "1 thr us (CPU)", "vs numpy"]
          + [f"{th} thr wall us (vs {THREADS[0]})" for th in THREADS], result)


def bench_prefill(rng, isa):
    K.set_isa(isa)
    rows, cols, tokens = PREFILL_SHAPE
    w_f = rng.standard_normal((rows, cols)).astype(np.float32)
    X = rng.standard_normal((tokens, cols)).astype(np.float32)
    ref = np.empty((tokens, rows), np.float32)
    t_np = per_call(lambda: np.matmul(X, w_f.T, out=ref))
    result = []
    formats = ["q4_0", "q4_1", "q8_0"]
    formats += [K.repack_type(f) for f in formats if K.repack_type(f)]
    for fmt in formats:
        w = encode(fmt, w_f)
        Xq = np.empty(K.activation_bytes(fmt, cols, tokens), np.uint8)
        K.quantize_activations(X, fmt, Xq)
        out = np.empty((tokens, rows), np.float32)
        K.set_num_threads(1)
        t1 = per_call(lambda: K.matmul_q(w, fmt, Xq, out))
        row = [fmt, f"{t1 * 1e6:.0f}", f"{rows * cols * tokens / t1 / 1e9:.1f}", f"{t_np / t1:.2f}x"]
        row += thread_columns(lambda: K.matmul_q(w, fmt, Xq, out), "{:.0f}")
        result.append(row)
    table(f"prefill matmul_q {rows}x{cols} x {tokens} tokens, {isa} (numpy float32 one thread: "
          f"{t_np * 1e6:.0f} us, {rows * cols * tokens / t_np / 1e9:.1f} GMAC/s)",
          ["format", "1 thr us (CPU)", "GMAC/s", "vs numpy f32"]
          + [f"{th} thr wall us (vs {THREADS[0]})" for th in THREADS], result)


def bench_limits(rng, isa):
    """The machine's limits beside a mat-vec that streams its weights from DRAM."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from machine_probe import Probe, ProbeUnavailable

    try:
        probe = Probe()
    except (ProbeUnavailable, OSError, subprocess.CalledProcessError) as exc:
        print(f"\n## limits: probe unavailable ({exc})")
        return
    K.set_isa(isa)
    rows, cols = LIMITS_SHAPE
    w_f = rng.standard_normal((rows, cols)).astype(np.float32)
    x = rng.standard_normal(cols).astype(np.float32)
    out = np.empty(rows, np.float32)
    for name in LIMITS_FORMATS:
        w = encode(name, w_f)
        mib = max(1, w.nbytes // 2**20)
        # the file's rows, and the layout the model loader repacks them into (if any)
        variants = [(name, w)]
        if K.repack_type(name):
            variants.append(K.repack(w, name)[::-1])
        result = []
        for th in THREADS:
            bw = probe.read_gbs(mib, th)
            K.set_num_threads(th)
            for fmt, wv in variants:
                xq = np.empty(K.activation_bytes(fmt, cols), np.uint8)
                K.quantize_activations(x, fmt, xq)
                t = wall(lambda: K.matvec_q(wv, fmt, xq, out))
                result.append([str(th), fmt, f"{bw:.1f}", f"{t * 1e6:.0f}", f"{w.nbytes / t / 1e9:.1f}",
                               f"{w.nbytes / t / 1e9 / bw:.0%}"])
        K.set_num_threads(THREADS[0])
        table(f"limits: {name} matvec_q {rows}x{cols} ({w.nbytes / 1e6:.0f} MB) vs read bandwidth over "
              f"{mib} MiB, {isa}, wall time",
              ["threads", "format", "probe read GB/s", "matvec us", "weight GB/s", "share of the probe"], result)
    peaks = probe.int8_gmacs()
    print("\nint8 dot peak, one thread (G MAC per CPU second): " + "; ".join(
        f"{name} {'unavailable on this CPU' if g is None else f'{g:.1f}'}" for name, g in peaks.items()))


def bench_types(rng, isa):
    """Each format beside Q4_0 (and numpy) measured in this same run, one thread."""
    K.set_isa(isa)
    K.set_num_threads(1)
    rows, cols = MV_SHAPE
    w_f = rng.standard_normal((rows, cols)).astype(np.float32)
    x = rng.standard_normal(cols).astype(np.float32)
    out = np.empty(rows, np.float32)
    ref = np.empty(rows, np.float32)
    t_np = per_call(lambda: np.matmul(w_f, x, out=ref))
    d_rows, d_cols = DEQ_SHAPE
    d_src = rng.standard_normal((d_rows, d_cols)).astype(np.float32)
    d_out = np.empty(d_rows * d_cols, np.float32)
    t_copy = per_call(lambda: np.copyto(d_out, d_src.reshape(-1)))

    def measure(fmt):
        w = encode(fmt, w_f)
        flat = encode(fmt, d_src).reshape(-1)
        t_deq = per_call(lambda: K.dequantize(flat, fmt, d_out))
        t_mv = per_call(lambda: K.matvec(w, fmt, x, out))
        return w.nbytes, t_deq, t_mv

    base_bytes, base_deq, base_mv = measure("q4_0")
    result = [["q4_0", f"{base_bytes * 8 / (rows * cols):.3f}", f"{d_rows * d_cols / base_deq / 1e9:.2f}",
               f"{t_copy / base_deq:.2f}", f"{base_mv * 1e6:.0f}", f"{t_np / base_mv:.2f}x", "1.00", "baseline"]]
    for fmt in TYPES:
        nbytes, t_deq, t_mv = measure(fmt)
        per_byte = (t_mv / nbytes) / (base_mv / base_bytes)
        verdict = ("n/a" if fmt == "q5_1" else "yes" if per_byte <= PER_BYTE_BAR else "NO")
        result.append([fmt, f"{nbytes * 8 / (rows * cols):.3f}", f"{d_rows * d_cols / t_deq / 1e9:.2f}",
                       f"{t_copy / t_deq:.2f}", f"{t_mv * 1e6:.0f}", f"{t_np / t_mv:.2f}x", f"{per_byte:.2f}",
                       verdict])
    K.set_num_threads(THREADS[0])
    table(f"formats vs Q4_0, {isa}, one thread: dequantize {d_rows}x{d_cols}, matvec {rows}x{cols} "
          f"(numpy float32 matvec {t_np * 1e6:.0f} us; numpy copy of the dequantize output {t_copy * 1e6:.0f} us)",
          ["format", "bits/weight", "dequantize G elem/s", "vs numpy copy", "matvec us (CPU)", "vs numpy f32",
           "matvec time per weight byte vs q4_0", f"within {PER_BYTE_BAR}x"], result)


def bench_iquants(rng, isa):
    """Each IQ/TQ format beside Q4_0 and numpy, one thread, the active kernel set."""
    K.set_isa(isa)
    K.set_num_threads(1)
    rows, cols = MV_SHAPE
    w_f = rng.standard_normal((rows, cols)).astype(np.float32)
    x = rng.standard_normal(cols).astype(np.float32)
    out = np.empty(rows, np.float32)
    deq = np.empty(rows * cols, np.float32)
    t_np = per_call(lambda: np.matmul(w_f, x, out=out))
    figures = {}
    w_q4 = encode("q4_0", w_f)
    q4_times = []   # Q4_0 again before each format: the best of them is the baseline
    for fmt in ["q4_0"] + IQ_FORMATS:
        w = encode(fmt, w_f)
        flat = w.reshape(-1)
        q4_times.append(per_call(lambda: K.matvec(w_q4, "q4_0", x, out)))
        t_mv = per_call(lambda: K.matvec(w, fmt, x, out))
        t_deq = per_call(lambda: K.dequantize(flat, fmt, deq))
        t_gguf = per_call(lambda: gq.dequantize(w, T[fmt.upper()]), seconds=min(SECONDS, 0.1))
        figures[fmt] = (w.nbytes, t_mv, t_deq, t_gguf)
    q4_bytes, q4_t = w_q4.nbytes, min(q4_times + [figures["q4_0"][1]])
    result = []
    for fmt, (nbytes, t_mv, t_deq, t_gguf) in figures.items():
        per_byte = (t_mv / nbytes) / (q4_t / q4_bytes)
        n = rows * cols
        result.append([fmt, f"{nbytes * 8 / n:.4f}", f"{n / t_deq / 1e9:.2f}", f"{n / t_gguf / 1e9:.3f}",
                       f"{t_gguf / t_deq:.0f}x", f"{t_mv * 1e6:.0f}", f"{t_np / t_mv:.2f}x",
                       f"{t_mv / q4_t:.2f}x", f"{per_byte:.2f}x", "yes" if per_byte <= 1.5 else "NO"])
    table(f"IQ and TQ formats, {isa}, one thread: dequantize {rows}x{cols} to float32 and matvec "
          f"{rows}x{cols} (x quantized inside; numpy float32: {t_np * 1e6:.0f} us)",
          ["format", "bits/weight", "dequantize G elem/s", "gguf numpy G elem/s", "vs gguf",
           "matvec us (CPU)", "vs numpy f32", "time vs q4_0", "time per weight byte vs q4_0",
           "within 1.5x"], result)


def bench_ggml(rng, isa):
    """infer's and ggml's mat-vec of the same bytes, each against its own Q4_0, one thread."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ggml_matvec import Ggml, GgmlUnavailable
    try:
        ggml = Ggml()
    except (GgmlUnavailable, OSError) as e:
        print(f"\n## ggml vs infer: skipped: {e}")
        return
    features = ggml.features()
    K.set_isa(isa)
    K.set_num_threads(1)
    rows, cols = MV_SHAPE
    w_f = rng.standard_normal((rows, cols)).astype(np.float32)
    x = rng.standard_normal(cols).astype(np.float32)
    out_infer = np.empty(rows, np.float32)
    out_ggml = np.empty(rows, np.float32)
    w_q4 = encode("q4_0", w_f)
    q4_infer = lambda: K.matvec(w_q4, "q4_0", x, out_infer)  # noqa: E731
    q4_ggml = ggml.matvec_fn(T.Q4_0.value, w_q4, x, out_ggml)
    q4_times = ([], [])   # Q4_0 again before each format, both sides: the best is the baseline
    figures = {}
    try:
        for fmt in ["q4_0"] + GGML_FORMATS:
            w = encode(fmt, w_f)
            run_ggml = ggml.matvec_fn(T[fmt.upper()].value, w, x, out_ggml)
            run_infer = lambda: K.matvec(w, fmt, x, out_infer)  # noqa: E731
            run_ggml()
            run_infer()
            # The same bytes in ggml's layout: the two must agree to float rounding.
            err = float(np.max(np.abs(out_infer - out_ggml)) / max(float(np.max(np.abs(out_ggml))), 1e-30))
            # Rounds that alternate the four: a noisy moment hits one round, the minimum skips it.
            t_i = t_g = float("inf")
            for _ in range(GGML_ROUNDS):
                q4_times[0].append(per_call(q4_infer))
                q4_times[1].append(per_call(q4_ggml))
                t_i = min(t_i, per_call(run_infer))
                t_g = min(t_g, per_call(run_ggml))
            figures[fmt] = (w.nbytes, t_i, t_g, err)
    finally:
        ggml.close()
    q4_bytes = w_q4.nbytes
    q4_i, q4_g = min(q4_times[0]), min(q4_times[1])
    result = []
    for fmt, (nbytes, t_i, t_g, err) in figures.items():
        pb_i = (t_i / nbytes) / (q4_i / q4_bytes)
        pb_g = (t_g / nbytes) / (q4_g / q4_bytes)
        result.append([fmt, f"{nbytes * 8 / (rows * cols):.4f}", f"{t_i * 1e6:.0f}", f"{t_g * 1e6:.0f}",
                       f"{pb_i:.2f}", f"{pb_g:.2f}", "yes" if pb_g <= PER_BYTE_BAR else "NO",
                       f"{t_i / t_g:.2f}", f"{err:.1e}"])
    K.set_num_threads(THREADS[0])
    table(f"infer vs ggml's CPU vec_dot, {isa}, one thread, matvec {rows}x{cols} of the same bytes "
          f"(x quantized inside; ggml built with {'+'.join(features)}; "
          f"Q4_0 baselines: infer {q4_i * 1e6:.0f} us, ggml {q4_g * 1e6:.0f} us)",
          ["format", "bits/weight", "infer us (CPU)", "ggml us (CPU)", "infer per weight byte vs its q4_0",
           "ggml per weight byte vs its q4_0", f"ggml within {PER_BYTE_BAR}x", "infer/ggml time",
           "max |infer-ggml| / max |ggml|"], result)


def main():
    caps = K.capabilities()
    isas = caps["available"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# infer kernel benchmark: kernel sets {', '.join(isas)}; "
          f"default threads {caps['num_threads']}; {SECONDS}s per figure; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    rng = np.random.default_rng(0)
    before = caps["active"]
    try:
        if "dequantize" not in SKIP:
            bench_dequantize(rng, isas)
        if "matvec" not in SKIP:
            bench_matvec(rng, isas)
        if "model" not in SKIP:
            bench_model(rng, before)
        if "prefill" not in SKIP:
            bench_prefill(rng, before)
        if "limits" not in SKIP:
            bench_limits(rng, before)
        if "types" not in SKIP:
            bench_types(rng, before)
        if "iquants" not in SKIP:
            bench_iquants(rng, before)
        if "ggml" not in SKIP:
            bench_ggml(rng, before)
    finally:
        K.set_isa(before)


if __name__ == "__main__":
    main()
