"""What a llama.cpp user types at `infer generate` / `infer chat`, and what it means
there (llama.cpp's common/arg.cpp):

* ``-n -1`` is "infinity": generate until the end of the text or a full context
  (llama-cli's default).  infer refused it ("must be >= 0").

The references are llama.cpp's documented meanings and counts derived by hand
from the context size; the generated text itself is compared with the same CLI
given the equivalent explicit limit."""
import os
import re
import subprocess
import sys

import pytest

from under_test import IMPORT_ROOT

sys.path.insert(0, os.path.dirname(__file__))
import tiny_models  # noqa: E402


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "infer", *args], cwd=IMPORT_ROOT, capture_output=True,
                          text=True, timeout=300, input=stdin)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tiny") / "llama.gguf")
    tiny_models.write("llama", path)
    return path


def _report(stderr):
    """(prompt tokens, generated tokens, finish reason) from generate's last stderr line."""
    m = re.search(r"\[(\d+) prompt tokens, (\d+) generated, .* finish: (\w+)\]", stderr)
    assert m, stderr
    return int(m[1]), int(m[2]), m[3]


def test_generate_n_minus_one_runs_until_the_context_is_full(tiny):
    n_ctx = 40
    unlimited = run_cli("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-c", str(n_ctx),
                        "-n", "-1", "-t", "1")
    assert unlimited.returncode == 0, unlimited.stderr
    n_prompt, n_generated, finish = _report(unlimited.stderr)
    # the tiny model's greedy text has no end-of-text token this early: only the context ends it
    assert (n_generated, finish) == (n_ctx - n_prompt, "length")
    explicit = run_cli("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-c", str(n_ctx),
                       "-n", str(n_ctx - n_prompt), "-t", "1")
    assert explicit.returncode == 0, explicit.stderr
    assert unlimited.stdout == explicit.stdout


def test_generate_n_minus_one_without_c_fills_the_trained_context(tiny):
    out = run_cli("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-n", "-1", "-t", "1")
    assert out.returncode == 0, out.stderr
    n_prompt, n_generated, finish = _report(out.stderr)
    assert n_prompt + n_generated == tiny_models.TINY["llama"].n_ctx_train and finish == "length"


def test_chat_accepts_n_minus_one(tiny):
    out = run_cli("chat", "-m", tiny, "--temp", "0", "-n", "-1", "-c", "64", "-t", "1", stdin="hello\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()


@pytest.mark.parametrize("command,value", [("generate", "-2"), ("chat", "-2"), ("chat", "0")])
def test_other_negative_or_zero_limits_are_refused(tiny, command, value):
    args = ["-p", "x"] if command == "generate" else []
    out = run_cli(command, "-m", tiny, *args, "-n", value, stdin="hi\n")
    assert out.returncode == 1
    assert out.stderr.strip() == f"infer: error: --max-tokens: must be >= {1 if command == 'chat' else 0}, " \
                                 f"or -1 for no limit, got {value}"
