"""What a client or command line written for llama-server sends and infer must take:
OpenAI's ``reasoning_effort`` (read as llama-server's server-common.cpp reads it),
checked against jinja2's own rendering of the real templates (test_chat_families.hf_render)
and the official ``openai`` client."""
import argparse

import pytest
from test_chat_families import hf_render, template
from test_chat_formats import HARMONY_SPECIALS, QWEN

from infer import api
from infer.api import InvalidRequestError
from infer.cli.common import add_template_args, chat_template_kwargs
from scripted import ScriptedTokenizer, scripted_model

USER = [{"role": "user", "content": "Hello"}]


def gpt_oss_model():
    tok = ScriptedTokenizer(specials=HARMONY_SPECIALS, words=("Hello", " world", "assistant"), eos="<|return|>",
                            end_of_turn=("<|return|>", "<|call|>", "<|end|>"))
    return scripted_model(["Hello"], template=template("gpt-oss"), tokenizer=tok, opener="<|start|>assistant",
                          end_token="<|return|>", max_seq_len=8192), tok


def qwen35_model():
    tok = ScriptedTokenizer(specials=QWEN, words=("Hello", " world"), eos="<|im_end|>", end_of_turn=())
    return scripted_model(["Hello"], template=template("qwen3.5"), tokenizer=tok, max_seq_len=8192), tok


def prompt_of(model, tok, **request):
    """The text a chat completion fed the model before its reply."""
    ctx = model.create_context()
    out = api.create_chat_completion(model, USER, temperature=0, context=ctx, **request)
    return tok.decode(ctx.tokens[:out["usage"]["prompt_tokens"]])


@pytest.mark.parametrize("effort", ["low", "high"])
def test_reasoning_effort_reaches_gpt_oss_template(effort):
    model, tok = gpt_oss_model()
    expected = hf_render(template("gpt-oss"), USER, True, reasoning_effort=effort)
    assert f"Reasoning: {effort}\n" in expected
    assert prompt_of(model, tok, reasoning_effort=effort) == expected
    # llama-server: the request's reasoning_effort wins over its chat_template_kwargs
    assert prompt_of(model, tok, reasoning_effort=effort, chat_template_kwargs={"reasoning_effort": "medium"}) \
        == expected


def test_reasoning_effort_none_turns_qwen35_thinking_off():
    model, tok = qwen35_model()
    expected = hf_render(template("qwen3.5"), USER, True, enable_thinking=False)
    assert expected.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert prompt_of(model, tok, reasoning_effort="none") == expected
    assert prompt_of(model, tok, reasoning_effort="none", chat_template_kwargs={"enable_thinking": True}) == expected
    thinking = hf_render(template("qwen3.5"), USER, True)
    assert thinking != expected and prompt_of(model, tok) == thinking


@pytest.mark.parametrize("bad", [3, "", ["high"]])
def test_reasoning_effort_not_a_level_is_refused(bad):
    model, _ = qwen35_model()
    with pytest.raises(InvalidRequestError, match="reasoning_effort") as info:
        api.create_chat_completion(model, USER, reasoning_effort=bad)
    assert info.value.param == "reasoning_effort"


def test_openai_client_reasoning_effort_through_serve():
    openai = pytest.importorskip("openai")
    from test_serve import app_server, client, request

    from infer.serve.app import create_app

    model, tok = gpt_oss_model()
    high = hf_render(template("gpt-oss"), USER, True, reasoning_effort="high")
    with app_server(create_app(model)) as base:
        out = client(base).chat.completions.create(model="m", messages=USER, reasoning_effort="high", temperature=0)
        assert out.usage.prompt_tokens == len(tok.encode(high, add_special=False, parse_special=True))
        status, _, body = request(base, "POST", "/apply-template", {"messages": USER, "reasoning_effort": "high"})
        assert status == 200 and body["prompt"] == high
        with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
            client(base).chat.completions.create(model="m", messages=USER, extra_body={"reasoning_effort": 1})


