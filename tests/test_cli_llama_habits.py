"""What a llama.cpp user types at `infer generate` / `infer chat`, and what it means
there (llama.cpp's common/arg.cpp):

* ``-n -1`` is "infinity": generate until the end of the text or a full context
  (llama-cli's default).  infer refused it ("must be >= 0").
* ``--chat-template NAME|JINJA`` takes a built-in template's name or the template
  text.  infer had no such option, and argparse's prefix matching read it as
  ``--chat-template-file``: "cannot read chatml".
* ``-ngl 99`` (GPU layers; a CPU-only llama.cpp warns and ignores it), ``-sys``
  (system prompt), and options infer lacks such as ``-cnv``: argparse read
  ``-ngl 99`` as ``-n gl`` and ``-cnv`` as ``-c nv`` and blamed -n and -c.
* ``--repeat-last-n -1`` is "the context size" (0 disables); infer refused it.
* llama-bench takes lists: ``-p 8,16 -n 2,0 -t 1,2``; infer bench refused them.
* llama-tokenize reads -f FILE and --stdin verbatim: a final newline is a token.
  infer tokenize dropped it (llama-cli's rule for prompts) and had no --stdin.
* llama.cpp's tools process escapes in -p by default (``-p 'Q:\\nA:'`` holds a
  newline; --no-escape keeps the backslash); infer took -p literally.
* llama.cpp's --temperature, --predict, --presence-penalty, --frequency-penalty;
  its --temp below 0 is clamped to 0 (greedy).  infer knew none of the four
  names and refused a negative --temp.
* llama-cli's -cnv (conversation mode) and -t -1 (the default thread count):
  `infer chat -cnv` is a conversation anyway; `generate -cnv` points to chat.
* A chat template that cannot render a turn made `infer chat` print an error for
  every line and exit 0 at the end; it now stops at once with status 1.
* Input that is not UTF-8 on stdin failed far from its cause ("U+DCC3 at index 3
  is a lone surrogate"), or with a traceback under a strict locale; one such line
  ended `infer chat`.

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
    assert out.returncode == 2
    assert out.stderr.strip() == f"infer: error: --max-tokens: must be >= {1 if command == 'chat' else 0}, " \
                                 f"or -1 for no limit, got {value}"


CHATML_BY_HAND = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_chat_template_takes_a_builtin_name_or_the_template_text(tmp_path):
    """SmolLM2's own template adds a default system prompt; ChatML by name, inline, or
    from a file renders the bare turn, so all three give the same prompt and reply."""
    path = tmp_path / "chatml.jinja"
    path.write_text(CHATML_BY_HAND, encoding="utf-8")
    common = ("generate", "--chat", "-p", "Hi", "--temp", "0", "-n", "8")
    runs = [run_cli(*common, *flags) for flags in (["--chat-template", "chatml"],
                                                   ["--chat-template", CHATML_BY_HAND],
                                                   ["--chat-template-file", str(path)], [])]
    for out in runs:
        assert out.returncode == 0, out.stderr
    by_name, inline, by_file, own = runs
    assert by_name.stdout == inline.stdout == by_file.stdout
    assert _report(by_name.stderr)[0] == _report(by_file.stderr)[0] < _report(own.stderr)[0]


@pytest.mark.parametrize("args,message", [
    (["--chat", "--chat-template", "chatm"], "--chat-template: 'chatm' is neither a built-in template"),
    (["--chat-template", "chatml"], "--chat-template: only with --chat"),
    (["--chat", "--chat-template", "chatml", "--chat-template-file", "x.jinja"], "one or the other"),
])
def test_chat_template_misuse(args, message):
    out = run_cli("generate", "-p", "Hi", "-n", "1", *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_long_options_are_not_taken_by_a_prefix():
    out = run_cli("generate", "--chat", "-p", "Hi", "-n", "1", "--chat-temp", "x.jinja")
    assert out.returncode == 2 and "unrecognized arguments: --chat-temp" in out.stderr
    # llama-server's -n: argparse called it "ambiguous" (-ngl and -np start with it)
    short = run_cli("serve", "-n", "128")
    assert short.returncode == 2
    assert "infer serve: error: unrecognized option -n; see infer serve --help" in short.stderr


def test_gpu_layers_are_accepted_and_ignored_with_a_warning(tiny):
    common = ("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-n", "6", "-t", "1")
    plain = run_cli(*common)
    for flags in (["-ngl", "99"], ["--n-gpu-layers", "99"], ["--gpu-layers", "all"]):
        out = run_cli(*common, *flags)
        assert out.returncode == 0, out.stderr
        assert out.stdout == plain.stdout
        assert "infer: warning: infer runs on the CPU: --n-gpu-layers is ignored" in out.stderr
    assert "warning" not in run_cli(*common, "-ngl", "0").stderr


def test_system_prompt_as_llama_cli_spells_it(tiny):
    outs = [run_cli("chat", "-m", tiny, "--temp", "0", "-n", "5", "-t", "1", flag, "Be brief.", stdin="hello\n")
            for flag in ("--system", "-sys", "--system-prompt")]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    none = run_cli("chat", "-m", tiny, "--temp", "0", "-n", "5", "-t", "1", stdin="hello\n")
    assert outs[0].stdout == outs[1].stdout == outs[2].stdout != none.stdout


@pytest.mark.parametrize("option", ["-ctv", "-np", "-ctk", "-tb", "-nkvo", "-mli", "-sysf", "-jinja"])
def test_unknown_single_dash_options_are_named(option):
    """-ctv is not -c tv, -np not -n p, -ctk not -c tk, -tb not -t b, -nkvo not -n kvo,
    -mli not -m li, -sysf not -s ysf, -jinja not -j inja (-fa is an option now)."""
    out = run_cli("generate", "-p", "Hi", option, "4")
    assert out.returncode == 2
    assert f"error: unrecognized option {option} (it is not {option[:2]} {option[2:]})" in out.stderr


def test_text_that_starts_like_an_option_goes_after_double_dash():
    """argparse read the prompt '-p is a flag' as -p ' is a flag' (the text lost its
    start); it is now refused with the way to give it, and after -- it is the text:
    the ids llama.cpp gives '-p is a flag' with SmolLM2 (recorded)."""
    refused = run_cli("tokenize", "--ids", "-p is a flag")
    assert refused.returncode == 2
    assert "'-p is a flag' starts like the option -p; to give text that starts with '-', put it after --" \
        in refused.stderr
    out = run_cli("tokenize", "--ids", "--", "-p is a flag")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "[29, 96, 314, 253, 7048]\n"


def test_glued_short_numbers_still_read(tiny):
    out = run_cli("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-n3", "-t1", "-c0")
    assert out.returncode == 0, out.stderr
    assert _report(out.stderr)[1] == 3


def run_cli_bytes(*args, stdin: bytes, env=None):
    return subprocess.run([sys.executable, "-m", "infer", *args], cwd=IMPORT_ROOT, capture_output=True,
                          timeout=300, input=stdin, env=dict(os.environ, **(env or {})))


# Python reads stdin with surrogateescape under a C/C.UTF-8 locale (the bad byte then
# failed in the tokenizer: "U+DCC3 at index 3 is a lone surrogate") and strictly under
# others; either way the user is told which byte is not UTF-8.
STDIN_LOCALES = [{"PYTHONIOENCODING": "utf-8:surrogateescape"}, {"PYTHONIOENCODING": "utf-8:strict"}]


@pytest.mark.parametrize("env", STDIN_LOCALES, ids=["surrogateescape", "strict"])
@pytest.mark.parametrize("command", [["tokenize", "-"], ["generate", "-", "-n", "1"], ["embed", "-f", "-"]])
def test_stdin_that_is_not_utf8_is_named(tiny, command, env):
    out = run_cli_bytes(*command, "-m", tiny, stdin=b"caf\xc3", env=env)
    assert out.returncode == 1
    err = out.stderr.decode()
    assert err.startswith("infer: error: stdin is not UTF-8 text (") and err.count("\n") == 1, err
    if env["PYTHONIOENCODING"].endswith("surrogateescape"):
        assert err == "infer: error: stdin is not UTF-8 text (byte 0xC3 at character 3)\n"


@pytest.mark.parametrize("env", STDIN_LOCALES, ids=["surrogateescape", "strict"])
def test_chat_skips_a_line_that_is_not_utf8_and_goes_on(tiny, env):
    args = ("chat", "-m", tiny, "--temp", "0", "-n", "5", "-t", "1")
    clean = run_cli_bytes(*args, stdin=b"hello\n", env=env)
    with_bad = run_cli_bytes(*args, stdin=b"caf\xc3 au lait\nhello\n", env=env)
    assert clean.returncode == with_bad.returncode == 0, with_bad.stderr
    assert with_bad.stdout == clean.stdout
    assert b"infer: that line is not UTF-8 text (byte 0xC3 at character 3); skipped\n" in with_bad.stderr


def test_embed_lines_of_stdin_are_the_texts_without_line_ends(tiny):
    piped = run_cli_bytes("embed", "-m", tiny, "-f", "-", stdin=b"a cat\r\n\r\nthe dog\n")
    given = run_cli_bytes("embed", "-m", tiny, "a cat", "the dog", stdin=b"")
    assert piped.returncode == given.returncode == 0, piped.stderr
    assert piped.stdout == given.stdout and len(piped.stdout.splitlines()) == 2


# llama-bench -m tiny-llama.Q8_0.gguf -p 8,16 -n 2,0 -t 1,2 -r 1 (llama.cpp 0c1e5709):
# its (threads, test) column, in its order.
LLAMA_BENCH_ROWS = [("1", "pp8"), ("1", "pp16"), ("1", "tg2"), ("2", "pp8"), ("2", "pp16"), ("2", "tg2")]


def test_bench_takes_llama_benchs_lists(tiny):
    out = run_cli("bench", "-m", tiny, "-p", "8,16", "-n", "2,0", "-t", "1,2", "-r", "1", "--no-llama-cpp")
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines()[2:]]
    assert [(r[4].strip(), r[5].strip()) for r in rows] == LLAMA_BENCH_ROWS
    assert all(float(r[6].split("±")[0]) > 0 for r in rows)
    bad = run_cli("bench", "-m", tiny, "-p", "8,x")
    assert bad.returncode == 2 and "expected an integer or a comma-separated list, got '8,x'" in bad.stderr


# llama.cpp 0c1e5709's tokenization of these bytes with SmolLM2's vocabulary (recorded
# through llama-cpp-python: Llama(vocab_only=True).tokenize(data, add_bos=True, special=True)).
LLAMA_TOKENIZE_SMOLLM2 = {b"Hello world\n": [19556, 905, 198], b"a\r\nb\r\n": [81, 201, 198, 82, 2738]}


@pytest.mark.parametrize("data", list(LLAMA_TOKENIZE_SMOLLM2))
def test_tokenize_reads_a_file_and_stdin_verbatim_as_llama_tokenize(tmp_path, data):
    path = tmp_path / "text.txt"
    path.write_bytes(data)
    want = ("[" + ", ".join(map(str, LLAMA_TOKENIZE_SMOLLM2[data])) + "]\n").encode()
    for args, stdin in ((["-f", str(path)], b""), (["--stdin"], data), (["-"], data)):
        out = run_cli_bytes("tokenize", "--ids", *args, stdin=stdin)
        assert out.returncode == 0, out.stderr
        assert out.stdout == want, args
    both = run_cli_bytes("tokenize", "--stdin", "-p", "x", stdin=b"y")
    assert both.returncode == 2 and b"--stdin: the text comes from stdin alone" in both.stderr


def test_repeat_last_n_minus_one_is_the_context_size(tiny):
    """With a strong penalty the window's size shows in the text: -1 gives what the
    explicit context size (300) gives, and not what a window of 64 gives."""
    def run(window):
        out = run_cli("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-n", "250", "-c", "300",
                      "--repeat-penalty", "20", "--repeat-last-n", window, "-t", "1")
        assert out.returncode == 0, out.stderr
        return out.stdout
    whole = run("-1")
    assert whole == run("300") != run("64")
    chat = [run_cli("chat", "-m", tiny, "--temp", "0", "-n", "40", "-c", "128", "--repeat-penalty", "20",
                    "--repeat-last-n", window, "-t", "1", stdin="hello\n") for window in ("-1", "128")]
    assert chat[0].returncode == 0, chat[0].stderr
    assert chat[0].stdout == chat[1].stdout
    bad = run_cli("generate", "-m", tiny, "-p", "x", "--repeat-last-n", "-2")
    assert bad.returncode == 2
    assert "--repeat-last-n: must be >= 0, or -1 for the whole context, got -2" in bad.stderr


@pytest.mark.parametrize("template,message", [
    ("{% for m in messages %}{{ m['content'] }{% endfor %}", "the chat template does not compile: unexpected '}'"),
    ("{{ raise_exception('no turns here') }}", "the chat template failed: no turns here"),
])
def test_chat_with_a_template_that_cannot_render_stops_at_once(tiny, tmp_path, template, message):
    path = tmp_path / "broken.jinja"
    path.write_text(template, encoding="utf-8")
    out = run_cli("chat", "-m", tiny, "-n", "3", "--chat-template-file", str(path), stdin="hi\nhello\n")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith(f"infer: error: {message}") and out.stderr.count("\n") == 1, out.stderr
    assert "--chat-template chatml" in out.stderr


def test_perplexity_with_no_chunks_is_refused_not_nan(tiny, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    out = run_cli("perplexity", "-m", tiny, "-f", str(text), "-c", "32", "--chunks", "0")
    assert out.returncode == 2 and "nan" not in out.stdout
    assert out.stderr == "infer: error: --chunks: must be >= 1, or -1 for all of them, got 0\n"
    every = run_cli("perplexity", "-m", tiny, "-f", str(text), "-c", "32", "--chunks", "-1", "-t", "1")
    assert every.returncode == 0, every.stderr
    assert "Final estimate: PPL = " in every.stdout and "nan" not in every.stdout


def test_quantize_plain_k_types_say_how_they_differ_from_llama_quantizes(tiny, tmp_path):
    """llama-quantize's Q4_K is an alias of Q4_K_M (its QUANT_OPTIONS table); infer's
    q4_k is Q4_K throughout.  The file is as documented, and the user is told."""
    gguf = pytest.importorskip("gguf")
    out_path = tmp_path / "q4k.gguf"
    out = run_cli("quantize", tiny, str(out_path), "Q4_K", "-t", "1")
    assert out.returncode == 0, out.stderr
    assert ("infer: note: q4_k gives Q4_K to every weight it can; llama-quantize's Q4_K is an alias of "
            "Q4_K_M, which infer names q4_k_m") in out.stderr
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(out_path)).tensors if t.name.startswith("blk.")}
    assert types == {"Q4_K", "F32"}  # no Q6_K ffn_down/attn_v as Q4_K_M would give
    plain = run_cli("quantize", tiny, str(tmp_path / "q4km.gguf"), "Q4_K_M", "-t", "1")
    assert plain.returncode == 0 and "note" not in plain.stderr


def write_split(tiny, directory):
    """The tiny model cut in two as llama-gguf-split cuts it: metadata in the first
    part, the tensors shared out, each part with the gguf package's split keys."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(tiny)
    half = len(reader.tensors) // 2
    paths = []
    for number, tensors in enumerate((reader.tensors[:half], reader.tensors[half:])):
        path = str(directory / f"tiny-0000{number + 1}-of-00002.gguf")
        w = gguf.GGUFWriter(path, "llama")
        if number == 0:
            for key, field in reader.fields.items():
                if key.startswith("GGUF.") or key == "general.architecture":
                    continue
                kind = field.types[0]
                if kind == gguf.GGUFValueType.ARRAY:
                    w.add_key_value(key, field.contents(), kind, sub_type=field.types[-1])
                else:
                    w.add_key_value(key, field.contents(), kind)
        w.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_NO, number)
        w.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_COUNT, 2)
        w.add_int32(gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, len(reader.tensors))
        for t in tensors:
            w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(path)
    return paths


