"""ChatSession with response_format, tool_choice and logprobs (validated with `jsonschema`)."""
import copy
import json

import pytest

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

from infer.chat import ChatSession  # noqa: E402
from infer.structured import GrammarError  # noqa: E402
from _tok_models import load_installed  # noqa: E402

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                             "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 100},
                                         "b": {"type": "integer", "minimum": 0, "maximum": 100}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": ADD}}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 15},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    with load_installed(request.param) as m:
        yield m


def test_response_format_json_schema(model):
    s = ChatSession(model, temperature=0)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    r = s.send("Describe a person.", response_format=fmt, max_tokens=80)
    jsonschema.validate(json.loads(r.text), PERSON)
    # the next turn is free again
    r2 = s.send("Thanks! Say hi.", max_tokens=5)
    assert r2.completion_tokens >= 1


def test_a_context_shift_inside_a_constrained_reply_keeps_the_grammar(model):
    """n_keep shifts the context in the middle of a reply; the grammar has consumed the
    reply's tokens only, and the truncation must not roll it back (it did: the reply
    started its JSON array again after each shift)."""
    digits = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
              "minItems": 30, "maxItems": 30}
    s = ChatSession(model, system="You count.", n_ctx=64, n_keep=-1, temperature=0, max_tokens=200)
    fmt = {"type": "json_schema", "json_schema": {"name": "digits", "schema": digits}}
    r = s.send("List thirty digits.", response_format=fmt)
    assert s._n_discarded > 0, "the reply did not shift the context"
    jsonschema.validate(json.loads(r.text), digits)
    assert r.finish_reason == "stop"


def test_a_constrained_stream_left_suspended_does_not_constrain_the_next_turn(model):
    """The turn's grammar is on the sampler for the whole turn (a server's scheduler
    reads it there); a stream left suspended is ended by the next turn, grammar and all."""
    s = ChatSession(model, temperature=0)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    stream = s.stream("Describe a person.", response_format=fmt, max_tokens=40)
    next(stream)
    assert s.context.sampler.grammar is not None
    reply = s.send("Thanks! Say hi.", max_tokens=8)
    assert s.context.sampler.grammar is None and s.last_reply is reply
    fresh = ChatSession(model, temperature=0)
    fresh.history = s.history[:-2]        # the first question and its interrupted reply
    assert fresh.send("Thanks! Say hi.", max_tokens=8).text == reply.text
    assert stream is not None             # still referenced all along


def test_a_sampler_without_a_grammar_hook_is_refused_for_a_constrained_turn(model):
    """The constraint used to be set as an attribute the sampler never read: the reply
    came back unconstrained, as if it followed the schema."""

    class ArgmaxSampler:
        def sample(self, logits):
            return int(logits.argmax())

        def accept(self, token):
            pass

        def reset(self):
            pass

        def set_history(self, tokens):
            pass

    s = ChatSession(model, context=model.create_context(n_ctx=256, sampler=ArgmaxSampler()))
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    with pytest.raises(TypeError, match="grammar hook"):
        s.send("Describe a person.", response_format=fmt)
    assert s.history == [] and not hasattr(s.context.sampler, "grammar")
    assert s.send("Hi", max_tokens=4, response_format={"type": "text"}).completion_tokens >= 1


def test_response_format_json_object(model):
    s = ChatSession(model, temperature=0.7, seed=2)
    r = s.send("Give me a JSON object with one key.", response_format={"type": "json_object"},
               max_tokens=120)
    if r.finish_reason == "stop":
        assert isinstance(json.loads(r.text), dict)
    assert r.text.startswith("{")


def test_tool_choice_required_and_named(model):
    s = ChatSession(model, tools=TOOLS, temperature=0)
    r = s.send("What is the weather in Paris?", tool_choice="required", max_tokens=80)
    assert r.finish_reason == "tool_calls" and len(r.tool_calls) == 1 and not r.tool_call_errors
    call = r.tool_calls[0]
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.name]
    jsonschema.validate(call.arguments, schema)
    s2 = ChatSession(model, tools=TOOLS, temperature=0.8, seed=5)
    r = s2.send("Hello there!", tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=80)
    assert [c.name for c in r.tool_calls] == ["add"]
    jsonschema.validate(r.tool_calls[0].arguments, ADD)


