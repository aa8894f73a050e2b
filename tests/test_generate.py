"""generate(): streaming text, UTF-8 boundaries, stop strings, end of turn, finish reasons;
and the docs/variants.md example driven through infer.load."""
import importlib.util
import os
import sys

import numpy as np
import pytest

from infer.generate import TextStream, generate
from infer.runtime import Context, Engine, Model
from scripted import GreedySampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Token pieces as bytes.  "é" = C3 A9 and "€" = E2 82 AC are split across tokens.
PIECES = [b"<eot>", b"Hel", b"lo", b" wor", b"ld", b"\xc3", b"\xa9", b"\xe2", b"\x82\xac",
          b"!", b"ST", b"OP", b"S", b"x", b" "]
EOT = 0


class FakeTokenizer:
    class vocab:
        end_of_turn_ids = [EOT]

    def decode(self, ids):
        return b"".join(PIECES[i] for i in ids if i != EOT).decode("utf-8", errors="replace")

    def encode(self, text, add_special=True, parse_special=False):
        return [PIECES.index(b"x")] * max(1, len(text))


class ScriptEngine(Engine):
    """Generates a fixed script of tokens after whatever prompt it is given."""
    vocab_size = len(PIECES)
    max_seq_len = 64

    def __init__(self, script):
        self.script = script

    def create_context(self, n_ctx=None, sampler=None):
        return ScriptContext(self, n_ctx or self.max_seq_len, GreedySampler())


class ScriptContext(Context):
    prompt_len = None

    def _forward(self, tokens, start):
        if start == 0:
            self.prompt_len = len(tokens)
        i = start + len(tokens) - self.prompt_len
        self.logits[:] = 0
        self.logits[self.engine.script[i] if i < len(self.engine.script) else PIECES.index(b"x")] = 1


def model_for(script_bytes):
    return Model(FakeTokenizer(), ScriptEngine([PIECES.index(b) for b in script_bytes]))


def run(model, **kw):
    gen = generate(model, "xx", **kw)
    pieces = list(gen)
    return pieces, gen


def test_pieces_never_split_a_utf8_character():
    m = model_for([b"Hel", b"lo", b"\xc3", b"\xa9", b" wor", b"\xe2", b"\x82\xac", b"ld", b"<eot>"])
    pieces, gen = run(m, max_tokens=50)
    assert "".join(pieces) == "Hello\u00e9 wor\u20acld" == gen.text
    assert all("\ufffd" not in p for p in pieces)
    assert "\u00e9" in pieces[pieces.index("lo") + 1]  # é comes out whole, after its 2nd byte
    assert gen.finish_reason == "stop"
    assert gen.tokens[-1] == EOT and len(gen.tokens) == 9


def test_max_tokens_gives_length():
    m = model_for([b"Hel", b"lo", b" wor", b"ld", b"!"])
    pieces, gen = run(m, max_tokens=3)
    assert "".join(pieces) == "Hello wor"
    assert gen.finish_reason == "length" and len(gen.tokens) == 3


def test_max_tokens_zero_generates_nothing():
    pieces, gen = run(model_for([b"Hel"]), max_tokens=0)
    assert pieces == [] and gen.finish_reason == "length"


def test_full_context_gives_length():
    m = model_for([b"x"] * 100)
    gen = generate(m, "xx", context=m.create_context(n_ctx=6), max_tokens=None)
    assert "".join(gen) == "xxxx" and gen.finish_reason == "length"


def test_stop_string_across_tokens_is_withheld_and_cut():
    m = model_for([b"Hel", b"lo", b"ST", b"OP", b"S", b"!", b"<eot>"])
    pieces, gen = run(m, stop=["STOP"], max_tokens=50)
    assert "".join(pieces) == "Hello"
    assert all("S" not in p for p in pieces)   # "ST" was withheld, never emitted
    assert gen.finish_reason == "stop"
    assert len(gen.tokens) == 4                 # stopped right after "OP"


