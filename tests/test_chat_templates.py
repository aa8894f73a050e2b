"""Chat templates: rendered exactly as plain jinja2 renders the same template
string, HF conventions (tojson, raise_exception, generation tag), the sandbox,
lazy compilation, and the probes a session relies on."""
import json
from pathlib import Path

import jinja2
import pytest

from infer.chat import FALLBACK_TEMPLATES, Chat, ChatTemplateError
import _tok_models
from scripted import ScriptedTokenizer

# Official templates as published with the models (Meta-Llama-3-8B-Instruct, gemma-2-2b-it).
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
          "<|end_header_id|>\n\n' }}{% endif %}")
GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
         "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
         "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
         "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
         "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' "
         "+ role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if "
         "add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")


def smollm2_template():
    """SmolLM2's own template, from the GGUF file's metadata."""
    return _tok_models.metadata(_tok_models.installed_path("smollm2"))["tokenizer.chat_template"]


def reference(template, messages, add_generation_prompt, **variables):
    """Plain (unsandboxed) jinja2 with HF's environment settings."""
    def raise_exception(message):
        raise jinja2.TemplateError(message)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            **variables)


SYSTEM = {"role": "system", "content": "You are terse."}
TURNS = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "  Hello!\nHow can I help?  "},
    {"role": "user", "content": "Quote: \"ünïcode ☕\" <b>&</b>"},
]

CASES = [
    ("smollm2", None, "", "", [SYSTEM] + TURNS),
    ("smollm2", None, "", "", TURNS),
    ("smollm2", None, "", "", TURNS[:1]),
    ("llama3", LLAMA3, "<|begin_of_text|>", "<|eot_id|>", [SYSTEM] + TURNS),
    ("llama3", LLAMA3, "<|begin_of_text|>", "<|eot_id|>", TURNS),
    ("gemma", GEMMA, "<bos>", "<eos>", TURNS),
    ("gemma", GEMMA, "<bos>", "<eos>", TURNS[:2]),
]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("name, template, bos, eos, messages", CASES,
                         ids=[f"{c[0]}-{len(c[4])}msgs" for c in CASES])
def test_render_matches_reference_jinja(name, template, bos, eos, messages, add_generation_prompt):
    template = template or smollm2_template()
    chat = Chat(template, bos_token=bos, eos_token=eos)
    got = chat.render(messages, add_generation_prompt=add_generation_prompt)
    want = reference(template, messages, add_generation_prompt, bos_token=bos, eos_token=eos)
    assert got == want
    assert got.endswith({"smollm2": "<|im_start|>assistant\n", "llama3": "<|start_header_id|>assistant"
                         "<|end_header_id|>\n\n", "gemma": "<start_of_turn>model\n"}[name]) == add_generation_prompt


def test_smollm2_renders_as_chatml_by_hand():
    # Independent of jinja: ChatML with SmolLM2's default system prompt.
    chat = Chat(smollm2_template())
    got = chat.render([{"role": "user", "content": "Hi"}])
    assert got == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                   "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("template, prefix, end", ids=["smollm2", "llama3", "gemma"], argvalues=[
    (None, "<|im_start|>assistant\n", "<|im_end|>\n"),
    (LLAMA3, "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
    (GEMMA, "<start_of_turn>model\n", "<end_of_turn>\n"),
])
def test_probes_find_assistant_prefix_and_end_of_turn(template, prefix, end):
    chat = Chat(template or smollm2_template(), bos_token="<s>")
    assert chat.assistant_prefix == prefix
    assert chat.end_of_turn == end


def test_gemma_system_prompt_joins_the_first_user_turn():
    chat = Chat(GEMMA, bos_token="<bos>")
    assert not chat.supports_system_role
    got = chat.render([SYSTEM] + TURNS[:1])
    merged = [{"role": "user", "content": SYSTEM["content"] + "\n\n" + TURNS[0]["content"]}]
    assert got == reference(GEMMA, merged, True, bos_token="<bos>")
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        chat.render_raw([SYSTEM] + TURNS[:1])


@pytest.mark.parametrize("family, reference_template, bos", ids=["llama3", "gemma", "chatml"], argvalues=[
    ("llama3", LLAMA3, "<|begin_of_text|>"), ("gemma", GEMMA, "<bos>"), ("chatml", None, "")])