def test_a_part_of_a_split_model_is_refused_by_name(tiny, tmp_path):
    """The first part of a split model failed with 'llama.block_count is 4 but the
    file has tensors for 2 blocks', and quantize wrote half a model with status 0."""
    first, second = write_split(tiny, tmp_path)
    for path, part, merge_from in ((first, 1, first), (second, 2, "FIRST-PART.gguf")):
        want = (f"infer: error: {path}: part {part} of a model split into 2 files (llama-gguf-split), which infer "
                f"does not read as one model; merge them first: llama-gguf-split --merge {merge_from} MERGED.gguf\n")
        out = run_cli("generate", "-m", path, "-p", "hi", "-n", "1")
        assert out.returncode == 1 and out.stderr == want
        quantized = tmp_path / f"q{part}.gguf"
        out = run_cli("quantize", path, str(quantized), "q8_0")
        assert out.returncode == 1 and out.stderr.endswith(want) and not quantized.exists()
        info = run_cli("info", path)
        assert info.returncode == 0 and f"  split           part {part} of 2 (llama-gguf-split)" in info.stdout
    import infer

    with pytest.raises(infer.UnsupportedModelError, match="part 1 of a model split into 2 files"):
        infer.load(first)


@pytest.mark.parametrize("given,want", [
    (r"a\nb\tc\rd", "a\nb\tc\rd"),
    (r"\'\"\\", "'\"\\"),
    (r"\x41\x4a\x7e", "AJ~"),
    (r"caf\xc3\xa9", "café"),          # bytes: two escapes make one character
    (r"\q \x4 \xZZ", r"\q \x4 \xZZ"),  # unknown or short escapes stay as they are
    ("end\\", "end\\"),                # a final backslash stays
    ("no escapes ü", "no escapes ü"),
])
def test_process_escapes_as_llama_cpps_string_process_escapes(given, want):
    from infer.cli.generate import process_escapes

    assert process_escapes(given) == want