@pytest.mark.parametrize("argv, expected", [
    (["--reasoning-effort", "high"], {"reasoning_effort": "high"}),
    (["--reasoning-effort", "default"], None),
    (["--reasoning", "off", "--reasoning-effort", "low"], {"enable_thinking": False, "reasoning_effort": "low"}),
    # llama.cpp's defaults: --chat-template-kwargs sets the same variable last
    (["--reasoning-effort", "low", "--chat-template-kwargs", '{"reasoning_effort": "high"}'],
     {"reasoning_effort": "high"}),
])
def test_cli_reasoning_effort_is_a_template_default(argv, expected):
    parser = argparse.ArgumentParser()
    add_template_args(parser)
    assert chat_template_kwargs(parser.parse_args(argv)) == expected


# ---- server-wide sampling defaults: llama-server's --temp, --top-k, -n, ... ----------------------
LLAMA_SERVER_LINE = ["serve", "--temp", "0.6", "--top-k", "20", "--top-p", "0.9", "--min-p", "0", "-n", "5",
                     "--repeat-penalty", "1.1", "--repeat-last-n", "32", "--seed", "42"]
# the request fields llama-server's params_from_json_cmpl falls back to, written out by hand
LLAMA_SERVER_DEFAULTS = {"temperature": 0.6, "top_k": 20, "top_p": 0.9, "min_p": 0.0, "n_predict": 5,
                         "repeat_penalty": 1.1, "repeat_last_n": 32, "seed": 42}


def test_serve_takes_llama_server_sampling_flags():
    from infer.cli import build_parser
    from infer.cli.common import server_sampling_defaults

    parser = build_parser()
    assert server_sampling_defaults(parser.parse_args(LLAMA_SERVER_LINE)) == LLAMA_SERVER_DEFAULTS
    # not given: llama-server's own defaults, which every request already has; -1: none
    assert server_sampling_defaults(parser.parse_args(["serve", "-n", "-1", "--seed", "-1"])) == {}


@pytest.mark.parametrize("argv, flag", [(["--top-p", "2"], "--top-p"), (["-n", "0"], "--max-tokens"),
                                        (["--seed", "-5"], "--seed")])
def test_serve_refuses_bad_sampling_flags_before_loading(argv, flag):
    from infer.cli import main

    assert main(["serve", "--model", "/nonexistent.gguf", *argv]) == 2


@pytest.fixture(scope="module")
def served_with_defaults():
    pytest.importorskip("uvicorn")
    import infer
    from _tok_models import installed_path
    from test_serve import app_server

    from infer.serve.app import create_app

    with infer.load(installed_path("smollm2")) as model:
        with app_server(create_app(model, ctx_size=256, sampling_defaults=LLAMA_SERVER_DEFAULTS)) as base:
            yield model, base


def test_props_show_the_servers_defaults(served_with_defaults):
    from test_serve import request

    _, base = served_with_defaults
    status, _, props = request(base, "GET", "/props")
    params = props["default_generation_settings"]["params"]
    assert status == 200
    assert {k: params[k] for k in LLAMA_SERVER_DEFAULTS} == LLAMA_SERVER_DEFAULTS
    assert params["max_tokens"] == 5


def test_completion_runs_with_the_servers_defaults_unless_the_request_sets_them(served_with_defaults):
    from test_serve import request

    _, base = served_with_defaults
    status, _, out = request(base, "POST", "/completion", {"prompt": "The capital of France is"})
    assert status == 200, out
    settings = out["generation_settings"]
    assert {k: settings[k] for k in LLAMA_SERVER_DEFAULTS} == LLAMA_SERVER_DEFAULTS
    assert out["tokens_predicted"] == 5
    status, _, out = request(base, "POST", "/completion", {"prompt": "The capital of France is", "top_k": 3,
                                                           "n_predict": 2, "temperature": 0})
    assert status == 200, out
    assert (out["generation_settings"]["top_k"], out["generation_settings"]["temperature"]) == (3, 0.0)
    assert out["tokens_predicted"] == 2 and out["generation_settings"]["seed"] == 42