def test_fallback_families_render_like_the_official_templates(family, reference_template, bos):
    fallback = Chat(None, family=family, bos_token=bos)
    messages = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Bye ☕"}]
    if reference_template is None:  # ChatML by hand
        want = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        want += "<|im_start|>assistant\n"
    else:
        want = reference(reference_template, messages, True, bos_token=bos)
    assert fallback.render(messages) == want


@pytest.mark.parametrize("token, family", [("<|im_start|>", "chatml"), ("<|start_header_id|>", "llama3"),
                                           ("<start_of_turn>", "gemma"), (None, "chatml")])
def test_from_metadata_without_template_picks_family_from_vocabulary(token, family):
    specials = ("<s>", "</s>") + ((token,) if token else ())
    tok = ScriptedTokenizer(specials=specials, bos="<s>", eos="</s>", end_of_turn=("</s>",))
    chat = Chat.from_metadata({}, tok)
    assert chat.family == family and chat.source == FALLBACK_TEMPLATES[family]
    assert chat.bos_token == "<s>" and chat.eos_token == "</s>"


def test_from_metadata_takes_markers_from_the_vocabulary():
    tok = ScriptedTokenizer()  # has <think> and <tool_call> as tokens
    chat = Chat.from_metadata({"tokenizer.chat_template": FALLBACK_TEMPLATES["chatml"]}, tok)
    assert chat.think_markers == ("<think>", "</think>")
    assert chat.tool_call_markers == ("<tool_call>", "</tool_call>")
    plain = ScriptedTokenizer(specials=("<|im_start|>", "<|im_end|>"), eos="<|im_end|>", end_of_turn=())
    chat = Chat.from_metadata({"tokenizer.chat_template": FALLBACK_TEMPLATES["chatml"]}, plain)
    assert chat.think_markers is None and chat.tool_call_markers is None


def test_tool_use_template_is_used_when_tools_are_given():
    chat = Chat.from_metadata({"tokenizer.chat_template": "plain",
                               "tokenizer.chat_template.tool_use": "tools={{ tools | length }}"},
                              ScriptedTokenizer())
    assert chat.render_raw([], tools=[{"type": "function", "function": {"name": "f"}}]) == "tools=1"
    assert chat.render_raw([]) == "plain"


# ---- HF conventions ------------------------------------------------------------------------
def test_tojson_keeps_unicode_and_html_characters():
    chat = Chat("{{ tools | tojson }}|{{ messages[0] | tojson(indent=2) }}")
    tools = [{"name": "café", "description": "<b> & 'q'"}]
    msg = {"role": "user", "content": "ünï ☕"}
    assert chat.render_raw([msg], tools=tools) == (
        json.dumps(tools, ensure_ascii=False) + "|" + json.dumps(msg, ensure_ascii=False, indent=2))


def test_raise_exception_becomes_chat_template_error():
    chat = Chat("{{ raise_exception('only user turns, please') }}")
    with pytest.raises(ChatTemplateError, match="only user turns, please"):
        chat.render([{"role": "user", "content": "x"}])