# llama.cpp's ids for these bytes with SmolLM2 (recorded as above).
LLAMA_TOKENIZE_ESCAPED = {b"Q:\tA\nB": [65, 42, 197, 49, 198, 50], b"Q:\\tA\\nB": [65, 19199, 100, 49, 76, 94, 50]}


def test_p_processes_escapes_as_llama_cpps_tools_do():
    def ids(*args):
        out = run_cli("tokenize", "--ids", *args)
        assert out.returncode == 0, out.stderr
        return out.stdout

    escaped, literal = (str(LLAMA_TOKENIZE_ESCAPED[k]) + "\n" for k in (b"Q:\tA\nB", b"Q:\\tA\\nB"))
    assert ids("-p", r"Q:\tA\nB") == ids("-e", "-p", r"Q:\tA\nB") == escaped
    assert ids("--no-escape", "-p", r"Q:\tA\nB") == literal
    assert ids(r"Q:\tA\nB") == literal  # the argument is taken as it is
    bad = run_cli("tokenize", "-p", r"\xff")
    assert bad.returncode == 2 and "-p: its \\x escapes do not make UTF-8 text" in bad.stderr


def test_generate_p_with_escapes_is_the_prompt_with_those_characters(tiny):
    common = ("generate", "-m", tiny, "--temp", "0", "-n", "4", "-t", "1")
    escaped = run_cli(*common, "-p", r"The quick\nbrown fox")
    real = run_cli(*common, "The quick\nbrown fox")
    assert escaped.returncode == real.returncode == 0, escaped.stderr
    assert escaped.stdout == real.stdout and _report(escaped.stderr)[0] == _report(real.stderr)[0]


