"""Fill-in-the-middle (infer/infill.py) and llama-server's ``POST /infill``.

References: the layout written out by hand from llama-server's format_prompt_infill
(tools/server/server-common.cpp of the llama.cpp that llama-cpp-python 0.3.36 vendors,
the FIM repo-level pattern of arXiv 2409.12186), token by token, on a byte-level
vocabulary with Qwen2.5-Coder's FIM tokens (tests/vocab_cases.py, whose FIM ids
tests/test_vocab_specials.py checks against llama.cpp's); and llama-server's own
/infill prompts for the same requests, recorded in tests/data/llama_cpp_infill.json
by scripts/record_infill.py.
"""
import json
import os

import pytest

import vocab_cases

import infer
from infer.infill import InfillUnsupportedError, infill_prompt
from infer.serve.llama_server import create_infill

DATA = os.path.join(os.path.dirname(__file__), "data", "llama_cpp_infill.json")

@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    """A one-layer random model with Qwen2.5-Coder's special tokens (no BOS)."""
    path = vocab_cases.write("qwen-coder", str(tmp_path_factory.mktemp("infill") / "coder.gguf"), weights=True)
    model = infer.load(path)
    yield model
    model.close()


def enc(model, text):
    return model.tokenizer.encode(text, add_special=False, parse_special=False)


def tid(model, text):
    return model.tokenizer.vocab.token_id(text)