def test_forced_call_of_a_tool_without_parameters_has_no_arguments(model):
    """OpenAI: "Omitting parameters defines a function with an empty parameter list",
    so a forced call of such a tool writes ``{}`` (before, any object was allowed, and
    SmolLM2 wrote ``{"city": "Paris"}`` for a tool that takes nothing)."""
    tools = TOOLS + [{"type": "function", "function": {"name": "current_time", "description": "The time now"}}]
    s = ChatSession(model, tools=tools, temperature=0.8, seed=3)
    r = s.send("What is the weather in Paris?", tool_choice={"type": "function", "function": {"name": "current_time"}},
               max_tokens=40)
    assert r.finish_reason == "tool_calls" and [c.name for c in r.tool_calls] == ["current_time"]
    assert r.tool_calls[0].arguments == {}
    jsonschema.validate(r.tool_calls[0].arguments, {"type": "object", "maxProperties": 0})


def test_forced_call_of_tools_whose_parameters_use_defs(model):
    """Parameters as pydantic writes them, with "$defs" and "#/$defs/..." references
    (one definition referring to another): they failed with "Pointer '/$defs/Unit' does
    not exist", the call's schema being rooted above them.  Two tools define Unit
    differently, so each keeps its own."""
    weather = {"type": "object", "$defs": {"Unit": {"enum": ["c", "f"]}},
               "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"$ref": "#/$defs/Unit"}},
               "required": ["city", "unit"], "additionalProperties": False}
    tree = {"type": "object", "$defs": {"Unit": {"type": "integer", "minimum": 0, "maximum": 9},
                                        "Leaf": {"type": "object", "properties": {"value": {"$ref": "#/$defs/Unit"}},
                                                 "required": ["value"], "additionalProperties": False}},
            "properties": {"value": {"$ref": "#/$defs/Unit"},
                           "children": {"type": "array", "items": {"$ref": "#/$defs/Leaf"}, "maxItems": 2}},
            "required": ["value", "children"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather}},
             {"type": "function", "function": {"name": "tree", "parameters": tree}}]
    schemas = {"get_weather": weather, "tree": tree}
    for choice in ("required", {"type": "function", "function": {"name": "tree"}}):
        s = ChatSession(model, tools=tools, temperature=0.8, seed=4)
        r = s.send("What is the weather in Paris?", tool_choice=choice, max_tokens=120)
        assert r.finish_reason == "tool_calls" and len(r.tool_calls) == 1 and not r.tool_call_errors
        call = r.tool_calls[0]
        jsonschema.validate(call.arguments, schemas[call.name])
    assert call.name == "tree"


def test_tool_call_between_template_markers():
    """A template with <tool_call> markers: the forced call is written between them."""
    with load_installed("smollm2") as m:
        s = ChatSession(m, tools=TOOLS, temperature=0)
        s.chat = copy.copy(s.chat)
        s.chat.tool_call_markers = ("<tool_call>", "</tool_call>")
        ctx_before = len(s.context.tokens)
        r = s.send("Weather in Rome?", tool_choice={"type": "function", "function": {"name": "get_weather"}},
                   max_tokens=80)
        assert ctx_before == 0 and r.tool_calls and r.tool_calls[0].name == "get_weather"
        jsonschema.validate(r.tool_calls[0].arguments, WEATHER)


def test_reply_logprobs(model):
    s = ChatSession(model, temperature=0)
    r = s.send("Say hello.", max_tokens=6, logprobs=2)
    assert len(r.logprobs) == r.completion_tokens - (r.finish_reason == "stop")
    for e in r.logprobs:
        assert e["top_logprobs"][0]["token"] == e["token"]  # greedy: the most likely
        assert e["logprob"] == pytest.approx(e["top_logprobs"][0]["logprob"])
    assert s.send("Again.", max_tokens=2).logprobs is None


