"""The text models of Qwen2-VL / Qwen2.5-VL (``qwen2vl``), Qwen3-VL (``qwen3vl``) and
Qwen3-VL-MoE (``qwen3vlmoe``) on tiny random-weight files (``tiny_models.VLTEXT``),
against two independent references: the float64 numpy forward passes of
tests/reference/numpy_qwen_vl.py (M-RoPE written from ggml's definition, a text token
at positions (p, p, p, 0)) and llama.cpp's teacher-forced logits on the same files
(tests/data/llama_cpp_vltext.npz; tests/data/README.md).

* the two references agree, and infer's prefill, fused decode and batched decode agree
  with both;
* the rope sections matter exactly where ggml gives a pair the extra position (0 for
  text): there plain NEOX RoPE is far from llama.cpp; elsewhere they change nothing;
* images get a clear 400 (infer runs the text model only); the models' chat templates
  render as jinja2 renders them, and Qwen3-VL's tool calls read back.
"""
import copy
import json
import os

import numpy as np
import pytest
import tiny_models as tm
from family_checks import (assert_agrees, assert_batched_equals_alone, assert_cli_generates_the_reference_greedy,
                           assert_runs_agree_with_both_references, cosines, decoded_one_at_a_time, recorded_logits,
                           recording, tiny_file)
from reference.numpy_qwen_vl import reference
from scripted import GreedySampler, ScriptedTokenizer, scripted_model
from test_chat_families import CONVERSATIONS, QWEN, WEATHER, hf_render
from test_unsupported import refused

import infer
from infer.chat import Chat, ChatSession
from infer.gguf import GGUFError
from infer.variants.qwen_vl import mrope_text_turns

NAMES = list(tm.VLTEXT)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_vltext.npz")
#: the pairs of a head (of 32) that ggml's M-RoPE leaves still for text, by hand from
#: the sections: qwen2vl-extra [2, 2, 2, 2]: sectors 6, 7 of every 8; qwen3vl [12, 10, 10, 0]:
#: sector 31 (31 % 3 == 1 but 31 >= 3 * 10); qwen3vlmoe [3, 2, 2, 1]: sector 7 of every 8
STILL = {"qwen2vl": [], "qwen2vl-extra": [6, 7, 14, 15, 22, 23, 30, 31], "qwen3vl": [31],
         "qwen3vlmoe": [7, 15, 23, 31]}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_vltext")


_refs = {}


def reference_logits(name, tiny_dir, neox=False):
    """(T, vocab) float64 logits of the prompt (``neox``: every pair turned by p), once per file."""
    if (name, neox) not in _refs:
        ref = reference(tiny_file(name, tiny_dir))
        if neox:
            ref.positions = lambda pos: np.stack([np.asarray(pos, np.float64)] * 4, axis=1)
        _refs[name, neox] = ref.forward(tm.prompt(name))
    return _refs[name, neox]


def llama_cpp(name, tiny_dir):
    return recorded_logits(recording(DATA), name, tiny_file(name, tiny_dir))


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_llama_cpp(name, tiny_dir):
    positions, theirs = llama_cpp(name, tiny_dir)
    ref = reference_logits(name, tiny_dir)[positions]
    assert_agrees(ref, theirs, positions, name, top1_of=ref)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_and_fused_decode_agree_with_both_references(name, tiny_dir):
    """Prefill (every position's logits) and the fused C decode step, one token at a time:
    against the float64 reference at every position (cosine >= 0.99999, the top-1 where
    clear) and against llama.cpp where recorded."""
    prompt = tm.prompt(name)
    positions, theirs = llama_cpp(name, tiny_dir)
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert model.engine.architecture == tm.VLTEXT[name].arch
        runs = {"prefill": np.array(model.engine.create_context(n_ctx=128).prefill(prompt, all_logits=True))}
        ctx = model.engine.create_context(n_ctx=128, sampler=GreedySampler())
        assert ctx.fused_decode
        runs["decode"] = decoded_one_at_a_time(ctx, prompt)
    assert_runs_agree_with_both_references(runs, reference_logits(name, tiny_dir), positions, theirs, name)