def test_sampling_options_as_llama_cpp_names_them(tiny):
    import infer

    common = ("generate", "-m", tiny, "-p", "The quick brown fox", "-t", "1")

    def text(*args):
        out = run_cli(*common, *args)
        assert out.returncode == 0, out.stderr
        return out.stdout, _report(out.stderr)[1]

    greedy = text("--temp", "0", "-n", "12")
    assert text("--temperature", "0", "--predict", "12") == greedy
    assert text("--temp", "-1", "-n", "12") == greedy  # llama.cpp: max(temp, 0)
    penalized = text("--temp", "0", "-n", "12", "--presence-penalty", "3", "--frequency-penalty", "2")
    with infer.load(tiny, n_threads=1) as model:
        want = "".join(infer.generate(model, "The quick brown fox", max_tokens=12, temperature=0,
                                      presence_penalty=3.0, frequency_penalty=2.0))
    assert penalized == (want + "\n", 12) and penalized != greedy


def test_conversation_flag_and_default_threads_as_llama_cli(tiny):
    chat = [run_cli("chat", "-m", tiny, "--temp", "0", "-n", "5", *flags, stdin="hello\n")
            for flags in ([], ["-cnv"], ["--conversation"])]
    assert all(c.returncode == 0 for c in chat) and chat[0].stdout == chat[1].stdout == chat[2].stdout
    refused = run_cli("generate", "-m", tiny, "-p", "hi", "-cnv")
    assert refused.returncode == 2 and "-cnv: a conversation is `infer chat`" in refused.stderr
    common = ("generate", "-m", tiny, "-p", "The quick brown fox", "--temp", "0", "-n", "5")
    default, minus_one = run_cli(*common), run_cli(*common, "-t", "-1")
    assert minus_one.returncode == 0, minus_one.stderr
    assert minus_one.stdout == default.stdout
    bad = run_cli(*common, "-t", "-2")
    assert bad.returncode == 2 and "--threads: must be >= 1, or -1 for the default, got -2" in bad.stderr
