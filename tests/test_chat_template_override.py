"""A chat template given in place of the file's: `infer.load(chat_template=...)` and
llama-server's --chat-template-file (with --jinja accepted) on chat, serve and
generate.  References: jinja2 rendering the same template on its own, and plain
`infer generate` of the text the template renders."""

import jinja2
import pytest

import infer
from infer.gguf import default_model_path
from test_cli_generate import run_cli

try:
    MODEL = str(default_model_path())
except FileNotFoundError:
    pytest.skip("the default model is not installed", allow_module_level=True)

# Not ChatML (the file's own): roles in brackets, one turn a line.
BRACKETS = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


def test_load_renders_the_given_template_instead_of_the_files():
    with infer.load(MODEL, chat_template=BRACKETS) as model:
        got = model.chat.render(MESSAGES, add_generation_prompt=True)
        assert model.chat_template == BRACKETS
    want = jinja2.Template(BRACKETS).render(messages=MESSAGES, add_generation_prompt=True)
    assert got == want == "[system] Be brief.\n[user] Hi there\n[assistant]"
    with infer.load(MODEL) as model:  # without it, the file's ChatML
        assert "<|im_start|>user\nHi there<|im_end|>" in model.chat.render(MESSAGES)


def test_a_session_prefills_what_the_given_template_renders():
    with infer.load(MODEL, chat_template=BRACKETS) as model:
        session = infer.ChatSession(model, temperature=0, max_tokens=2)
        session.send("Hi there")
        text = model.tokenizer.decode(session.context.tokens[:session.context.n_past], skip_special=False)
    assert text.startswith("[user] Hi there\n[assistant]")
    assert "<|im_start|>" not in text


@pytest.mark.parametrize("bad, error", [(b"", ValueError), (3, TypeError)])
def test_load_refuses_a_template_that_is_not_text(bad, error):
    with pytest.raises(error, match="chat_template"):
        infer.load(MODEL, chat_template=bad.decode() if isinstance(bad, bytes) else bad)


def test_generate_chat_uses_the_template_file(tmp_path):
    # The template ignores the messages and renders a plain prompt: `generate --chat`
    # must then print what plain `generate` of that prompt prints (greedy).
    prompt = "The capital of France is"
    path = tmp_path / "plain.jinja"
    path.write_text(prompt)
    chat = run_cli("generate", "anything", "--chat", "--chat-template-file", str(path), "--jinja",
                   "--temp", "0", "-n", "6")
    plain = run_cli("generate", prompt, "--temp", "0", "-n", "6")
    assert chat.returncode == 0 and plain.returncode == 0, chat.stderr + plain.stderr
    assert chat.stdout == plain.stdout and "Paris" in chat.stdout


@pytest.mark.parametrize("args, message", [
    (("generate", "x", "--chat-template-file", "TEMPLATE"), "--chat-template-file: only with --chat"),
    (("generate", "x", "--chat", "--chat-template-file", "/nonexistent/t.jinja"), "cannot read /nonexistent"),
    (("chat", "--chat-template-file", "EMPTY"), "is empty"),
    (("serve", "--chat-template-file", "/nonexistent/t.jinja", "--port", "0"), "cannot read /nonexistent"),
])
def test_template_file_errors_are_one_line(tmp_path, args, message):
    (tmp_path / "TEMPLATE").write_text(BRACKETS)
    (tmp_path / "EMPTY").write_text(" \n")
    args = [str(tmp_path / a) if a in ("TEMPLATE", "EMPTY") else a for a in args]
    out = run_cli(*args)
    assert out.returncode == (2 if "only with" in message else 1), out.stdout  # 2: a bad combination of flags
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infer: error:") and message in lines[0], out.stderr