def test_rope_sections_matter_where_pairs_fall_to_the_extra_position(tiny_dir):
    """Plain NEOX RoPE (every pair turned by p) against llama.cpp: far off where high-frequency
    pairs stand still (measured cosine 0.834 on qwen2vl-extra, 0.984 on qwen3vlmoe); on
    Qwen3-VL's layout (only the slowest pair still) a small but clear step away from the
    float64 M-RoPE reference (0.9999978, infer 0.9999998); identical where no pair is still
    (qwen2vl, Qwen2.5-VL's layout)."""
    for name in ("qwen2vl-extra", "qwen3vlmoe"):
        positions, theirs = llama_cpp(name, tiny_dir)
        assert cosines(reference_logits(name, tiny_dir, neox=True)[positions], theirs).min() < 0.99
    prompt = tm.prompt("qwen3vl")
    with infer.load(tiny_file("qwen3vl", tiny_dir)) as model:
        ours = np.array(model.engine.create_context(n_ctx=128).prefill(prompt, all_logits=True))
    ref, neox = reference_logits("qwen3vl", tiny_dir), reference_logits("qwen3vl", tiny_dir, neox=True)
    assert 1 - cosines(ours, ref).min() < (1 - cosines(neox, ref).min()) / 5
    np.testing.assert_allclose(reference_logits("qwen2vl", tiny_dir, neox=True), reference_logits("qwen2vl", tiny_dir),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_specs_as_read(name, tiny_dir):
    """The pairs left still (a frequency factor of +inf), the shapes, the experts."""
    t = tm.VLTEXT[name]
    with infer.load(tiny_file(name, tiny_dir)) as model:
        spec = model.engine.spec
        factors = spec.layers[0].rope.freq_factors
        assert all(layer.rope == spec.layers[0].rope for layer in spec.layers)
        assert spec.layers[0].rope.layout == "neox"
        still = [] if factors is None else [i for i, f in enumerate(factors) if f == float("inf")]
        assert still == STILL[name]
        assert factors is None or all(f == 1.0 for i, f in enumerate(factors) if i not in still)
        assert (spec.n_heads, spec.head_dim, spec.qkv_bias, spec.qk_norm) == (t.n_head, 64, t.qkv_bias, t.qk_norm)
        assert (spec.moe is not None) == (name == "qwen3vlmoe")
        if spec.moe is not None:
            assert (spec.moe.n_experts, spec.moe.n_used, spec.moe.ffn_dim, spec.moe.norm_weights) == (8, 2, 128, True)


def test_the_real_models_sections_by_hand():
    """Qwen2.5-VL's [16, 24, 24, 0] over 64 pairs (MROPE): every pair turns; Qwen3-VL's
    [24, 20, 20, 0] (IMROPE): sectors 61 (61 % 3 == 1, >= 60) and 62 (% 3 == 2, >= 60)
    take the extra position; Qwen3.5's [11, 11, 10, 0] over 32: every pair turns."""
    assert all(mrope_text_turns([16, 24, 24, 0], 64, interleaved=False))
    assert [i for i, t in enumerate(mrope_text_turns([24, 20, 20, 0], 64, interleaved=True)) if not t] == [61, 62]
    assert all(mrope_text_turns([11, 11, 10, 0], 32, interleaved=True))


@pytest.mark.parametrize("name", ["qwen2vl-extra", "qwen3vlmoe"])
def test_batched_decode_equals_decoding_alone(name, tiny_dir):
    prompt = [int(t) for t in tm.prompt(name)]
    with infer.load(tiny_file(name, tiny_dir)) as model:
        assert_batched_equals_alone(model.engine, [prompt[:5], prompt[:23], prompt[:11]], 4, 64)


def test_greedy_generation_runs_through_the_cli(tiny_dir):
    """`infer generate --temp 0` prints the continuation the float64 reference picks greedily."""
    path = tiny_file("qwen3vl", tiny_dir)
    with infer.load(path) as model:
        assert_cli_generates_the_reference_greedy(path, model.tokenizer, reference(path).forward,
                                                  "A small model reads the text")


@pytest.mark.parametrize("name", ["qwen2vl", "qwen3vlmoe"])
def test_info_reads_the_files(name, tiny_dir, capsys):
    from infer.cli import main

    assert main(["info", tiny_file(name, tiny_dir)]) == 0
    assert f"architecture    {tm.VLTEXT[name].arch}\n" in capsys.readouterr().out


# ---- what is refused ------------------------------------------------------------------------
def _with(name, tmp_path, **extra):
    t = tm.VLTEXT[name]
    changed = tm.replace(t, extra={**t.extra, **extra})
    return tm.write(name, str(tmp_path / f"{name}-changed.gguf"), tiny=changed)


@pytest.mark.parametrize("sections, says", [(None, "is missing"), ([0, 0, 0, 0], "must sum to between 1"),
                                            ([40, 40, 0, 0], "must sum to between 1 and the head size 64")])
def test_bad_sections_are_refused(sections, says, tmp_path):
    path = _with("qwen3vl", tmp_path, **{"rope.dimension_sections": sections})
    with pytest.raises(GGUFError, match=says):
        infer.load(path)


def test_partial_rotary_is_refused(tmp_path):
    """llama.cpp asserts n_rot == the head size for these graphs."""
    e = refused(_with("qwen2vl", tmp_path, **{"rope.dimension_count": 32}))
    assert "qwen2vl.rope.dimension_count" in e.names


def test_an_output_bias_is_refused(tmp_path):
    """llama.cpp's qwen2vl graph creates output.bias but never adds it; infer refuses it too."""
    path = tm.write("qwen2vl", str(tmp_path / "bias.gguf"), more_tensors={"output.bias": np.ones(tm.VOCAB, np.float32)})
    assert refused(path).names == ["output.bias"]


# ---- images: a clear 400 ----------------------------------------------------------------------
def test_images_get_a_clear_400(tiny_dir):
    for module in ("uvicorn", "starlette", "greenlet", "openai", "ollama"):
        pytest.importorskip(module)
    import openai
    from test_serve import app_server, request

    from infer.serve.app import create_app

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}
    with infer.load(tiny_file("qwen3vl", tiny_dir)) as model, \
            app_server(create_app(model, ctx_size=128, model_name="m")) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}])
        assert caught.value.status_code == 400
        assert "messages[0].content[1]: image_url parts are not supported: infer runs a model's text part only" \
            in caught.value.message
        status, _, error = request(base, "POST", "/api/chat", {"model": "m", "messages": [
            {"role": "user", "content": "What is this?", "images": ["aGk="]}]})
        assert status == 400 and "images are not supported: infer runs a model's text part only" in error["error"]


