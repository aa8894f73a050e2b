"""The CLI a newcomer meets (issues 16.3, 16.4, 16.5, 16.10, 15.18): --version, help
with defaults, -v anywhere, `infer generate` prompts from stdin/-f, --stop, --special,
--seed -1, the -c warnings, `infer tokenize`, --model names, chat messages in CLI
words, and `infer chat | head` exiting quietly."""
import argparse
import io
import os
import subprocess
import sys

import pytest

import infer
from infer import cli
from infer.cli import chat as cli_chat
from infer.cli.common import HelpFormatter, resolve_model, sampling
from scripted import scripted_model
from under_test import IMPORT_ROOT

MINE = ("generate", "chat", "tokenize", "info", "quantize", "bench")


def run_cli(*args, stdin=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "infer", *args], cwd=IMPORT_ROOT, capture_output=True,
                          text=True, timeout=timeout, input=stdin)


def subparsers():
    parser = cli.build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return parser, action.choices


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"infer {infer.__version__}\n"


@pytest.mark.parametrize("command", MINE)
def test_every_option_help_shows_its_default(command):
    _, choices = subparsers()
    p = choices[command]
    formatter = HelpFormatter(command)
    for action in p._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        text = formatter._get_help_string(action) % {"default": action.default}
        assert "default" in text or "required" in text, (command, action.option_strings, text)
    # and the text users see has them
    helptext = p.format_help()
    if command == "generate":
        for needle in ("--top-k", "(default: 40)", "--top-p", "(default: 0.95)", "--min-p", "(default: 0.05)",
                       "-1 = random (default: -1)"):
            assert needle in helptext
    if command == "chat":
        assert "--show-thinking" in helptext and "system prompt (default: none)" in helptext


def test_verbose_before_or_after_the_subcommand():
    parser, _ = subparsers()
    assert parser.parse_args(["generate", "x", "-v"]).verbose is True
    assert parser.parse_args(["-v", "generate", "x"]).verbose is True
    assert parser.parse_args(["generate", "x"]).verbose is False


def test_seed_minus_one_is_random_and_others_are_refused():
    base = dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, repeat_last_n=64)
    assert sampling(argparse.Namespace(seed=-1, **base))["seed"] is None
    assert sampling(argparse.Namespace(seed=5, **base))["seed"] == 5
    with pytest.raises(cli.CLIError, match="--seed"):
        sampling(argparse.Namespace(seed=-2, **base))


def test_unknown_model_name_lists_the_names():
    with pytest.raises(cli.CLIError, match="not a file.*smollm2, gemma3"):
        resolve_model("llama-70b")


# ---- with the default model -------------------------------------------------------------------
try:
    from infer.gguf import default_model_path

    MODEL = str(default_model_path())
except FileNotFoundError:
    MODEL = None
needs_model = pytest.mark.skipif(MODEL is None, reason="the default model is not installed")


@pytest.fixture(scope="module")
def model():
    with infer.load(MODEL) as m:
        yield m


PROMPT = "The capital of France is"


@needs_model
def test_prompt_from_stdin_and_from_a_file(model, tmp_path):
    want = "".join(infer.generate(model, PROMPT, max_tokens=8, temperature=0)) + "\n"
    assert run_cli("generate", "-", "--temp", "0", "-n", "8", stdin=PROMPT).stdout == want
    # a file's final newline ends its line; it is not part of the prompt (llama.cpp's -f)
    assert run_cli("generate", "-", "--temp", "0", "-n", "8", stdin=PROMPT + "\n").stdout == want
    path = tmp_path / "prompt.txt"
    path.write_text(PROMPT + "\n", encoding="utf-8")
    out = run_cli("generate", "-f", str(path), "--temp", "0", "-n", "8")
    assert out.returncode == 0 and out.stdout == want
    both = run_cli("generate", "x", "-f", str(path))
    assert both.returncode == 2 and "not both" in both.stderr
    # -f beside -p was dropped without a word
    both = run_cli("generate", "-p", "x", "-f", str(path))
    assert both.returncode == 2 and "either with -p or with -f, not both" in both.stderr
    none = run_cli("generate")
    assert none.returncode == 2 and "no prompt" in none.stderr


