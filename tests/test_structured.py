"""Constrained decoding (infer.structured): llguidance grammars as a token mask.

References: the `jsonschema` package validates every JSON output; Python's `re`
checks regex output; the allowed-token sets are recomputed here from the
vocabulary's bytes alone; llguidance's own decoder is compared with infer's.
"""
import json
import re

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

import infer  # noqa: E402
from infer.sampler import Sampler  # noqa: E402
from infer.structured import (  # noqa: E402
    Constraint,
    Grammar,
    GrammarError,
    grammar_from_response_format,
    llg_tokenizer,
)
from _tok_models import installed_path, load_installed  # noqa: E402



@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    with load_installed(request.param) as m:
        yield m


@pytest.fixture(scope="module")
def smollm2():
    with load_installed("smollm2") as m:
        yield m


def chat_prompt(model, text):
    rendered = model.chat.render([{"role": "user", "content": text}], add_generation_prompt=True)
    return model.tokenizer.encode(rendered, add_special=False, parse_special=True)


# Ten shapes; strings, arrays and numbers are bounded so every output fits the token budget.
SHORT = {"type": "string", "maxLength": 12}
SCHEMAS = [
    ("flat", {"type": "object", "properties": {"name": SHORT, "age": {"type": "integer", "minimum": 0,
                                                                        "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}),
    ("enum", {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
              "required": ["color"], "additionalProperties": False}),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                                  "email": SHORT},
                 "required": ["id", "email"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False}),
    ("array_of_numbers", {"type": "array", "items": {"type": "number", "minimum": -100, "maximum": 100},
                          "minItems": 1, "maxItems": 4}),
    ("array_of_objects", {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x"], "additionalProperties": False}}),
    ("boolean_and_null", {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "null"}},
                          "required": ["ok", "note"], "additionalProperties": False}),
    ("const_and_pattern", {"type": "object", "properties": {
        "version": {"const": 2}, "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
        "required": ["version", "code"], "additionalProperties": False}),
    ("any_of", {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 50}, {"enum": ["none", "many"]}]}),
    ("deep", {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "object", "properties": {"c": {"type": "array", "items": {"enum": [1, 2, 3]},
                                                     "maxItems": 3}},
              "required": ["c"], "additionalProperties": False}},
        "required": ["b"], "additionalProperties": False}}, "required": ["a"], "additionalProperties": False}),
    ("tuple_like", {"type": "object", "properties": {
        "point": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 99},
                                                   {"type": "integer", "minimum": 0, "maximum": 99}],
                  "items": False}, "label": {"enum": ["A", "B"]}},
        "required": ["point", "label"], "additionalProperties": False}),
]


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
@pytest.mark.parametrize("name,schema", SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_json_schema_outputs_parse_and_validate(model, name, schema, mode):
    prompt = chat_prompt(model, f"Reply with JSON ({name.replace('_', ' ')}).")
    sampling = dict(temperature=0.0) if mode == "greedy" else dict(temperature=1.0, top_k=0, top_p=1.0,
                                                                   min_p=0.0, seed=7)
    gen = infer.generate(model, prompt, grammar=Grammar.json_schema(schema), max_tokens=160, **sampling)
    text = "".join(gen)
    assert gen.finish_reason == "stop", text
    jsonschema.validate(json.loads(text), schema)


def test_json_object_mode(smollm2):
    gen = infer.generate(smollm2, chat_prompt(smollm2, "Give me a JSON object."), max_tokens=200,
                         grammar=grammar_from_response_format({"type": "json_object"}), temperature=0.0)
    text = "".join(gen)
    if gen.finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    assert text.startswith("{")


def test_regex_constrains_as_written(model):
    pattern = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    for seed in (1, 2):
        gen = infer.generate(model, "Today's date:", grammar=Grammar.regex(pattern), max_tokens=20,
                             temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
        text = "".join(gen)
        assert re.fullmatch(pattern, text), text
        assert gen.finish_reason == "stop"


def test_a_generation_left_suspended_does_not_constrain_the_context(model):
    """Breaking out of a constrained generation (the Generation still referenced, so
    never closed) leaves the context's sampler free: the next generation in the same
    context is the one a context that never saw the grammar gives."""
    ctx = model.create_context(n_ctx=128, temperature=0)
    gen = infer.generate(model, "Year:", context=ctx, grammar=Grammar.regex(r"[0-9]{4}"), max_tokens=8)
    for _ in gen:
        break
    assert ctx.sampler.grammar is None
    after = infer.generate(model, "The capital of France is", context=ctx, max_tokens=8)
    fresh = infer.generate(model, "The capital of France is", max_tokens=8, temperature=0)
    assert "".join(after) == "".join(fresh) and after.tokens == fresh.tokens
    assert gen.tokens  # the suspended one had sampled under its grammar


def test_lark_grammar_constrains_as_written(model):
    lark = 'start: answer " because " reason\nanswer: "yes" | "no"\nreason: /[a-z]{1,8}/'
    gen = infer.generate(model, "Is the sky blue?", grammar=Grammar.lark(lark), max_tokens=20,
                         temperature=0.9, seed=3)
    text = "".join(gen)
    assert re.fullmatch(r"(yes|no) because [a-z]{1,8}", text), text


def test_gbnf_grammar(smollm2):
    gbnf = 'root ::= "(" digit digit ")"\ndigit ::= [0-9]'
    gen = infer.generate(smollm2, "A number:", grammar=Grammar.gbnf(gbnf), max_tokens=10, temperature=0.0)
    assert re.fullmatch(r"\([0-9]{2}\)", "".join(gen))


@pytest.mark.parametrize("make", [
    lambda: Grammar.json_schema({"type": "no-such-type"}),
    lambda: Grammar.json_schema("{not json"),
    lambda: Grammar.json_schema([1, 2]),
    lambda: Grammar.regex("a(b"),
    lambda: Grammar.lark("start: undefined_rule"),
    lambda: Grammar.gbnf("root ::= ("),
    lambda: Grammar.lark("   "),
    lambda: grammar_from_response_format({"type": "xml"}),
    lambda: grammar_from_response_format({"type": "json_schema", "json_schema": {"name": "x"}}),
])
def test_bad_grammar_is_a_typed_error(make):
    with pytest.raises(GrammarError):
        make()


def test_bad_grammar_fails_before_any_token(smollm2):
    ctx = smollm2.create_context(n_ctx=64)
    with pytest.raises(GrammarError):
        infer.generate(smollm2, "Hello", context=ctx, grammar={"type": "no-such-type"})
    assert ctx.n_past == 0


def test_llguidance_tokenizer_sees_infer_bytes(model):
    tok = model.tokenizer
    llt = llg_tokenizer(tok, model.engine.vocab_size)
    vocab = tok.vocab
    rng = np.random.default_rng(0)
    for i in rng.integers(0, vocab.size, 300):
        i = int(i)
        if vocab.is_special(i):
            assert llt.is_special_token(i), vocab.tokens[i]
        else:
            assert llt.decode_bytes([i]) == tok.token_to_piece(i), vocab.tokens[i]
    byte_ids = np.flatnonzero(vocab.token_types == 6)
    for i in byte_ids[:20]:  # SentencePiece byte tokens <0xNN> stand for their byte
        assert llt.decode_bytes([int(i)]) == bytes([int(vocab.tokens[i][3:5], 16)])
    text = "Hello, world! 123 {\"a\": [1, 2]}"
    assert llt.tokenize_str(text) == tok.encode(text, add_special=False)


def test_mask_is_the_set_of_tokens_the_regex_allows(smollm2):
    """At the start of "[0-9]+" exactly the tokens spelling one or more digits may come
    (recomputed from the vocabulary's bytes); after one digit an end-of-turn may too."""
    tok = smollm2.tokenizer
    c = Constraint(Grammar.regex("[0-9]+"), tok, n_vocab=smollm2.engine.vocab_size, background=False)
    n = smollm2.engine.vocab_size
    digits = {i for i in range(n) if not tok.vocab.is_special(i)
              and re.fullmatch(rb"[0-9]+", tok.token_to_piece(i))}
    assert set(np.flatnonzero(c.allowed())) == digits
    c.consume(tok.encode("7", add_special=False)[0])
    assert set(np.flatnonzero(c.allowed())) == digits | set(tok.vocab.end_of_turn_ids)


def test_mask_comes_before_top_k_and_temperature(smollm2):
    """Greedy and top-k=1 pick the best *allowed* token, not the best token."""
    tok = smollm2.tokenizer
    n = smollm2.engine.vocab_size
    logits = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    c = Constraint(Grammar.regex("(yes|no)"), tok, n_vocab=n, background=False)
    allowed = np.flatnonzero(c.allowed())
    best_allowed = int(allowed[np.argmax(logits[allowed])])
    logits[best_allowed - 1 if best_allowed else 1] = 100.0  # a forbidden favourite
    for s in (Sampler(temperature=0.0, grammar=c), Sampler(top_k=1, seed=0, grammar=c)):
        assert s.sample(logits) == best_allowed
    drawn = {Sampler(temperature=1.5, top_k=5, seed=k, grammar=c).sample(logits) for k in range(30)}
    assert drawn <= set(allowed.tolist())


def test_constraint_rollback_and_deepcopy(smollm2):
    import copy

    tok = smollm2.tokenizer
    c = Constraint(Grammar.regex("ab|ac"), tok, n_vocab=smollm2.engine.vocab_size)
    start = c.allowed().copy()
    a = tok.encode("a", add_special=False)[0]
    c.consume(a)
    after_a = c.allowed().copy()
    twin = copy.deepcopy(c)
    c.rollback(1)
    assert np.array_equal(c.allowed(), start)
    assert np.array_equal(twin.allowed(), after_a)
    with pytest.raises(GrammarError):
        twin.consume(tok.encode("z", add_special=False)[0])


def test_cli_generate_json_schema_and_grammar(tmp_path):
    import subprocess
    import sys

    installed_path("smollm2")
    schema = SCHEMAS[0][1]
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "g.gbnf").write_text('root ::= "color: " ("red" | "blue")')
    (tmp_path / "bad.json").write_text('{"type": "nope"}')
    base = [sys.executable, "-m", "infer", "generate", "--temp", "0", "-n", "60"]
    out = subprocess.run(base + ["--chat", "A person as JSON", "--json-schema", str(tmp_path / "s.json")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    jsonschema.validate(json.loads(out.stdout), schema)
    out = subprocess.run(base + ["Favourite", "--grammar", str(tmp_path / "g.gbnf")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() in ("color: red", "color: blue"), out.stdout
    out = subprocess.run(base + ["x", "--json-schema", str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert out.returncode == 1 and "invalid json_schema" in out.stderr and "Traceback" not in out.stderr


def test_listed_properties_close_an_object_as_in_llama_cpp(smollm2):
    """An object schema with ``properties`` and no ``additionalProperties`` admits no
    other key (llama.cpp's reading; plain JSON Schema would allow any): after
    ``{"a": 1`` no ``,`` may come; with ``additionalProperties: true`` it may."""
    tok = smollm2.tokenizer
    n = smollm2.engine.vocab_size
    comma = {i for i in range(n) if not tok.vocab.is_special(i) and tok.token_to_piece(i).startswith(b",")}
    assert comma

    def after_a(schema):
        c = Constraint(Grammar.json_schema(schema), tok, n_vocab=n, background=False)
        for t in tok.encode('{"a": 1', add_special=False):
            c.consume(t)
        return set(np.flatnonzero(c.allowed()).tolist())

    base = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert not after_a(base) & comma
    assert after_a({**base, "additionalProperties": True}) & comma
    # nested objects close too; const values and allOf branches are left as written
    from infer.structured import closed_objects
    nested = {"type": "object", "properties": {"o": {"properties": {"x": {}}}, "k": {"const": {"properties": 1}}},
              "allOf": [{"properties": {"y": {}}}]}
    got = closed_objects(nested)
    assert got["properties"]["o"]["additionalProperties"] is False
    assert got["properties"]["k"] == {"const": {"properties": 1}}
    assert "additionalProperties" not in got and "additionalProperties" not in got["allOf"][0]
