"""`infer bench`: prompt and generation tokens/s, llama-bench style."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import UsageError, add_gpu_layers_arg, add_model_arg, load_model, resolve_model


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    import statistics

    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _bench_infer(model: Any, n_prompt: int, n_gen: int, reps: int,
                 tokens: list[int]) -> dict[str, list[float]]:
    """tokens/s of each repetition, per wall second ("pp", "tg") and per CPU second
    of this process ("pp_cpu", "tg_cpu"): prefill of n_prompt tokens; n_gen
    single-token steps, as llama-bench runs them (no sampling)."""
    import time

    ctx = model.create_context(n_ctx=max(n_prompt, n_gen + 1, 1))
    res: dict[str, list[float]] = {"pp": [], "tg": [], "pp_cpu": [], "tg_cpu": []}
    for r in range(reps + 1):  # the first round warms caches and is dropped
        for key, n in (("pp", n_prompt), ("tg", n_gen)):
            if not n:
                continue
            ctx.restart()
            t0, c0 = time.perf_counter(), time.process_time()
            if key == "pp":
                ctx.prefill(tokens[:n])
            else:
                for i in range(n):
                    ctx.prefill(tokens[i:i + 1])
            if r:
                res[key].append(n / (time.perf_counter() - t0))
                res[key + "_cpu"].append(n / max(time.process_time() - c0, 1e-9))
    return res


def _bench_llama_cpp(path: str, threads: int, n_prompt: int, n_gen: int, reps: int,
                     tokens: list[int]) -> dict[str, list[float]]:
    import time

    import llama_cpp

    llm: Any = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads,
                          n_ctx=max(n_prompt, n_gen + 1, 16), n_batch=max(n_prompt, 1), verbose=False)
    res: dict[str, list[float]] = {"pp": [], "tg": []}
    try:
        for r in range(reps + 1):
            if n_prompt:
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(tokens[:n_prompt])
                if r:
                    res["pp"].append(n_prompt / (time.perf_counter() - t0))
            if n_gen:
                llm.reset()
                t0 = time.perf_counter()
                for i in range(n_gen):
                    llm.eval(tokens[i:i + 1])
                if r:
                    res["tg"].append(n_gen / (time.perf_counter() - t0))
    finally:
        llm.close()
    return res


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib.util
    import random

    from .. import kernels

    if min(args.n_prompt) < 0 or min(args.n_gen) < 0 or args.repetitions < 1:
        raise UsageError("-p/-g must be >= 0 and -r >= 1")
    if args.threads is not None and min(args.threads) < 1:
        raise UsageError(f"--threads: must be >= 1, got {min(args.threads)}")
    thread_counts = args.threads
    # one model for every thread count, loaded with the first
    with load_model(argparse.Namespace(**{**vars(args), "threads": thread_counts and thread_counts[0]})) as model:
        thread_counts = thread_counts or [kernels.get_num_threads()]
        md = model.metadata
        eng = model.engine
        size, params = getattr(model, "n_bytes", 0), getattr(model, "n_params", 0)
        name = " ".join(str(x) for x in (md.get("general.architecture", "?"),
                                         md.get("general.size_label", ""),
                                         _file_type_name(md.get("general.file_type"))) if x)
        rng = random.Random(0)
        tokens = [rng.randrange(eng.vocab_size) for _ in range(max(args.n_prompt + args.n_gen))]
        # llama-bench's order: per thread count, the prompt tests, then the generation tests
        tests = [(threads, key, n) for threads in thread_counts
                 for key, sizes in (("pp", args.n_prompt), ("tg", args.n_gen)) for n in sizes if n]
        ours = {}
        for threads, key, n in tests:
            kernels.set_num_threads(threads)
            ours[threads, key, n] = _bench_infer(model, n if key == "pp" else 0, n if key == "tg" else 0,
                                                 args.repetitions, tokens)[key]
    theirs = None
    missing = "llama_cpp is not importable"
    if not args.no_llama_cpp and importlib.util.find_spec("llama_cpp") is not None:
        try:
            import llama_cpp  # noqa: F401
        except Exception as exc:  # installed but broken: its shared library not found, say
            missing = f"llama_cpp is installed but does not import ({type(exc).__name__}: {exc})"
        else:
            path = resolve_model(args.model)
            theirs = {(threads, key, n): _bench_llama_cpp(path, threads, n if key == "pp" else 0,
                                                          n if key == "tg" else 0, args.repetitions, tokens)[key]
                      for threads, key, n in tests}
    if args.output != "md":
        import os

        filename = os.path.basename(resolve_model(args.model))
        records = [_record(filename, name, size, params, engine_name, test, res[test])
                   for engine_name, res in (("infer", ours), ("llama-cpp-python", theirs)) if res is not None
                   for test in tests]
        _print_records(records, args.output)
        if theirs is None and not args.no_llama_cpp:
            print(f"({missing}: no llama-cpp-python comparison)", file=sys.stderr)
        return 0
    rows = [("| model | size | params | backend | threads | test | t/s |"),
            ("| --- | ---: | ---: | --- | ---: | --- | ---: |")]
    for engine_name, res in (("infer", ours), ("llama-cpp-python", theirs)):
        if res is None:
            continue
        for threads, key, n in tests:
            m, sd = _mean_sd(res[threads, key, n])
            rows.append(f"| {name} | {size / 2**20:.2f} MiB | {params / 1e6:.2f} M | {engine_name} "
                        f"| {threads} | {key}{n} | {m:.2f} ± {sd:.2f} |")
    print("\n".join(rows))
    if theirs is not None:
        for test in tests:
            label = f"{test[1]}{test[2]}" + (f" ({test[0]} threads)" if len(thread_counts) > 1 else "")
            print(f"{label}: infer / llama-cpp-python = "
                  f"{_mean_sd(ours[test])[0] / _mean_sd(theirs[test])[0]:.2f}x")
    elif not args.no_llama_cpp:
        print(f"({missing}: no llama-cpp-python comparison)", file=sys.stderr)
    return 0


def _record(filename: str, model_type: str, size: int, params: int, backend: str, test: tuple[int, str, int],
            rates: list[float]) -> dict[str, Any]:
    """One test as llama-bench's json, jsonl and csv printers name its fields (those
    that apply to infer; llama-bench's stdev is the sample one, as _mean_sd's)."""
    threads, key, n = test
    samples_ns = [round(n / rate * 1e9) for rate in rates]
    avg_ns, sd_ns = _mean_sd([float(x) for x in samples_ns])
    avg_ts, sd_ts = _mean_sd(rates)
    return {"model_filename": filename, "model_type": model_type, "model_size": int(size),
            "model_n_params": int(params), "backends": backend, "n_threads": threads,
            "n_prompt": n if key == "pp" else 0, "n_gen": n if key == "tg" else 0, "n_depth": 0,
            "avg_ns": round(avg_ns), "stddev_ns": round(sd_ns), "avg_ts": avg_ts, "stddev_ts": sd_ts,
            "samples_ns": samples_ns, "samples_ts": rates}


def _print_records(records: list[dict[str, Any]], output: str) -> None:
    import csv
    import json

    if output == "json":
        print(json.dumps(records, indent=2))
    elif output == "jsonl":
        for record in records:
            print(json.dumps(record))
    else:  # csv: the samples lists are not columns there
        fields = [k for k in records[0] if not k.startswith("samples_")] if records else []
        writer = csv.DictWriter(sys.stdout, fields, extrasaction="ignore", quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)


def _int_list(text: str) -> list[int]:
    """llama-bench's list of values: "512" or "128,512"."""
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a comma-separated list, got {text!r}") from None


def _file_type_name(ft: Any) -> str:
    from ..quant_mixtures import file_type_name

    return file_type_name(ft) or ""


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="prompt and generation tokens/s (llama-bench style)")
    p.add_argument("-p", "--n-prompt", type=_int_list, default="512", metavar="N[,N...]",
                   help="prompt tokens of the prefill test; a list runs one test per value, as in llama-bench")
    p.add_argument("-n", "-g", "--n-gen", type=_int_list, default="128", metavar="N[,N...]",
                   help="tokens of the generation test (-n as in llama-bench); a list as for -p")
    p.add_argument("-r", "--repetitions", type=int, default=3, help="runs of each test")
    p.add_argument("--no-llama-cpp", action="store_true", help="skip the llama-cpp-python comparison")
    p.add_argument("-o", "--output", choices=("md", "json", "jsonl", "csv"), default="md",
                   help="output format, as llama-bench's -o (its field names)")
    add_model_arg(p)
    p.add_argument("--threads", "-t", type=_int_list, default=None, metavar="N[,N...]",
                   help="kernel threads; a list runs every test with each (default: physical cores)")
    add_gpu_layers_arg(p)
    p.set_defaults(func=cmd_bench)