def test_false_alarm_prefix_is_released():
    m = model_for([b"Hel", b"ST", b"!", b"ST", b"<eot>"])
    pieces, gen = run(m, stop=["STOP"], max_tokens=50)
    # "ST" is held back after "Hel", released once "!" shows it is not "STOP";
    # the final "ST" is released at end-of-turn.
    assert pieces == ["Hel", "ST!", "ST"]
    assert gen.finish_reason == "stop"


def test_stop_inside_one_token_and_earliest_of_several():
    m = model_for([b"Hel", b"lo", b" wor", b"ld", b"<eot>"])
    pieces, gen = run(m, stop=["world", "lo w"], max_tokens=50)
    assert "".join(pieces) == "Hel" and gen.finish_reason == "stop"


def test_stop_at_length_end_is_still_cut():
    m = model_for([b"Hel", b"ST", b"OP"])
    pieces, gen = run(m, stop=["STOP"], max_tokens=3)
    assert "".join(pieces) == "Hel" and gen.finish_reason == "stop"


def test_ignoring_end_of_turn_runs_to_length():
    m = model_for([b"Hel", b"<eot>", b"lo"])
    pieces, gen = run(m, max_tokens=3, stop_at_end_of_turn=False)
    assert "".join(pieces) == "Hello" and gen.finish_reason == "length"


def test_prompt_prefix_held_in_context_is_reused():
    m = model_for([b"Hel", b"lo"])
    ctx = m.create_context()
    x = PIECES.index(b"x")
    list(generate(m, [x, x, x], context=ctx, max_tokens=1))
    assert ctx.tokens[:3] == [x, x, x] and ctx.n_past == 4
    # same prefix, different tail: history is cut to the common prefix, then extended
    sp = PIECES.index(b" ")
    list(generate(m, [x, x, sp], context=ctx, max_tokens=1))
    assert ctx.tokens[:3] == [x, x, sp] and ctx.n_past == 4


def test_misuse():
    m = model_for([b"Hel"])
    with pytest.raises(ValueError, match="max_tokens"):
        generate(m, "x", max_tokens=-1)
    with pytest.raises(ValueError, match="prompt"):
        list(generate(m, [], max_tokens=1))
    with pytest.raises(TypeError):
        generate(m, "x", context=m.create_context(), temperature=0.5)


@pytest.mark.parametrize("kw, exc", [
    (dict(max_tokens=2.5), TypeError), (dict(max_tokens=True), TypeError), (dict(max_tokens="3"), TypeError),
    (dict(stop=[5]), TypeError), (dict(stop=b"x"), TypeError), (dict(stop=["ok", None]), TypeError),
])
def test_bad_max_tokens_and_stop_are_refused_before_anything_runs(kw, exc):
    """Refused by generate() itself, naming the argument; before, 2.5 was an n_ctx
    error (or 3 tokens with context=), True was 1 token, and a stop that is not a str
    failed in the middle of the iteration, after the prompt was prefilled."""
    m = model_for([b"Hel", b"lo", b" wor"])
    ctx = m.create_context()
    name = next(iter(kw))
    for context in (None, ctx):
        with pytest.raises(exc, match=name):
            generate(m, "xx", context=context, **kw)
    assert ctx.n_past == 0
    assert "".join(generate(m, "xx", stop=("lo", ""), max_tokens=np.int64(3))) == "Hel"


@pytest.mark.parametrize("prompt", [b"xx", [1.7, 2.2], [True, 3], ["x"]])
def test_a_prompt_that_is_not_text_or_token_ids_is_refused(prompt):
    """int() on each item made bytes b"xx" the ids [120, 120] and 1.7 token 1."""
    m = model_for([b"Hel"])
    with pytest.raises(TypeError, match="prompt"):
        generate(m, prompt, max_tokens=1)
    assert "".join(generate(m, np.array([13, 13]), max_tokens=1)) == "Hel"