@needs_model
def test_repeated_stop_strings(model):
    full = "".join(infer.generate(model, PROMPT, max_tokens=24, temperature=0))
    words = full.split()
    first, second = words[2], words[4]  # two words the greedy continuation writes
    cut = min(full.find(first), full.find(second))
    out = run_cli("generate", PROMPT, "--temp", "0", "-n", "24", "--stop", second, "--stop", first)
    assert out.returncode == 0 and out.stdout == full[:cut] + "\n"
    assert "finish: stop" in out.stderr


@needs_model
def test_special_parses_control_tokens_in_a_raw_prompt(model):
    raw = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    ids = model.tokenizer.encode(raw, add_special=True, parse_special=True)
    assert model.tokenizer.vocab.token_id("<|im_start|>") in ids
    want = "".join(infer.generate(model, ids, max_tokens=8, temperature=0)) + "\n"
    out = run_cli("generate", raw, "--special", "--temp", "0", "-n", "8")
    assert out.returncode == 0 and out.stdout == want
    plain = run_cli("generate", raw, "--temp", "0", "-n", "8")
    assert plain.stdout != want  # without --special the markers are text


@needs_model
def test_ctx_size_warnings():
    out = run_cli("generate", PROMPT, "--temp", "0", "-n", "2", "-c", "100000")
    assert out.returncode == 0
    assert "infer: warning: -c 100000 exceeds the model's trained context of 8192 tokens" in out.stderr
    out = run_cli("generate", PROMPT, "--temp", "0", "-n", "50", "-c", "12")
    assert out.returncode == 0
    assert "-c 12 leaves room for 7 of the 50 tokens asked for (-n) after the 5-token prompt" in out.stderr