def test_the_layout_token_by_token(coder):
    pre, suf, mid = (tid(coder, t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    rep, sep = tid(coder, "<|repo_name|>"), tid(coder, "<|file_sep|>")
    prefix, suffix = enc(coder, "def add(a, b):\n    "), enc(coder, "\n\nprint(add(1, 2))\n")
    extra = [("util.py", "x = 1\n"), ("b.py", "import util\n")]
    expected = ([rep] + enc(coder, "myproject\n")
                + [sep] + enc(coder, "util.py\n") + enc(coder, "x = 1\n")
                + [sep] + enc(coder, "b.py\n") + enc(coder, "import util\n")
                + [sep] + enc(coder, "filename\n")
                + [pre] + prefix + enc(coder, "return") + [suf] + suffix + [mid])
    got = infill_prompt(coder.tokenizer, prefix, suffix, extra, enc(coder, "return"), n_ctx=4096)
    assert got == expected
    # --spm-infill: the suffix first
    spm = infill_prompt(coder.tokenizer, prefix, suffix, [], [], n_ctx=4096, suffix_first=True)
    assert spm[-len(suffix) - len(prefix) - 3:] == [suf] + suffix + [pre] + prefix + [mid]


def test_what_is_kept_when_it_does_not_fit(coder):
    pre, suf, mid = (tid(coder, t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    prefix, suffix, prompt = list(range(100)), list(range(100, 200)), [7, 8, 9]
    # a batch of 40: the prefix keeps its last 3 * 10 tokens, the suffix its first 10 - (2 + 3)
    got = infill_prompt(coder.tokenizer, prefix, suffix, [], prompt, n_ctx=40, n_batch=40)
    extra_at = got.index(pre)
    assert got[extra_at:] == [pre] + prefix[-30:] + prompt + [suf] + suffix[:5] + [mid]
    # extra context: what the context leaves after a batch and twice the server's n_predict, its last tokens
    extra = [("a.py", "a" * 50)]
    whole = infill_prompt(coder.tokenizer, [], [], extra, [], n_ctx=4096)
    tail = whole[:whole.index(pre)]
    for n_ctx, n_predict, kept in ((2048 + 20, -1, 22), (2048 + 20, 4, 12), (2048, -1, 2), (100, -1, 0)):
        got = infill_prompt(coder.tokenizer, [], [], extra, [], n_ctx=n_ctx, n_predict=n_predict)
        assert got[:got.index(pre)] == (tail[len(tail) - kept:] if kept else [])


def test_a_vocabulary_without_fim_tokens_is_refused(tmp_path):
    path = vocab_cases.write("llama3", str(tmp_path / "l3.gguf"), weights=True)
    with infer.load(path) as model:
        with pytest.raises(InfillUnsupportedError, match="prefix, suffix, middle"):
            create_infill(model, "a", "b")


def test_create_infill_runs_the_layout_through_the_completion(coder):
    out = create_infill(coder, "def add(a, b):\n    ", "\n", [{"filename": "u.py", "text": "x = 1"}], "return",
                        n_predict=4, temperature=0, return_tokens=True)
    ids = infill_prompt(coder.tokenizer, enc(coder, "def add(a, b):\n    "), enc(coder, "\n"),
                        [("u.py", "x = 1")], enc(coder, "return"), n_ctx=coder.create_context().n_ctx)
    assert out["tokens_evaluated"] == len(ids)
    assert out["prompt"] == coder.tokenizer.decode(ids)
    # the same tokens as a plain /completion of that prompt
    ctx = coder.create_context()
    ctx.prefill(ids)
    greedy = []
    for _ in range(out["tokens_predicted"]):
        token = int(ctx.logits.argmax())
        greedy.append(token)
        if coder.tokenizer.vocab.is_end_of_turn(token):
            break
        ctx.prefill([token])
    assert out["tokens"] == greedy


@pytest.mark.parametrize("fields, names", [
    (dict(input_suffix="b"), "input_prefix"),
    (dict(input_prefix="a"), "input_suffix"),
    (dict(input_prefix="a", input_suffix="b", prompt=3), "prompt"),
    (dict(input_prefix="a", input_suffix="b", input_extra={"text": "x"}), "input_extra"),
    (dict(input_prefix="a", input_suffix="b", input_extra=[{"filename": "a.py"}]), "text"),
    (dict(input_prefix="a", input_suffix="b", input_extra=[{"text": "x", "filename": 3}]), "filename"),
])
def test_bad_requests_name_the_field(coder, fields, names):
    with pytest.raises(infer.api.InvalidRequestError, match=names):
        create_infill(coder, **fields)


def test_llama_servers_own_infill_prompts(coder):
    """llama-server's /infill on the same file (recorded): its prompt, token for token."""
    with open(DATA) as f:
        recorded = json.load(f)
    assert recorded["tokens"] == vocab_cases.tokens_of("qwen-coder")  # the vocabulary it was recorded on
    for case in recorded["cases"]:
        ids = infill_prompt(coder.tokenizer, enc(coder, case["input_prefix"]), enc(coder, case["input_suffix"]),
                            [(c.get("filename", "tmp"), c["text"]) for c in case["input_extra"]],
                            coder.tokenizer.encode(case["prompt"], add_special=False, parse_special=True),
                            n_ctx=recorded["n_ctx"], n_batch=recorded["n_batch"], n_predict=recorded["n_predict"])
        assert ids == case["llama_server_prompt_ids"], case["input_prefix"]


def test_replies_show_control_tokens_as_llama_server_does(coder):
    """llama-server's greedy /completion replies (recorded): the same tokens, and the same
    text, control tokens (<|im_start|>, <|fim_suffix|>) shown as nothing.  An unfinished
    character at the very end is dropped by infer, where llama-server shows U+FFFD."""
    from infer.serve.llama_server import create_completion

    with open(DATA) as f:
        replies = json.load(f)["replies"]
    shown = 0
    for reply in replies:
        out = create_completion(coder, reply["prompt"], n_predict=16, temperature=0, return_tokens=True,
                                context=coder.create_context(256))
        assert out["tokens"] == reply["tokens"]
        assert out["content"].rstrip("\ufffd") == reply["content"].rstrip("\ufffd")
        shown += sum(coder.tokenizer.vocab.is_control(t) for t in out["tokens"][:-1])
    assert shown >= 3  # the replies do hold control tokens


def test_the_infill_endpoint(coder, tmp_path):
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (the serve extra)")
    from test_serve import app_server, request
    from test_serve_llama_endpoints import FINAL_KEYS, assert_llama_error

    from infer.serve.app import create_app

    body = dict(input_prefix="def add(a, b):\n    ", input_suffix="\n", input_extra=[{"text": "x = 1"}],
                n_predict=3, temperature=0, return_tokens=True)
    alone = create_infill(coder, context=coder.create_context(256), **body)
    with app_server(create_app(coder, parallel=1, ctx_size=256)) as base:
        status, _, out = request(base, "POST", "/infill", body)
        assert status == 200 and set(out) == FINAL_KEYS, out
        assert (out["tokens"], out["prompt"], out["content"]) == (alone["tokens"], alone["prompt"], alone["content"])
        status, _, chunks = request(base, "POST", "/infill", dict(body, stream=True))
        texts = [json.loads(line[6:]) for line in chunks.splitlines() if line.startswith("data: ")]
        assert "".join(c["content"] for c in texts) == out["content"] and texts[-1]["stop"] is True
        status, _, out = request(base, "POST", "/infill", {"input_suffix": "b"})
        assert_llama_error(status, out, 400, "input_prefix")
        status, _, out = request(base, "POST", "/infill", dict(body, bogus=1))
        assert_llama_error(status, out, 400, "bogus")
    path = vocab_cases.write("llama3", str(tmp_path / "l3.gguf"), weights=True)
    with infer.load(path) as plain:
        with app_server(create_app(plain)) as base:
            status, _, out = request(base, "POST", "/infill", body)
            assert_llama_error(status, out, 501, "Infill is not supported by this model")


def psm_greedy(model, prompt, suffix, n):
    """[PRE]prompt[SUF]suffix[MID] written out by hand, and its greedy tokens (to an end-of-turn one)."""
    pre, suf, mid = (tid(model, t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    ids = [pre] + enc(model, prompt) + [suf] + enc(model, suffix) + [mid]
    ctx = model.create_context(256)
    ctx.prefill(ids)
    greedy = []
    for _ in range(n):
        token = int(ctx.logits.argmax())
        if model.tokenizer.vocab.is_end_of_turn(token):
            break
        greedy.append(token)
        ctx.prefill([token])
    return ids, greedy


def test_openai_completions_with_a_suffix(coder):
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (the serve extra)")
    from test_serve import app_server, client

    from infer.serve.app import create_app

    ids, greedy = psm_greedy(coder, "def add(a, b):\n    ", "\nprint(add(1, 2))", 5)
    out = infer.api.create_completion(coder, "def add(a, b):\n    ", suffix="\nprint(add(1, 2))", max_tokens=5,
                                      temperature=0, logprobs=0)
    assert out["usage"]["prompt_tokens"] == len(ids)
    assert out["choices"][0]["logprobs"]["tokens"] == [coder.tokenizer.decode([t]) for t in greedy]
    with app_server(create_app(coder, parallel=1, ctx_size=256)) as base:
        got = client(base).completions.create(model="coder", prompt="def add(a, b):\n    ",
                                              suffix="\nprint(add(1, 2))", max_tokens=5, temperature=0)
        assert got.choices[0].text == out["choices"][0]["text"] and got.usage.prompt_tokens == len(ids)
    with pytest.raises(infer.api.UnsupportedOptionError, match="echo"):
        infer.api.create_completion(coder, "a", suffix="b", echo=True)


def test_ollamas_generate_with_a_suffix(coder, tmp_path):
    ollama = pytest.importorskip("ollama", reason="the ollama client is not installed (the test extra)")
    from test_serve import app_server

    from infer.serve.app import create_app
    from infer.serve.ollama import capabilities

    ids, greedy = psm_greedy(coder, "def add(a, b):\n    ", "\nprint(add(1, 2))", 4)
    assert "insert" in capabilities(coder)
    with app_server(create_app(coder, parallel=1, ctx_size=256)) as base:
        client = ollama.Client(host=base)
        out = client.generate(model="coder", prompt="def add(a, b):\n    ", suffix="\nprint(add(1, 2))",
                              options={"temperature": 0, "num_predict": 4})
        # the same tokens (random weights: a last byte of an unfinished character is held back)
        assert out.eval_count == len(greedy) and coder.tokenizer.decode(greedy).startswith(out.response)
        assert len(out.response) >= len(coder.tokenizer.decode(greedy[:-1])) > 0
        assert out.prompt_eval_count == len(ids)
        with pytest.raises(ollama.ResponseError, match="system"):
            client.generate(model="coder", prompt="a", suffix="b", system="be brief")
    path = vocab_cases.write("llama3", str(tmp_path / "l3.gguf"), weights=True)
    with infer.load(path) as plain:
        assert "insert" not in capabilities(plain)
        with app_server(create_app(plain)) as base:
            with pytest.raises(ollama.ResponseError, match="does not support insert"):
                ollama.Client(host=base).generate(model="l3", prompt="a", suffix="b")