def test_a_generation_whose_context_changed_meanwhile_says_so():
    """Two generations interleaved on one context: the first resumed from the second's
    tokens and went on as if they were its own."""
    m = model_for([b"Hel", b"lo", b" wor", b"ld", b"!"])
    ctx = m.create_context()
    first = generate(m, "xx", context=ctx, max_tokens=5)
    assert next(first) == "Hel"
    second = generate(m, "x", context=ctx, max_tokens=2)
    assert "".join(second) == "Hello"
    with pytest.raises(RuntimeError, match="context changed"):
        next(first)
    again = generate(m, "x", context=ctx, max_tokens=1)    # a new one on the same context is fine
    assert "".join(again) == "Hel"


def test_a_context_that_cannot_be_a_weak_key_still_generates():
    class UnhashableContext(ScriptContext):
        __hash__ = None

    class Engine2(ScriptEngine):
        def create_context(self, n_ctx=None, sampler=None):
            return UnhashableContext(self, n_ctx or self.max_seq_len, GreedySampler())

    m = Model(FakeTokenizer(), Engine2([PIECES.index(b) for b in [b"Hel", b"lo"]]))
    assert "".join(generate(m, "xx", max_tokens=2)) == "Hello"


def test_text_stream_flush_releases_incomplete_tail():
    s = TextStream(FakeTokenizer().decode)
    assert s.push(PIECES.index(b"Hel")) == "Hel"
    assert s.push(PIECES.index(b"\xe2")) == ""
    assert s.flush() == "\ufffd"


# ---- the docs/variants.md example -------------------------------------------------------
BIGRAM = os.path.join(ROOT, "examples", "infer-bigram", "infer_bigram.py")


def _bigram_module():
    """The example imported from its file and registered in-process (tests/
    test_variant_packages.py installs it as a package and finds it by entry point)."""
    from infer.runtime import register_variant

    spec = importlib.util.spec_from_file_location("infer_bigram", BIGRAM)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["infer_bigram"] = mod
    spec.loader.exec_module(mod)
    register_variant("bigram")(mod.load_bigram)
    return mod


def test_docs_embed_the_example_file_verbatim():
    md = open(os.path.join(ROOT, "docs", "variants.md"), encoding="utf-8").read()
    code = open(BIGRAM, encoding="utf-8").read()
    assert "```python\n" + code + "```" in md
    toml = open(os.path.join(os.path.dirname(BIGRAM), "pyproject.toml"), encoding="utf-8").read()
    assert "```toml\n" + toml + "```" in md


def test_a_closed_python_variant_raises_model_closed_error(tmp_path):
    """The bigram's close() drops its table; using its contexts afterwards raised
    "'NoneType' object is not subscriptable" and create_context still worked."""
    import infer
    from infer.runtime import ModelClosedError

    bigram = _bigram_module()
    path = str(tmp_path / "bigram.gguf")
    bigram.write_bigram_gguf(path, "the cat sat on the mat. " * 5)
    model = infer.load(path)
    ctx = model.create_context(n_ctx=32, temperature=0)
    ctx.prefill(model.tokenizer.encode("the c"))
    model.close()
    for call in (ctx.next, lambda: ctx.prefill([1]), lambda: model.create_context(n_ctx=8),
                 lambda: "".join(infer.generate(model, "the ", max_tokens=3))):
        with pytest.raises(ModelClosedError):
            call()
    model.close()  # twice is fine


def test_bigram_example_through_load_and_generate(tmp_path):
    import infer

    bigram = _bigram_module()
    text = "the cat sat on the mat. the dog sat on the log. "
    path = str(tmp_path / "bigram.gguf")
    bigram.write_bigram_gguf(path, text * 5)
    # independent check: the greedy chain over the bigram counts of the text
    data = list((text * 5).encode()) + [256]
    counts = np.ones((257, 257))
    np.add.at(counts, (data[:-1], data[1:]), 1.0)
    with infer.load(path) as model:
        assert model.engine.architecture == "bigram"
        prompt = "the c"
        ids = model.tokenizer.encode(prompt)
        assert ids == list(prompt.encode())
        expected, t = [], ids[-1]
        for _ in range(200):
            t = int(np.argmax(counts[t]))
            if t == 256:  # <|endoftext|> is the end-of-turn token
                break
            expected.append(t)
        ctx = model.create_context(n_ctx=64, temperature=0)
        ctx.prefill(ids)
        assert [ctx.next() for _ in range(12)] == expected[:12]
        gen = infer.generate(model, prompt, max_tokens=12, temperature=0)
        assert "".join(gen) == bytes(expected[:12]).decode() and gen.finish_reason == "length"
        greedy_text = bytes(expected).decode()
        gen = infer.generate(model, prompt, max_tokens=200, stop=["mat"], temperature=0)
        out = "".join(gen)
        if "mat" in greedy_text:
            assert out == greedy_text[:greedy_text.index("mat")] and gen.finish_reason == "stop"
        else:
            assert out == greedy_text