def test_openai_endpoints_run_with_the_servers_defaults(served_with_defaults):
    pytest.importorskip("openai")
    from test_serve import client

    _, base = served_with_defaults
    openai_client = client(base)
    messages = [{"role": "user", "content": "Name a colour."}]
    # -n 5 is the reply limit a request without max_tokens gets, on both endpoints
    chat = openai_client.chat.completions.create(model="m", messages=messages)
    assert (chat.usage.completion_tokens, chat.choices[0].finish_reason) == (5, "length")
    text = openai_client.completions.create(model="m", prompt="Once upon a time")
    assert (text.usage.completion_tokens, text.choices[0].finish_reason) == (5, "length")
    # --seed 42 and the rest: a request giving the same values by itself gets the same reply
    explicit = dict(temperature=0.6, top_p=0.9, seed=42, max_tokens=5,
                    extra_body={"top_k": 20, "min_p": 0.0, "repeat_penalty": 1.1})
    same = openai_client.chat.completions.create(model="m", messages=messages, **explicit)
    assert same.choices[0].message.content == chat.choices[0].message.content
    assert openai_client.chat.completions.create(model="m", messages=messages, max_tokens=2).usage \
        .completion_tokens == 2


# ---- llama-server's own fields on the OpenAI endpoints ------------------------------------------
def test_openai_endpoints_take_llama_server_fields(served_with_defaults):
    openai = pytest.importorskip("openai")
    from test_serve import client

    model, base = served_with_defaults
    openai_client = client(base)
    messages = [{"role": "user", "content": "Name a colour."}]
    # the web UI's request: every sampler infer lacks at its off value, n_predict the limit
    web_ui = {"n_predict": 3, "typical_p": 1, "dynatemp_range": 0, "xtc_probability": 0, "xtc_threshold": 0.1,
              "mirostat": 0, "mirostat_tau": 5, "mirostat_eta": 0.1, "dry_multiplier": 0, "dry_base": 1.75,
              "dry_allowed_length": 2, "dry_penalty_last_n": -1, "top_n_sigma": -1, "min_keep": 0, "id_slot": -1,
              "cache_prompt": True, "top_k": 1, "min_p": 0.1, "repeat_penalty": 1.0, "repeat_last_n": 64}
    chat = openai_client.chat.completions.create(model="m", messages=messages, extra_body=web_ui)
    assert (chat.usage.completion_tokens, chat.choices[0].finish_reason) == (3, "length")
    # n_predict wins over max_tokens, as in llama-server's params_from_json_cmpl
    text = openai_client.completions.create(model="m", prompt="Once upon a time", max_tokens=7,
                                            extra_body={"n_predict": 2, "top_k": 1})
    assert text.usage.completion_tokens == 2
    # top_k 1 is greedy: the same text as temperature 0 (a request's own fields win over --temp 0.6)
    greedy = openai_client.completions.create(model="m", prompt="Once upon a time", max_tokens=2, temperature=0)
    assert text.choices[0].text == greedy.choices[0].text
    # ignore_eos: the end of the turn is banned, so a reply always runs to its limit
    long = openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say hi."}],
                                                 extra_body={"ignore_eos": True, "n_predict": 40})
    assert (long.usage.completion_tokens, long.choices[0].finish_reason) == (40, "length")
    for field, value in [("mirostat", 2), ("typical_p", 0.5), ("id_slot", 1), ("dry_multiplier", 0.8),
                         ("no_such_field", 1), ("n_predict", "ten"), ("ignore_eos", "yes")]:
        for create, request in [(openai_client.chat.completions.create, {"messages": messages}),
                                (openai_client.completions.create, {"prompt": "Hi"})]:
            with pytest.raises(openai.BadRequestError) as info:
                create(model="m", extra_body={field: value}, **request)
            assert field in str(info.value), (field, info.value)


def test_repeat_last_n_on_the_openai_api_matches_the_penalty_window():
    """repeat_last_n reaches the sampler: a window of 0 turns repeat_penalty off."""
    import infer
    from _tok_models import installed_path

    with infer.load(installed_path("smollm2")) as model:
        plain = api.create_completion(model, "one one one one", max_tokens=6, temperature=0)
        off = api.create_completion(model, "one one one one", max_tokens=6, temperature=0, repeat_penalty=1.5,
                                    repeat_last_n=0)
        assert off["choices"][0]["text"] == plain["choices"][0]["text"]
        on = api.create_completion(model, "one one one one", max_tokens=6, temperature=0, repeat_penalty=1.5,
                                   repeat_last_n=-1)
        assert on["choices"][0]["text"] != plain["choices"][0]["text"]
        with pytest.raises(InvalidRequestError, match="repeat_last_n"):
            api.create_chat_completion(model, USER, repeat_last_n=-2)