def test_generation_tag_and_loop_controls_and_strftime():
    chat = Chat("{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
                "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}{{ strftime_now('%Y') | length }}")
    got = chat.render_raw([SYSTEM, {"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert got == "[a][b]4"


def test_trim_and_lstrip_blocks_as_hf():
    template = "{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}"
    assert Chat(template).render_raw([{"role": "user", "content": "x"}]) == reference(
        template, [{"role": "user", "content": "x"}], True)


def test_openai_content_parts_and_none_content():
    chat = Chat(FALLBACK_TEMPLATES["chatml"])
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
    got = chat.render([{"role": "user", "content": parts}, {"role": "assistant", "content": None}], False)
    assert got == "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"


# ---- sandbox and lazy compilation -----------------------------------------------------------
@pytest.mark.parametrize("template", [
    "{{ messages.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__ }}",
    "{{ raise_exception.__globals__ }}",
    "{{ '{0.__class__}'.format(messages) }}",
    "{{ lipsum.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.system('echo pwned') }}",
    "{% set x = messages.append({'role': 'user'}) %}{{ messages | length }}",
    "{{ messages[0].update({'content': 'changed'}) }}",
])
def test_sandbox_refuses_python_internals_and_mutation(template):
    chat = Chat(template)
    messages = [{"role": "user", "content": "x"}]
    with pytest.raises(ChatTemplateError, match="sandbox"):
        chat.render_raw(messages)
    assert messages == [{"role": "user", "content": "x"}]


def test_broken_template_fails_when_rendered_not_when_built():
    chat = Chat("{% for m in messages %}{{ m.content }")  # built without complaint
    with pytest.raises(ChatTemplateError, match="does not compile"):
        chat.render([{"role": "user", "content": "x"}])


def test_template_errors_on_bad_messages_are_clear():
    chat = Chat(FALLBACK_TEMPLATES["chatml"])
    with pytest.raises(TypeError, match="messages"):
        chat.render("hello")
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        chat.render([{"content": "no role"}])
    with pytest.raises(TypeError, match="content"):
        chat.render([{"role": "user", "content": 3}])
    with pytest.raises(ChatTemplateError, match="failed"):
        Chat("{{ messages[0]['content'] + 1 }}").render_raw([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="family"):
        Chat(None, family="vicuna")
    with pytest.raises(TypeError, match="template"):
        Chat(b"bytes")


def test_gemma4_fallback_renders_like_the_official_template():
    """The built-in "gemma4" against google/gemma-4-31B-it's own template (tests/chat_templates),
    rendered by plain jinja2: system role, turns, the empty thought channel it opens
    the model's turn with when thinking is off."""
    official = (Path(__file__).parent / "chat_templates" / "gemma-4.jinja").read_text(encoding="utf-8")
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi there"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye ☕"}]
    fallback = Chat(None, family="gemma4", bos_token="<bos>")
    for add in (True, False):
        assert fallback.render(messages, add_generation_prompt=add) == reference(official, messages, add,
                                                                                   bos_token="<bos>")


def test_gemma4_files_without_a_template_get_the_gemma4_fallback():
    tok = ScriptedTokenizer(specials=("<bos>", "<eos>", "<|turn>", "<turn|>"), bos="<bos>", eos="<eos>",
                            end_of_turn=("<turn|>",))
    assert Chat.from_metadata({"general.architecture": "gemma4"}, tok).family == "gemma4"
    assert Chat.from_metadata({}, tok).family == "gemma4"   # by its <|turn> token


def test_gemma4_thinking_and_tool_calls_read_back():
    """Gemma 4's template renders a call as call:NAME{key:value} (strings between <|"|>);
    what it renders (plain jinja2) parses back to the same arguments, and a streamed
    reply splits into its thought channel, text and call."""
    from infer.chat.reply_parser import ReplyParser
    from infer.chat.replies import ToolCall, ToolCallError, parse_tool_call
    from infer.chat.template import GEMMA4_THINK_MARKERS, GEMMA4_TOOL_MARKERS

    official = (Path(__file__).parent / "chat_templates" / "gemma-4.jinja").read_text(encoding="utf-8")
    chat = Chat(official, bos_token="<bos>")
    assert chat.think_markers == GEMMA4_THINK_MARKERS and chat.tool_call_markers == GEMMA4_TOOL_MARKERS
    args = {"city": "Paris, {France}", "days": 3, "metric": True, "ratio": 0.5, "tags": ["a", "b"],
            "where": {"lat": 48.85, "lon": -2}}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": args}}]}]
    text = reference(official, messages, False, bos_token="<bos>")
    open_, close = GEMMA4_TOOL_MARKERS
    raw = text[text.index(open_) + len(open_):text.index(close)]
    assert raw.startswith('call:get_weather{city:<|"|>Paris')
    call = parse_tool_call(raw, "c1", ["get_weather"])
    assert isinstance(call, ToolCall) and call.name == "get_weather" and call.arguments == args

    parser = ReplyParser(think=chat.think_markers, tool=chat.tool_call_markers)
    reply = ('<|channel>thought\nThe user wants weather.<channel|>Checking.'
             '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>')
    for ch in reply:
        parser.feed(ch)
    parser.finish()
    assert "".join(parser.thinking) == "The user wants weather."
    assert "".join(parser.content) == "Checking."
    assert [parse_tool_call(t).arguments for t in parser.tool_texts] == [{"city": "Oslo"}]
    for bad in ('call:f{a:<|"|>x}', "call:f{a:1", "call:f{a:1} trailing", "call:f{a:,}"):
        assert isinstance(parse_tool_call(bad), ToolCallError), bad