def test_length_cut_inside_a_character_holds_the_bytes_back():
    # "€" is E2 82 AC over two tokens; max_tokens stops after the first: no "\ufffd".
    m = model_for([b"Hel", b"\xe2"])
    gen = generate(m, "x", max_tokens=2)
    assert "".join(gen) == "Hel" and gen.text == "Hel"
    assert gen.finish_reason == "length"
    assert gen.incomplete_tokens == [PIECES.index(b"\xe2")]
    # a complete character at the cut is emitted as usual
    m = model_for([b"\xe2", b"\x82\xac"])
    gen = generate(m, "x", max_tokens=2)
    assert "".join(gen) == "\u20ac" and gen.incomplete_tokens == []


def test_text_stream_flush_can_drop_an_incomplete_tail():
    s = TextStream(FakeTokenizer().decode)
    assert s.push(PIECES.index(b"Hel")) == "Hel"
    assert s.push(PIECES.index(b"\xc3")) == ""
    assert s.flush(drop_incomplete=True) == "" and s.dropped == [PIECES.index(b"\xc3")]


# ---- default context memory ----------------------------------------------------------------
def _anon_mib():
    """Resident anonymous memory (the KV cache and buffers, not the mapped weights)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status")


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_generate_without_a_context_sizes_it_to_the_call(which):
    # A context for the trained length (8K for SmolLM2, 32K for Gemma 3) cost
    # 270-300 MiB per call; a short generation now costs in proportion to its length.
    import infer
    from _tok_models import load_installed

    with load_installed(which) as model:
        list(infer.generate(model, "Hi", max_tokens=2, temperature=0))  # warm: scratch, code
        before = _anon_mib()
        gen = infer.generate(model, "Hello there", max_tokens=8, temperature=0)
        text = "".join(gen)
        grown = _anon_mib() - before
        n_prompt = len(gen.prompt_ids)
        assert gen.context.n_ctx == n_prompt + 8 < model.engine.max_seq_len
        assert len(gen.tokens) <= 8 and isinstance(text, str)
        full = model.create_context()
        cache_mib = (full.k_cache.nbytes + full.v_cache.nbytes) / 2**20
        assert cache_mib > 100                  # what a full-length cache would be
        assert grown < 16, (grown, cache_mib)
        # max_tokens=None keeps the trained length (the generation may run that far)
        assert infer.generate(model, "x", max_tokens=None).context.n_ctx == model.engine.max_seq_len


@pytest.mark.parametrize("key, value", [("tokenizer.chat_template", 5),
                                        ("tokenizer.chat_template.tool_use", [1, 2])])
def test_a_chat_template_that_is_not_a_string_fails_at_load(tmp_path, key, value):
    import infer
    from infer.gguf import GGUFError, GGUFFile, GGUFWriter

    bigram = _bigram_module()
    good, bad = str(tmp_path / "good.gguf"), str(tmp_path / "bad.gguf")
    bigram.write_bigram_gguf(good, "abc. " * 5)
    with GGUFFile(good) as f:
        w = GGUFWriter()
        w.copy_metadata(f)
        w.add_metadata(key, value)
        for name, t in f.tensors.items():
            w.add_tensor(name, np.array(t.data), t.dtype, t.shape)
        w.write(bad)
    with pytest.raises(GGUFError, match=f"metadata '{key}': expected a string"):
        infer.load(bad)
    infer.load(good).close()
