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