def test_bad_constraints_fail_before_any_token(model):
    s = ChatSession(model, tools=TOOLS)
    with pytest.raises(GrammarError):
        s.stream("x", response_format={"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}})
    with pytest.raises(ValueError, match="no tool named"):
        s.stream("x", tool_choice={"type": "function", "function": {"name": "missing"}})
    with pytest.raises(ValueError, match="no tools"):
        ChatSession(model).stream("x", tool_choice="required")
    assert s.context.n_past == 0 and s.history == []


def test_tool_call_between_markers_is_json_schema_json():
    """The forced call between <tool_call> markers is JSON as `Grammar.json_schema`
    reads it: no whitespace after ``{`` (llguidance's bare ``%json`` takes any, and a
    tiny Qwen-templated model padded its call with ``\\r`` until max_tokens) and no
    key the tool does not list."""
    import numpy as np

    from infer.structured import Constraint

    with load_installed("smollm2") as m:
        s = ChatSession(m, tools=TOOLS, temperature=0)
        s.chat = copy.copy(s.chat)
        s.chat.tool_call_markers = ("<tool_call>", "</tool_call>")
        tok = m.tokenizer
        n = m.engine.vocab_size

        def allowed_after(text):
            c = Constraint(s._tool_call_grammar({"type": "function", "function": {"name": "get_weather"}}),
                           tok, n_vocab=n, background=False)
            for t in tok.encode(text, add_special=False):
                c.consume(t)
            return [tok.token_to_piece(int(i)) for i in np.flatnonzero(c.allowed())]

        after_brace = allowed_after('<tool_call>\n{')
        assert after_brace and all(p.startswith(b'"') for p in after_brace), after_brace[:10]
        # after the last listed key's value only the closing brace may come, no other key
        after_args = allowed_after('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"')
        assert after_args and all(p.startswith(b"}") for p in after_args), after_args[:10]


def _r1_session(m, **options):
    """SmolLM2 driven through DeepSeek-R1-Distill's template, whose generation prompt
    opens the thinking block (``<｜Assistant｜><think>\\n``)."""
    from pathlib import Path

    from infer.chat import Chat
    source = (Path(__file__).parent / "chat_templates" / "deepseek-r1-distill-qwen.jinja").read_text(encoding="utf-8")
    s = ChatSession(m, temperature=0, **options)
    s.chat = Chat(source, bos_token="<｜begin▁of▁sentence｜>", eos_token=m.chat.eos_token)
    return s


def test_forced_tool_call_after_a_thinking_block_the_prompt_opened():
    """With the thinking block open (DeepSeek-R1's generation prompt ends with <think>),
    a forced call's grammar takes the rest of the thinking, the closing marker, then the
    call (llama.cpp's grammar from its chat parser: reasoning until the end marker, then
    the calls).  One that started with the call had the model write it inside the block,
    where it came back as reasoning; one that closed the block at once left no room to
    think.  A constrained answer (response_format) is the same."""
    import numpy as np

    from infer.structured import Constraint

    with load_installed("smollm2") as m:
        s = _r1_session(m, tools=TOOLS)
        think = s.chat.think_markers
        assert think == ("<think>", "</think>")
        tok, n = m.tokenizer, m.engine.vocab_size

        def allowed_after(grammar, text):
            c = Constraint(grammar, tok, n_vocab=n, background=False)
            for t in tok.encode(text, add_special=False):
                assert c.allowed()[t], (text, tok.token_to_piece(t))
                c.consume(t)
            return {tok.token_to_piece(int(i)) for i in np.flatnonzero(c.allowed())}

        ends = {tok.token_to_piece(i) for i in tok.vocab.end_of_turn_ids}  # all a finished grammar allows

        call = s._tool_call_grammar({"type": "function", "function": {"name": "add"}}, s._thought_grammar(think, True))
        # any thinking first, "</think>" among what may come
        assert {b"</", b" The"} <= allowed_after(call, "Let me add")
        # then white space or the call's JSON, nothing else
        after = allowed_after(call, "Let me add.</think>\n\n")
        assert after and all(p.strip(b" \t\r\n") == b"" or p.lstrip().startswith(b"{") for p in after), after
        assert allowed_after(call, 'Let me add.</think>\n\n{"name": "add", "arguments": {"a": 2, "b": 3}}') <= ends
        # a constrained answer likewise
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
        answer = s._constraint(fmt, None, think, True).grammar
        assert allowed_after(answer, 'Hmm.</think>\n\n{"name": "Ann", "age": 3}') <= ends
        # no thinking where the model has no markers: the call comes first
        s.chat.think_markers = None
        first = allowed_after(s._tool_call_grammar("required"), "")
        assert all(p.lstrip().startswith(b"{") or not p.strip() for p in first), first