# ---- chat templates -----------------------------------------------------------------------------
def template(name):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_templates", f"{name}.jinja"),
              encoding="utf-8") as f:
        return f.read()


def _as_parts(messages):
    """The same conversation with each text content as a list of two OpenAI text parts."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m.get("content"), str) and len(m["content"]) > 1:
            m["content"] = [{"type": "text", "text": m["content"][:2]}, {"type": "text", "text": m["content"][2:]}]
    return out


@pytest.mark.parametrize("parts", [False, True], ids=["strings", "content lists"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_templates_render_as_jinja2_does(family, conversation, add_generation_prompt, parts):
    source = template(family)
    messages, tools = CONVERSATIONS[conversation]
    if parts:
        messages = _as_parts(messages)
    want = hf_render(source, copy.deepcopy(messages), add_generation_prompt, tools=tools, eos_token="<|im_end|>")
    chat = Chat(source, eos_token="<|im_end|>")
    assert chat.render_raw(messages, add_generation_prompt, tools=tools) == want


@pytest.mark.parametrize("family, tool_markers", [("qwen2.5-vl", None), ("qwen3-vl", ("<tool_call>", "</tool_call>"))])
def test_template_probes(family, tool_markers):
    chat = Chat(template(family), eos_token="<|im_end|>")
    assert (chat.assistant_prefix, chat.end_of_turn) == ("<|im_start|>assistant\n", "<|im_end|>\n")
    assert chat.think_markers is None and chat.tool_call_markers == tool_markers


def test_qwen3_vl_tool_call_result_and_answer():
    """Qwen3-VL's calls are Qwen 2.5's <tool_call> JSON; the session's cache is the template's rendering."""
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    tok = ScriptedTokenizer(specials=QWEN, words=("Hello", " world", "Paris"), eos=QWEN[0], end_of_turn=())
    model = scripted_model([call, "Sunny in Paris."], template=template("qwen3-vl"), tokenizer=tok,
                           opener="<|im_start|>assistant\n", end_token=QWEN[0])
    s = ChatSession(model, tools=[WEATHER])
    reply = s.send("Weather in Paris?")
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]
    s.add_tool_result("get_weather", {"sky": "sunny"})
    reply = s.send()
    assert reply.text == "Sunny in Paris." and reply.finish_reason == "stop"
    history = copy.deepcopy(s.history)
    for m in history:
        for c in m.get("tool_calls") or ():
            if isinstance(c["function"]["arguments"], str):
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    text = hf_render(template("qwen3-vl"), history, False, tools=s.tools, eos_token="<|im_end|>")
    assert s.context.tokens == tok.encode(text, add_special=False, parse_special=True)
    assert "<tool_response>\n{\"sky\": \"sunny\"}\n</tool_response>" in text