@needs_model
def test_tokenize_prints_ids_and_pieces_like_llama_tokenize(model):
    import _tok_models

    text = "Hello world, ünïcode 🙂!"
    ref = _tok_models.tokenizers_reference(_tok_models.metadata(MODEL)).encode(text).ids
    out = subprocess.run([sys.executable, "-m", "infer", "tokenize", text], cwd=IMPORT_ROOT,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split(b"\n")[:-1]
    assert [int(line.split(b" -> ")[0]) for line in lines] == ref
    # each line: the id right-aligned in 6, then the piece's bytes in quotes
    pieces = [line.split(b" -> ", 1)[1] for line in lines]
    assert all(p.startswith(b"'") and p.endswith(b"'") for p in pieces)
    assert b"".join(p[1:-1] for p in pieces) == text.encode()
    assert lines[0] == b"%6d -> 'Hello'" % ref[0]
    ids = run_cli("tokenize", "--ids", "--show-count", text)
    assert ids.stdout == "[" + ", ".join(map(str, ref)) + f"]\nTotal number of tokens: {len(ref)}\n"
    special = run_cli("tokenize", "--ids", "<|im_start|>user")
    plain = run_cli("tokenize", "--ids", "--no-parse-special", "<|im_start|>user")
    im_start = model.tokenizer.vocab.token_id("<|im_start|>")
    assert special.stdout.startswith(f"[{im_start}, ") and not plain.stdout.startswith(f"[{im_start}, ")
    assert run_cli("tokenize", "-", "--ids", stdin=text).stdout.startswith("[" + ", ".join(map(str, ref)) + "]")


@needs_model
def test_model_names_and_the_model_option_everywhere():
    import json

    by_name = run_cli("info", "--model", "smollm2", "--json")
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["path"] == MODEL
    positional = run_cli("info", "smollm2", "--json")
    assert json.loads(positional.stdout)["path"] == MODEL
    both = run_cli("info", MODEL, "--model", "smollm2")
    assert both.returncode == 2 and "not both" in both.stderr
    q = run_cli("quantize", "--model", "/nonexistent.gguf", "out.gguf", "--type", "q8_0")
    assert q.returncode == 1 and "--model: /nonexistent.gguf is not a file" in q.stderr
    q = run_cli("quantize", "--type", "q8_0")
    assert q.returncode == 2 and "usage: infer quantize INPUT OUTPUT" in q.stderr


def test_gemma3_by_name_warns_that_it_looks_like_a_base_model():
    import _tok_models

    _tok_models.installed_path("gemma3")
    out = run_cli("generate", "Name three colors.", "--chat", "--model", "gemma3", "--temp", "0", "-n", "2")
    assert out.returncode == 0, out.stderr
    assert ("infer: warning: this model has no chat template of its own, so it looks like a base model that "
            "may not follow a conversation; using the built-in 'gemma' template instead") in out.stderr
    tok = run_cli("tokenize", "--ids", "--model", "gemma3", "Hello")
    assert tok.stdout.startswith("[2, ")  # Gemma adds <bos> (id 2)


# ---- chat ---------------------------------------------------------------------------------------
def test_chat_overflow_speaks_cli_words(monkeypatch, capsys):
    model = scripted_model(["ok", "ok"], max_seq_len=40)
    monkeypatch.setattr(cli_chat, "load_model", lambda args: model)
    monkeypatch.setattr(model, "close", lambda: None)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y" * 60 + "\nhi\n"))
    assert cli.main(["chat", "--temp", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "ok\n"
    assert "/reset" in err and "larger -c" in err and "reset()" not in err and "n_ctx" not in err


def test_chat_cut_off_by_a_full_context_is_marked(monkeypatch, capsys):
    model = scripted_model(["word " * 40], max_seq_len=48)
    monkeypatch.setattr(cli_chat, "load_model", lambda args: model)
    monkeypatch.setattr(model, "close", lambda: None)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    assert cli.main(["chat", "-n", "200", "--temp", "0"]) == 0
    out, _ = capsys.readouterr()
    assert out.endswith(" [cut off: the context is full; /reset, or a larger -c]\n")


@needs_model
def test_chat_into_a_closed_pipe_exits_quietly():
    # `infer chat | head -c 1`: the reader goes away while replies are still coming
    proc = subprocess.Popen([sys.executable, "-m", "infer", "chat", "--temp", "0", "-n", "40"], cwd=IMPORT_ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(b"Tell me a story.\n" * 20)
    proc.stdin.close()
    assert proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0
    assert "Traceback" not in err and "Exception ignored" not in err and "Error" not in err, err


@needs_model
def test_generate_into_a_closed_pipe_exits_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "infer", "generate", PROMPT, "--temp", "0", "-n", "200"],
                            cwd=IMPORT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0
    assert "Traceback" not in err and "Exception ignored" not in err, err


RECORDED = os.path.join(os.path.dirname(__file__), "llama_tokenize")
LLAMA_TOKENIZE = [
    ("smollm2", "Hello world, ünïcode 🙂! <|im_start|>user", (), "smollm2.out"),
    ("smollm2", "Hello world, ünïcode 🙂! <|im_start|>user", ("--ids", "--show-count"), "smollm2-ids.out"),
    ("gemma3", "Hello world, ünïcode 🙂! <start_of_turn>user", (), "gemma3.out"),
    ("gemma3", "Hello world, ünïcode 🙂! <start_of_turn>user", ("--no-bos", "--no-parse-special", "--ids"),
     "gemma3-ids.out"),
]


@pytest.mark.parametrize("name, text, options, recorded", LLAMA_TOKENIZE, ids=[c[3] for c in LLAMA_TOKENIZE])
def test_tokenize_prints_what_llama_tokenize_prints(name, text, options, recorded):
    import _tok_models

    if name == "gemma3" and _tok_models.gemma3_path() is None:
        pytest.skip(_tok_models.gemma3_missing())
    if name == "smollm2" and MODEL is None:
        pytest.skip("the default model is not installed")
    out = subprocess.run([sys.executable, "-m", "infer", "tokenize", "--model", name, *options, text],
                         cwd=IMPORT_ROOT, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with open(os.path.join(RECORDED, recorded), "rb") as f:
        assert out.stdout == f.read()


def test_generate_runs_without_loading_jinja2():
    """Only rendering a chat template needs jinja2: `infer generate` of a raw prompt
    does not pay for importing it (and runs where it is missing, as the AArch64
    check's numpy-only stage)."""
    code = ("import sys; from infer.cli import main; "
            "main(['generate', '-n', '2', '--temp', '0', '-t', '1', 'Hi']); "
            "print('jinja2' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], cwd=IMPORT_ROOT, capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False"


def test_chat_template_help_names_every_built_in_template():
    from infer.chat import FALLBACK_TEMPLATES

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    help_text = " ".join(sub.choices["chat"].format_help().split())
    listed = help_text[help_text.index("a built-in's name"):].split("(", 1)[1].split(")", 1)[0]
    assert [name.strip() for name in listed.split(",")] == list(FALLBACK_TEMPLATES)
