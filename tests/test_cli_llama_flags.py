"""`infer generate` takes llama-cli's flag names: -p/--prompt, -s (seed),
--n-predict, -j/--json-schema with the schema itself, -jf/--json-schema-file,
--grammar with GBNF text and --grammar-file.  Before, `infer generate -p "..."`
(the first thing a llama.cpp user types) failed with "unrecognized arguments: -p".

The reference for each is the Python API on the same model with the same options
(`infer.generate`, greedy), and jsonschema for the constrained output."""
import json
import subprocess
import sys

import pytest

import infer
from under_test import IMPORT_ROOT

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

try:
    from infer.gguf import default_model_path

    MODEL = str(default_model_path())
except FileNotFoundError:
    MODEL = None
pytestmark = pytest.mark.skipif(MODEL is None, reason="the default model is not installed")

PROMPT = "The capital of France is"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}
GBNF = 'root ::= "yes" | "no"'


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "infer", *args], cwd=IMPORT_ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def model():
    with infer.load(MODEL) as m:
        yield m


def test_prompt_seed_and_n_predict_as_llama_cli_spells_them(model):
    want = "".join(infer.generate(model, PROMPT, max_tokens=6, temperature=0)) + "\n"
    out = run_cli("generate", "-p", PROMPT, "--temp", "0", "--n-predict", "6", "-s", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout == want
    both = run_cli("generate", "x", "-p", PROMPT)
    assert both.returncode == 2 and "not both" in both.stderr


def test_flash_attention_and_batch_sizes_are_accepted_and_ignored(model):
    """llama.cpp's `-fa on -b 2048 -ub 512` (common/arg.cpp) were refused as unknown;
    they change its speed, not its text, so the reply is the API's greedy one."""
    want = "".join(infer.generate(model, PROMPT, max_tokens=6, temperature=0)) + "\n"
    out = run_cli("generate", "-p", PROMPT, "--temp", "0", "-n", "6", "-fa", "on", "-b", "2048", "-ub", "512")
    assert out.returncode == 0, out.stderr
    assert out.stdout == want
    assert "infer: warning: --flash-attn, --batch-size, --ubatch-size: ignored" in out.stderr
    bad = run_cli("generate", "-p", PROMPT, "-fa", "maybe")  # llama.cpp: "unknown value for --flash-attn"
    assert bad.returncode == 2 and "--flash-attn/-fa: invalid choice: 'maybe'" in bad.stderr


THINK_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
                  "<think>\n\n</think>\n\n{% endif %}")


def test_reasoning_off_and_chat_template_kwargs_render_as_written_by_hand(tmp_path):
    """llama.cpp's `--reasoning off` is the template variable enable_thinking=false (Qwen3's
    empty think block); `--chat-template-kwargs` sets any variable.  The reference is the
    prompt written out by hand, given raw with --special."""
    path = tmp_path / "think.jinja"
    path.write_text(THINK_TEMPLATE, encoding="utf-8")
    turn = "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n"
    common = ("--temp", "0", "-n", "6")

    def by_hand(prompt):
        out = run_cli("generate", "--special", "--no-escape", "-p", prompt, *common)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def chat(*flags):
        out = run_cli("generate", "--chat", "-p", "How are you?", "--chat-template-file", str(path), *common, *flags)
        assert out.returncode == 0, out.stderr
        return out.stdout
    off, on = by_hand(turn + "<think>\n\n</think>\n\n"), by_hand(turn)
    assert off != on
    assert chat("--reasoning", "off") == chat("--chat-template-kwargs", '{"enable_thinking": false}') == off
    assert chat("-rea", "on") == chat("--reasoning", "auto") == chat() == on
    budget = run_cli("generate", "--chat", "-p", "x", "--reasoning-budget", "0")
    assert budget.returncode == 2 and "--reasoning-budget: only -1 (no budget) is supported" in budget.stderr
    for bad in ('["x"]', '{"messages": []}', "{"):
        out = run_cli("generate", "--chat", "-p", "x", "--chat-template-kwargs", bad)
        assert out.returncode == 2 and "infer: error: --chat-template-kwargs: " in out.stderr, out.stderr


def test_serve_takes_llama_servers_always_on_flags():
    """`llama-server -a NAME --metrics --embeddings -cb -fa on` parses; the alias is
    the model id, the rest are what infer serve always does."""
    from infer.cli import build_parser

    args = build_parser().parse_args(["serve", "-a", "my-model", "--metrics", "--embeddings", "-cb", "-fa", "on",
                                      "-b", "512"])
    assert args.alias == "my-model" and args.metrics and args.embedding and args.cont_batching
    assert args.flash_attn == "on" and args.batch_size == 512


def test_json_schema_inline_or_from_a_file(model, tmp_path):
    from infer.structured import Grammar

    want = "".join(infer.generate(model, "Answer:", max_tokens=40, temperature=0,
                                  grammar=Grammar.json_schema(json.dumps(SCHEMA)))) + "\n"
    jsonschema.validate(json.loads(want), SCHEMA)
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    for flags in (["-j", json.dumps(SCHEMA)], ["--json-schema", str(path)], ["-jf", str(path)]):
        out = run_cli("generate", "-p", "Answer:", "--temp", "0", "-n", "40", *flags)
        assert out.returncode == 0, (flags, out.stderr)
        assert out.stdout == want, flags


def test_grammar_inline_or_from_a_file(tmp_path):
    path = tmp_path / "yes_no.gbnf"
    path.write_text(GBNF + "\n", encoding="utf-8")
    for flags in (["--grammar", GBNF], ["--grammar", str(path)], ["--grammar-file", str(path)]):
        out = run_cli("generate", "-p", "Is the sky blue? ", "--temp", "0", "-n", "5", *flags)
        assert out.returncode == 0, (flags, out.stderr)
        assert out.stdout in ("yes\n", "no\n"), flags
    missing = run_cli("generate", "-p", "x", "--grammar-file", str(tmp_path / "nope.gbnf"))
    assert missing.returncode == 1 and "--grammar-file: cannot read" in missing.stderr
    two = run_cli("generate", "-p", "x", "--grammar", GBNF, "-j", json.dumps(SCHEMA))
    assert two.returncode == 2 and "one or the other" in two.stderr


def test_tokenize_takes_p_as_llama_tokenize_does(model):
    ids = model.tokenizer.encode("Hello world", add_special=True)
    out = run_cli("tokenize", "-p", "Hello world", "--ids")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ids
    # llama-tokenize's own examples end with --log-disable (refused as unknown before);
    # it silences the vocabulary line on stderr, as it silences llama-tokenize's log
    quiet = run_cli("tokenize", "-p", "Hello world", "--ids", "--log-disable")
    assert quiet.returncode == 0 and quiet.stdout == out.stdout and quiet.stderr == ""
