"""Speed on files shaped like the models users bring, in the types they bring them in,
beside llama.cpp.

    LLAMA_CPP_LIB_PATH=DIR python bench/user_shapes.py
    INFER_SHAPES=qwen2.5-0.5b,llama-3.2-1b INFER_TYPES=q5_k_m,iq4_xs INFER_REPS=3 INFER_THREADS=2

No such model is installed and there is no hub here, so each is written with random
weights at the real shapes (tests/tiny_models.py's writer, F16) and quantized by
llama.cpp's own ``llama_model_quantize`` (through llama-cpp-python), with its
per-tensor choices, as the files users download were.  Random weights take the same
time as trained ones: no kernel looks at the values.  Each file is then timed by
`infer bench` (pp512 and tg128; llama-cpp-python on the same file in the same run),
whose table this prints.  The files stay in $XDG_CACHE_HOME/infer/bench (about 4 GB
with the F16 sources; delete the folder to reclaim it).
"""
import ctypes
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import tiny_models as tm  # noqa: E402

#: name -> (vocabulary, the Tiny description at the model's published shape)
SHAPES = {
    # Qwen2.5-0.5B-Instruct: biases on q/k/v, 14 heads over 2 KV heads, tied head
    "qwen2.5-0.5b": (151936, tm.Tiny("qwen2", 1, n_layer=24, dim=896, n_head=14, n_kv_head=2, head_dim=64,
                                     ffn=4864, n_ctx_train=32768, qkv_bias=True, eps=1e-6, pre="qwen2",
                                     extra={"rope.freq_base": 1000000.0})),
    # Qwen3-0.6B: heads of 128 (q is 2048 wide for a 1024 model), q/k norms
    "qwen3-0.6b": (151936, tm.Tiny("qwen3", 2, n_layer=28, dim=1024, n_head=16, n_kv_head=8, head_dim=128,
                                   ffn=3072, n_ctx_train=40960, qk_norm=True, eps=1e-6, pre="qwen2",
                                   extra={"attention.key_length": 128, "attention.value_length": 128,
                                          "rope.freq_base": 1000000.0})),
    # Llama-3.2-1B-Instruct: llama3 RoPE factors, 32 heads over 8 KV heads, tied head
    "llama-3.2-1b": (128256, tm.Tiny("llama", 3, n_layer=16, dim=2048, n_head=32, n_kv_head=8, head_dim=64,
                                     ffn=8192, n_ctx_train=131072, llama3_rope=True, pre="llama-bpe",
                                     extra={"rope.freq_base": 500000.0})),
    # Granite-3.1-1B-A400M: a mixture of experts (32 of width 512, 8 used), granite's
    # multipliers, tied head
    "granite-moe-1b": (49155, tm.Tiny("granitemoe", 4, n_layer=24, dim=1024, n_head=16, n_kv_head=8, head_dim=64,
                                      ffn=512, n_expert=32, n_ctx_train=131072,
                                      extra={"embedding_scale": 12.0, "residual_scale": 0.22,
                                             "attention.scale": 0.015625, "logit_scale": 6.0,
                                             "expert_count": 32, "expert_used_count": 8})),
    # Qwen3.5-0.8B: 18 gated DeltaNet layers (16 key and 16 value heads of 128, conv
    # of 4) and every fourth layer gated attention (8 heads of 256 over 2 KV heads,
    # RoPE on 64 of them), tied head
    "qwen3.5-0.8b": (248320, tm.Tiny("qwen35", 5, n_layer=24, dim=1024, n_head=8, n_kv_head=2, head_dim=256,
                                     ffn=3584, n_ctx_train=262144, qk_norm=True, eps=1e-6, pre="qwen2",
                                     extra={"attention.key_length": 256, "attention.value_length": 256,
                                            "rope.freq_base": 10000000.0},
                                     qwen35=tm.Qwen35Shape(conv_kernel=4, d_state=128, n_k_heads=16, n_v_heads=16,
                                                           full_attention_interval=4, rope_dims=64,
                                                           sections=(11, 11, 10, 0)))),
    # Granite-4.0-H-350M: 28 Mamba2 layers (48 SSM heads of 32, one group of state 128,
    # conv of 4, d_inner 1536 = 2 dim) and 4 attention layers without RoPE (12 heads of
    # 64 over 4 KV heads; their places here are illustrative), a dense SwiGLU FFN of
    # 2048, Granite's multipliers, tied head
    "granite-4.0-h-350m": (100352, tm.Tiny("granitehybrid", 6, n_layer=32, dim=768, n_head=12, n_kv_head=4,
                                           head_dim=64, ffn=2048, eps=1e-5, pre="qwen2",
                                           mamba2=tm.Mamba2Shape(conv_kernel=4, d_state=128, n_heads=48,
                                                                 n_groups=1, attention_layers=(10, 13, 17, 27),
                                                                 embedding_scale=12.0, residual_scale=0.246,
                                                                 attention_scale=0.0078125, logit_scale=4.0))),
}
#: llama.cpp's file types (llama_ftype) by their llama-quantize names
FTYPES = {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "q8_0": 7, "iq4_xs": 30, "q4_0": 2}


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "infer", "bench")
    os.makedirs(path, exist_ok=True)
    return path


def f16_file(name):
    path = os.path.join(cache_dir(), f"{name}-f16.gguf")
    if not os.path.exists(path):
        vocab, tiny = SHAPES[name]
        tm.VOCAB = vocab  # read by the writer at call time
        t0 = time.perf_counter()
        tm.write(name, path + ".part", tiny)
        os.replace(path + ".part", path)
        print(f"# wrote {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def quantized_file(name, ftype):
    path = os.path.join(cache_dir(), f"{name}-{ftype}.gguf")
    if not os.path.exists(path):
        import llama_cpp

        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = FTYPES[ftype]
        params.nthread = int(os.environ.get("INFER_THREADS", "2"))
        t0 = time.perf_counter()
        rc = llama_cpp.llama_model_quantize(f16_file(name).encode(), (path + ".part").encode(), ctypes.byref(params))
        if rc != 0:
            raise SystemExit(f"llama_model_quantize failed for {name} {ftype}: {rc}")
        os.replace(path + ".part", path)
        print(f"# quantized {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def main():
    shapes = os.environ.get("INFER_SHAPES", ",".join(SHAPES)).split(",")
    types = os.environ.get("INFER_TYPES", "q5_k_m,iq4_xs").split(",")
    reps = os.environ.get("INFER_REPS", "3")
    threads = os.environ.get("INFER_THREADS", "2")
    for name in shapes:
        for ftype in types:
            path = quantized_file(name, ftype)
            print(f"\n## {name} {ftype.upper()} ({os.path.getsize(path) / 2**20:.0f} MiB), {threads} threads",
                  flush=True)
            subprocess.run([sys.executable, "-m", "infer", "bench", "-m", path, "-p", "512", "-n", "128",
                            "-r", reps, "-t", threads], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