# ---- $defs in the Qwen3-Coder XML call grammar ----------------------------------------------------
# parameters as pydantic writes them: "$defs" and "#/$defs/..." references, a definition
# referring to another, an object and integers (which the XML format writes as JSON; a string
# parameter would be raw text, unconstrained as in llama.cpp's grammar, which an untrained
# model runs on with)
PYDANTIC_PARAMS = {
    "type": "object",
    "$defs": {"Unit": {"enum": [1, 10, 100]},
              "Digit": {"type": "integer", "minimum": 0, "maximum": 9},
              "Point": {"type": "object",
                        "properties": {"x": {"$ref": "#/$defs/Digit"}, "y": {"$ref": "#/$defs/Digit"}},
                        "required": ["x", "y"], "additionalProperties": False}},
    "properties": {"unit": {"$ref": "#/$defs/Unit"},
                   "at": {"$ref": "#/$defs/Point"}, "days": {"$ref": "#/$defs/Digit"}},
    "required": ["unit", "at", "days"], "additionalProperties": False}
PYDANTIC_TOOL = {"type": "function", "function": {"name": "forecast", "parameters": PYDANTIC_PARAMS}}


@pytest.mark.parametrize("name", ["qwen3.5", "qwen3-coder"])
def test_forced_xml_call_with_defs_references(name):
    """tool_choice="required" with the Qwen3-Coder XML format on SmolLM2 (as
    test_chat_formats does): each parameter's grammar resolves the tool's "$defs"; the
    parsed arguments are typed by the definitions and valid (jsonschema)."""
    pytest.importorskip("llguidance")
    jsonschema = pytest.importorskip("jsonschema")
    from _tok_models import load_installed

    from infer.chat import Chat, ChatSession

    with load_installed("smollm2") as smollm2:
        # thinking off: SmolLM2, untrained on the format, would think to the end of max_tokens
        s = ChatSession(smollm2, tools=[PYDANTIC_TOOL], temperature=0, template_kwargs={"enable_thinking": False})
        s.chat = Chat(template(name), eos_token=smollm2.chat.eos_token)
        reply = s.send("The weather in Paris?", tool_choice="required", max_tokens=120)
        assert (reply.finish_reason, reply.tool_call_errors, [c.name for c in reply.tool_calls]) == \
            ("tool_calls", [], ["forecast"])
        jsonschema.validate(reply.tool_calls[0].arguments, PYDANTIC_PARAMS)


def test_xml_call_values_are_typed_by_their_definitions():
    """llama.cpp resolves the references before typing a raw value: a "#/$defs/Code"
    string stays text even when it reads as JSON; an integer definition is a number."""
    import json

    from infer.chat.replies import xml_call_as_json

    params = {"$defs": {"Code": {"type": "string"}, "N": {"type": "integer"}},
              "properties": {"code": {"$ref": "#/$defs/Code"}, "n": {"$ref": "#/$defs/N"}}}
    raw = "<function=f>\n<parameter=code>\n42\n</parameter>\n<parameter=n>\n7\n</parameter>\n</function>"
    assert json.loads(xml_call_as_json(raw, {"f": params})) == {"name": "f", "arguments": {"code": "42", "n": 7}}


def test_too_many_threads_warns_with_the_flags_name(capsys):
    """-t above the pool's limit warns naming --threads (not the kernel's parameter n)."""
    from _tok_models import installed_path

    from infer import kernels
    from infer.cli import main

    before = kernels.get_num_threads()
    try:
        assert main(["generate", "-m", installed_path("smollm2"), "-t", "100000", "-n", "1", "--temp", "0",
                     "Hi"]) == 0
        limit = kernels.get_num_threads()
    finally:
        kernels.set_num_threads(before)
    err = capsys.readouterr().err
    assert f"infer: warning: --threads 100000: above the thread pool's limit; using {limit}\n" in err
    assert "n: 100000" not in err
