"""llama-server's own endpoints in `infer serve` (infer/serve/llama_server.py), on SmolLM2.

The references: llama.cpp itself through llama-cpp-python (its tokenizer, and its
greedy tokens where its choice is confident; recorded in
tests/data/llama_cpp_smollm2_calls.json, see `RecordedLlama`), the official `openai` client on
/v1/completions, `jsonschema`, a float64 numpy softmax of the logits of infer's own
plain Context (no scheduler), and the key sets of llama.cpp's server code, recorded
below with the file and line they come from (tools/server of the llama.cpp that
llama-cpp-python 0.3.36 vendors).
"""
import concurrent.futures
import hashlib
import http.client
import json
import os
import socket

import numpy as np
import pytest

for _name in ("uvicorn", "starlette", "sse_starlette", "greenlet", "openai"):
    pytest.importorskip(_name, reason=f"{_name} is not installed (the serve extra and the test extra)")

from _tok_models import installed_path  # noqa: E402
from test_serve import app_server, client, metrics, request, wait_for  # noqa: E402

from infer.serve.app import create_app  # noqa: E402

#: llama.cpp's answers to the calls these tests make (`RecordedLlama`)
CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_cpp_smollm2_calls.json")

# ---- llama-server's key sets -------------------------------------------------------------------------
# server-task.cpp:340, server_task_result_cmpl_final::to_json_non_oaicompat
FINAL_KEYS = {"index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted", "tokens_evaluated",
              "generation_settings", "prompt", "has_new_line", "truncated", "stop_type", "stopping_word",
              "tokens_cached", "timings"}
# server-task.cpp:1049, server_task_result_cmpl_partial::to_json_non_oaicompat (timings and
# prompt_progress only with timings_per_token / return_progress)
PARTIAL_KEYS = {"index", "content", "tokens", "stop", "id_slot", "tokens_predicted", "tokens_evaluated"}
# server-common.cpp:84, server_slot_stats::to_json (draft_n only with speculative decoding)
TIMINGS_KEYS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
# server-task.cpp:97-146, task_params::to_json (the full form, in generation_settings)
SETTINGS_KEYS = {"seed", "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p",
                 "top_n_sigma", "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty",
                 "presence_penalty", "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length",
                 "dry_penalty_last_n", "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta",
                 "adaptive_target", "adaptive_decay", "stop", "max_tokens", "n_predict", "n_keep", "n_discard",
                 "ignore_eos", "stream", "logit_bias", "n_probs", "min_keep", "grammar", "grammar_lazy",
                 "grammar_triggers", "preserved_tokens", "chat_format", "reasoning_format", "reasoning_in_content",
                 "generation_prompt", "samplers", "speculative.types", "timings_per_token", "post_sampling_probs",
                 "backend_sampling", "lora"}
# server-task.cpp:282 probs_vector_to_json and :264 completion_token_output::to_json
PROBABILITY_KEYS = {"id", "token", "bytes", "logprob", "top_logprobs"}
TOP_PROBABILITY_KEYS = {"id", "token", "bytes", "logprob"}
# server-context.cpp:4580, get_res_props
PROPS_KEYS = {"default_generation_settings", "total_slots", "model_alias", "model_ftype", "model_path",
              "modalities", "media_marker", "endpoint_slots", "endpoint_props", "endpoint_metrics", "ui",
              "ui_settings", "chat_template", "chat_template_caps", "bos_token", "eos_token", "build_info",
              "is_sleeping", "cors_proxy_enabled", "chat_template_tool_use"}
# server-context.cpp:656, server_slot::to_json (the rest only once the slot has had a task)
SLOT_KEYS = {"id", "n_ctx", "speculative", "is_processing"}
SLOT_TASK_KEYS = {"id_task", "n_prompt_tokens", "n_prompt_tokens_processed", "n_prompt_tokens_cache", "params",
                  "next_token", "prompt", "generated"}
# server-common.cpp:36, format_error_response (res->error wraps it in {"error": ...})
ERROR_KEYS = {"code", "message", "type"}


@pytest.fixture(scope="module")
def smol():
    import infer

    with infer.load(installed_path("smollm2")) as model:
        app = create_app(model, parallel=2, ctx_size=256)
        with app_server(app) as base:
            yield model, base


class RecordedLlama:
    """llama.cpp on SmolLM2 (llama-cpp-python's `Llama`, one thread, all logits): its
    tokenizer and greedy choices, as these tests ask for them.  By default the answers
    come from CALLS; with INFER_RECORD_LLAMA_CALLS=1 (and llama-cpp-python importable,
    LLAMA_CPP_LIB_PATH naming its libllama) each call goes to llama.cpp and the
    answers are written to CALLS when the module's tests end."""

    def __init__(self, live=None, answers=None):
        self.live = live
        self.answers = answers or {}

    def _answer(self, key, compute):
        key = json.dumps(key, ensure_ascii=False)
        if self.live is not None:
            self.answers[key] = compute()
        assert key in self.answers, f"no recorded llama.cpp answer for {key}: re-record {CALLS} (RecordedLlama)"
        return self.answers[key]

    def tokenize(self, text, add_bos, special):
        return self._answer(["tokenize", text.decode(), add_bos, special],
                            lambda: self.live.tokenize(text, add_bos=add_bos, special=special))

    def detokenize(self, ids, special=False):
        return bytes(self._answer(["detokenize", list(ids), special],
                                  lambda: list(self.live.detokenize(ids, special=special))))

    def greedy(self, prompt_ids, n):
        """llama.cpp's greedy tokens after ``prompt_ids`` and, for each, the gap between
        its logit and the runner-up's (a small gap: a choice rounding may flip)."""
        def run():
            llm = self.live
            llm.reset()
            llm.eval(prompt_ids)
            tokens, gaps = [], []
            for _ in range(n):
                row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
                first, second = np.argsort(-row)[:2]
                tokens.append(int(first))
                gaps.append(float(row[first] - row[second]))
                llm.eval([int(first)])
            return [tokens, gaps]
        return tuple(self._answer(["greedy", list(prompt_ids), n], run))


def _file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def llama():
    model = installed_path("smollm2")
    if os.environ.get("INFER_RECORD_LLAMA_CALLS"):
        llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python with its built libllama")
        llm = llama_cpp.Llama(model, n_ctx=512, n_threads=1, logits_all=True, verbose=False)
        recorder = RecordedLlama(live=llm)
        yield recorder
        llm.close()
        with open(CALLS, "w", encoding="utf-8") as f:
            json.dump({"model_sha256": _file_sha256(model), "answers": recorder.answers}, f, ensure_ascii=False)
        return
    with open(CALLS, encoding="utf-8") as f:
        recorded = json.load(f)
    assert recorded["model_sha256"] == _file_sha256(model), f"{CALLS} was recorded on another SmolLM2 file"
    yield RecordedLlama(answers=recorded["answers"])


def post(base, path, body):
    status, _, out = request(base, "POST", path, body)
    return status, out


def events(base, body):
    """The JSON objects of a streamed /completion, and the raw text (to see what ends it)."""
    status, headers, text = request(base, "POST", "/completion", dict(body, stream=True))
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), text
    chunks = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    return chunks, text


def assert_llama_error(status, body, expected_status=400, names=None):
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    assert body["error"]["code"] == expected_status and body["error"]["message"]
    if names is not None:
        assert names in body["error"]["message"], body


# ---- /tokenize, /detokenize against llama.cpp's tokenizer ---------------------------------------------------
TEXTS = ["Hello world", "<|im_start|>user\nHi there!<|im_end|>\n", "  spaces\tand\nnewlines 12345 ünïcödé 你好 🙂",
         "plain <|im_end|> inside"]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_matches_llama_cpp(smol, llama, text):
    _, base = smol
    for add_special in (False, True):
        for parse_special in (False, True):
            status, out = post(base, "/tokenize", {"content": text, "add_special": add_special,
                                                   "parse_special": parse_special})
            assert status == 200
            assert out == {"tokens": llama.tokenize(text.encode(), add_bos=add_special, special=parse_special)}
    # llama-server's defaults: add_special false, parse_special true
    assert post(base, "/tokenize", {"content": text})[1]["tokens"] == llama.tokenize(text.encode(), add_bos=False,
                                                                                     special=True)


def test_tokenize_a_long_text(smol, llama):
    _, base = smol
    text = " ".join(f"word{i}, ünï {i * 7}!" for i in range(3000))  # beyond LONG_TEXT characters
    assert post(base, "/tokenize", {"content": text})[1]["tokens"] == llama.tokenize(text.encode(), add_bos=False,
                                                                                     special=True)


def test_tokenize_with_pieces_and_mixed_content(smol, llama):
    _, base = smol
    text = "Hi 🙂<|im_end|>"
    status, out = post(base, "/tokenize", {"content": text, "with_pieces": True})
    assert status == 200
    ids = llama.tokenize(text.encode(), add_bos=False, special=True)
    assert [p["id"] for p in out["tokens"]] == ids
    for entry in out["tokens"]:
        piece = llama.detokenize([entry["id"]], special=True)
        try:  # llama-server: the piece as text when it is valid UTF-8, else its bytes
            expected = piece.decode("utf-8")
        except UnicodeDecodeError:
            expected = list(piece)
        assert entry["piece"] == expected
    # a list mixing ids and texts: each text tokenized on its own (llama-server's tokenize_mixed)
    status, out = post(base, "/tokenize", {"content": [1, "Hello", 2, " world"]})
    assert out["tokens"] == [1] + llama.tokenize(b"Hello", add_bos=False, special=True) + [2] + \
        llama.tokenize(b" world", add_bos=False, special=True)


def test_detokenize_matches_llama_cpp(smol, llama):
    _, base = smol
    for text in TEXTS:
        ids = llama.tokenize(text.encode(), add_bos=False, special=True)
        status, out = post(base, "/detokenize", {"tokens": ids})
        assert status == 200
        assert out == {"content": llama.detokenize(ids, special=True).decode("utf-8")}
    assert post(base, "/detokenize", {"tokens": []}) == (200, {"content": ""})
    assert post(base, "/detokenize", {}) == (200, {"content": ""})


# ---- /completion -------------------------------------------------------------------------------------
PROMPT = "The capital of France is"


def test_greedy_completion_matches_llama_cpp(smol, llama):
    _, base = smol
    n = 24
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": n, "temperature": 0,
                                             "return_tokens": True, "cache_prompt": False})
    assert status == 200, out
    prompt_ids = llama.tokenize(PROMPT.encode(), add_bos=True, special=True)
    expected, gaps = llama.greedy(prompt_ids, n)
    confident = next((i for i, gap in enumerate(gaps) if gap < 0.5), n)  # llama.cpp's first close call
    assert confident >= 5, gaps
    assert out["tokens"][:confident] == expected[:confident]
    assert out["content"].startswith(llama.detokenize(expected[:confident]).decode())
    assert out["tokens_evaluated"] == len(prompt_ids) and out["tokens_predicted"] == n == len(out["tokens"])
    assert out["stop_type"] == "limit" and out["stop"] is True and out["stopping_word"] == ""
    assert out["prompt"] == PROMPT


def test_completion_equals_openai_completions(smol):
    _, base = smol
    for prompt in (PROMPT, "def fibonacci(n):"):
        reference = client(base).completions.create(model="any", prompt=prompt, max_tokens=20, temperature=0,
                                                    extra_body={"cache_prompt": False})
        status, out = post(base, "/completion", {"prompt": prompt, "n_predict": 20, "temperature": 0,
                                                 "cache_prompt": False})
        assert status == 200 and out["content"] == reference.choices[0].text
        assert out["tokens_predicted"] == reference.usage.completion_tokens
        assert out["tokens_evaluated"] == reference.usage.prompt_tokens
        # /completions (no /v1) is the same native endpoint, as in llama-server
        status, alias = post(base, "/completions", {"prompt": prompt, "n_predict": 20, "temperature": 0,
                                                    "cache_prompt": False})
        assert status == 200 and alias["content"] == out["content"] and set(alias) == FINAL_KEYS


def test_token_and_mixed_prompts_equal_the_text_prompt(smol, llama):
    _, base = smol
    ids = llama.tokenize(PROMPT.encode(), add_bos=True, special=True)
    body = {"n_predict": 8, "temperature": 0, "return_tokens": True, "cache_prompt": False}
    by_text = post(base, "/completion", dict(body, prompt=PROMPT))[1]
    by_ids = post(base, "/completion", dict(body, prompt=ids))[1]
    head = llama.tokenize(b"The capital", add_bos=True, special=True)
    mixed = post(base, "/completion", dict(body, prompt=[*head, " of France is"]))[1]
    assert head + llama.tokenize(b" of France is", add_bos=False, special=True) == ids  # the split is clean
    assert by_text["tokens"] == by_ids["tokens"] == mixed["tokens"]
    assert by_text["tokens_evaluated"] == by_ids["tokens_evaluated"] == mixed["tokens_evaluated"] == len(ids)


def test_response_shape(smol):
    _, base = smol
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0})
    assert status == 200
    assert set(out) == FINAL_KEYS
    assert set(out["timings"]) == TIMINGS_KEYS
    assert set(out["generation_settings"]) <= SETTINGS_KEYS
    settings = out["generation_settings"]
    assert settings["n_predict"] == 4 and settings["temperature"] == 0 and settings["top_k"] == 40
    assert settings["typical_p"] == 1.0 and settings["mirostat"] == 0  # samplers infer has not, off
    assert out["tokens"] == []  # without return_tokens, as llama-server
    assert out["timings"]["predicted_n"] == 4 and out["timings"]["prompt_n"] + out["timings"]["cache_n"] == \
        out["tokens_evaluated"]


def test_stream_concatenates_to_the_response(smol):
    _, base = smol
    body = {"prompt": "Once upon a time", "n_predict": 20, "temperature": 0, "cache_prompt": False,
            "return_tokens": True}
    whole = post(base, "/completion", body)[1]
    chunks, text = events(base, body)
    *parts, last = chunks
    assert all(set(c) == PARTIAL_KEYS and c["stop"] is False for c in parts)
    assert "".join(c["content"] for c in parts) == whole["content"]
    assert [t for c in parts for t in c["tokens"]] == whole["tokens"]
    assert [c["tokens_predicted"] for c in parts] == list(np.cumsum([len(c["tokens"]) for c in parts]))
    assert set(last) == FINAL_KEYS and last["stop"] is True and last["content"] == "" and last["tokens"] == []
    assert last["tokens_predicted"] == whole["tokens_predicted"] and last["stop_type"] == "limit"
    assert "[DONE]" not in text  # llama-server's native stream has no [DONE] (server-context.cpp:4431)


def test_stop_word_eos_and_ignore_eos(smol, llama):
    _, base = smol
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": 32, "temperature": 0,
                                             "stop": ["United"], "return_tokens": True})
    assert status == 200
    assert out["stop_type"] == "word" and out["stopping_word"] == "United"
    assert out["content"] == " Paris.\n\nThe "
    chat = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    status, out = post(base, "/completion", {"prompt": chat, "n_predict": 64, "temperature": 0,
                                             "return_tokens": True})
    assert out["stop_type"] == "eos" and out["tokens"][-1] == 2  # <|im_end|>, in tokens and not in content
    expected, gaps = llama.greedy(llama.tokenize(chat.encode(), add_bos=True, special=True),
                                  len(out["tokens"]))
    assert min(gaps) > 0.5 and out["tokens"] == expected  # llama.cpp ends the reply there too, confidently
    assert out["content"] == llama.detokenize(expected[:-1]).decode() and "<|im_end|>" not in out["content"]
    status, ignored = post(base, "/completion", {"prompt": chat, "n_predict": len(out["tokens"]) + 4,
                                                 "temperature": 0, "return_tokens": True, "ignore_eos": True})
    assert ignored["stop_type"] == "limit" and 2 not in ignored["tokens"] and 0 not in ignored["tokens"]
    assert ignored["tokens"][:len(out["tokens"]) - 1] == out["tokens"][:-1]


def test_logit_bias_forms(smol):
    _, base = smol
    body = {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "return_tokens": True}
    greedy = post(base, "/completion", body)[1]["tokens"][0]
    assert greedy == 7042  # " Paris"
    for bias in ([[7042, False]], {"7042": False}, [[" Paris", False]], {" Paris": -1000}, [[7042, -1e4]]):
        status, out = post(base, "/completion", dict(body, logit_bias=bias))
        assert status == 200, out
        assert out["tokens"][0] != 7042, bias
        assert {"bias": out["generation_settings"]["logit_bias"][0]["bias"] < -999, "token": 7042} == \
            {"bias": True, "token": out["generation_settings"]["logit_bias"][0]["token"]}
    status, out = post(base, "/completion", dict(body, logit_bias=[[504, 100]]))
    assert out["tokens"] == [504]


def test_n_probs_match_a_numpy_softmax_of_the_logits(smol):
    model, base = smol
    n_probs, n = 5, 6
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": n, "temperature": 0, "n_probs": n_probs,
                                             "return_tokens": True})
    assert status == 200
    entries = out["completion_probabilities"]
    assert len(entries) == n and [e["id"] for e in entries] == out["tokens"]
    ids = model.tokenizer.encode(PROMPT)
    rows = model.create_context(n_ctx=64).prefill(ids + out["tokens"], all_logits=True)
    for i, entry in enumerate(entries):
        assert set(entry) == PROBABILITY_KEYS and all(set(t) == TOP_PROBABILITY_KEYS for t in entry["top_logprobs"])
        logits = np.asarray(rows[len(ids) - 1 + i], dtype=np.float64)
        logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        order = np.argsort(-logp, kind="stable")[:n_probs]
        assert [t["id"] for t in entry["top_logprobs"]] == [int(j) for j in order]
        np.testing.assert_allclose([t["logprob"] for t in entry["top_logprobs"]], logp[order], atol=2e-3)
        np.testing.assert_allclose(entry["logprob"], logp[entry["id"]], atol=2e-3)
        assert bytes(entry["bytes"]) == bytes(model.tokenizer.token_to_piece(entry["id"]))
    # every token's probability: they sum to 1
    vocab = int(model.engine.vocab_size)
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "n_probs": vocab})
    (entry,) = out["completion_probabilities"]
    assert len(entry["top_logprobs"]) == vocab
    assert abs(np.exp([t["logprob"] for t in entry["top_logprobs"]]).sum() - 1.0) < 1e-4
    # streamed: each chunk carries the probabilities of its tokens
    chunks, _ = events(base, {"prompt": PROMPT, "n_predict": 3, "temperature": 0, "n_probs": 2})
    assert [e["id"] for c in chunks[:-1] for e in c["completion_probabilities"]] == \
        [t for c in chunks[:-1] for t in c["tokens"]]
    assert "completion_probabilities" not in chunks[-1]


def test_json_schema_and_grammar(smol):
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("llguidance")
    _, base = smol
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    status, out = post(base, "/completion", {"prompt": "A person as JSON:", "n_predict": 60, "temperature": 0,
                                             "json_schema": schema})
    assert status == 200, out
    jsonschema.validate(json.loads(out["content"]), schema)
    status, out = post(base, "/completion", {"prompt": "Is the sky blue? Answer:", "n_predict": 8,
                                             "grammar": 'root ::= " yes" | " no"', "temperature": 0})
    assert status == 200 and out["content"] in (" yes", " no") and out["stop_type"] == "eos"
    # the same fields on /v1/chat/completions, as llama-server takes them there
    messages = [{"role": "user", "content": "Give me a person as JSON."}]
    reply = client(base).chat.completions.create(model="any", messages=messages, max_tokens=60, temperature=0,
                                                 extra_body={"json_schema": schema})
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    reply = client(base).chat.completions.create(model="any", messages=messages, max_tokens=8, temperature=0,
                                                 extra_body={"grammar": 'root ::= "yes" | "no"'})
    assert reply.choices[0].message.content in ("yes", "no")
    status, _, err = request(base, "POST", "/v1/chat/completions", {
        "messages": messages, "grammar": "root ::= (", "max_tokens": 4})
    assert status == 400 and err["error"]["param"] == "grammar"  # OpenAI's shape on the OpenAI endpoint
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for extra in ({"response_format": {"type": "json_object"}}, {"tools": tools, "tool_choice": "required"}):
        status, _, err = request(base, "POST", "/v1/chat/completions", dict(
            extra, messages=messages, json_schema=schema, max_tokens=4))
        assert status == 400 and err["error"]["param"] == "json_schema"  # two constraints: which one?


def test_bad_requests_are_400_in_llama_server_shape(smol):
    _, base = smol
    cases = [
        ({"prompt": PROMPT, "n_predict": -2}, "n_predict"),
        ({"prompt": PROMPT, "n_predict": "5"}, "n_predict"),
        ({"prompt": PROMPT, "temperature": "hot"}, "temperature"),
        ({"prompt": PROMPT, "stop": 5}, "stop"),
        ({"prompt": PROMPT, "typical_p": 0.5}, "typical_p"),
        ({"prompt": PROMPT, "mirostat": 2}, "mirostat"),
        ({"prompt": PROMPT, "n_probs": -1}, "n_probs"),
        ({"prompt": PROMPT, "logit_bias": [[10 ** 9, 1.0]]}, "logit_bias"),
        ({"prompt": PROMPT, "logit_bias": 3}, "logit_bias"),
        ({"prompt": PROMPT, "return_tokens": "yes"}, "return_tokens"),
        ({"prompt": PROMPT, "cache_prompt": 1}, "cache_prompt"),
        ({"prompt": PROMPT, "no_such_field": 1}, "no_such_field"),
        ({"prompt": [1, 2.5]}, "prompt"),
        ({"prompt": [10 ** 9]}, "prompt"),
        ({"prompt": {"text": "x"}}, "prompt"),
        ({"n_predict": 3}, "prompt"),
        ({"prompt": PROMPT, "json_schema": "not an object"}, "json_schema"),
        ({"prompt": PROMPT, "grammar": "root ::= ("}, None),
    ]
    for body, name in cases:
        status, out = post(base, "/completion", body)
        assert_llama_error(status, out, 400, name)
        status, out = post(base, "/completion", dict(body, stream=True))
        assert_llama_error(status, out, 400, name)
    # beyond the context of 256 tokens; the second, of 40,000 characters, is tokenized off the loop's thread
    for too_long in ("word " * 400, "word " * 8000):
        status, out = post(base, "/completion", {"prompt": too_long, "n_predict": 1})
        assert_llama_error(status, out, 400)
        assert out["error"]["type"] == "exceed_context_size_error"
    status, _, out = request(base, "POST", "/completion", raw=b"{not json")
    assert_llama_error(status, out, 400)
    for body in ({"tokens": [10 ** 9]}, {"tokens": [-1]}, {"tokens": "12"}, {"tokens": [1.5]}, {"token": [1]}):
        assert_llama_error(*post(base, "/detokenize", body), 400)
    for body in ({"content": 5}, {"content": "x", "add_special": "no"}, {"content": [1, None]},
                 {"content": "x", "extra": 1}):
        assert_llama_error(*post(base, "/tokenize", body), 400)
    for body in ({"messages": "hi"}, {"messages": [{"role": "nobody", "content": "x"}]}, {}):
        assert_llama_error(*post(base, "/apply-template", body), 400)


def test_apply_template_props_and_slots(smol):
    model, base = smol
    status, out = post(base, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
    # SmolLM2's template by hand: its default system prompt, then the turn and the generation prompt
    assert status == 200 and out == {"prompt": (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")}
    status, _, props = request(base, "GET", "/props")
    assert status == 200 and set(props) <= PROPS_KEYS
    assert set(props["default_generation_settings"]) == {"params", "n_ctx"}
    assert set(props["default_generation_settings"]["params"]) <= SETTINGS_KEYS
    assert props["default_generation_settings"]["n_ctx"] == 256 and props["total_slots"] == 2
    assert props["model_alias"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert props["model_path"] == installed_path("smollm2")
    assert props["chat_template"] == model.metadata["tokenizer.chat_template"]
    assert props["eos_token"] == "<|im_end|>" and props["endpoint_slots"] is True
    assert props["default_generation_settings"]["params"]["n_predict"] == -1  # llama-server's default
    status, _, slots = request(base, "GET", "/slots")
    assert status == 200 and [s["id"] for s in slots] == [0, 1]
    assert all(SLOT_KEYS <= set(s) <= SLOT_KEYS | SLOT_TASK_KEYS and s["n_ctx"] == 256 for s in slots)
    assert not any(s["is_processing"] for s in slots)


def test_no_slots_turns_slots_off(smol):
    model, _ = smol
    with app_server(create_app(model, parallel=1, ctx_size=64, slots_endpoint=False)) as base:
        status, _, out = request(base, "GET", "/slots")
        assert_llama_error(status, out, 501)
        assert out["error"]["type"] == "not_supported_error"
        assert request(base, "GET", "/props")[2]["endpoint_slots"] is False


def test_a_list_of_prompts_answers_a_list(smol):
    _, base = smol
    body = {"n_predict": 6, "temperature": 0, "return_tokens": True, "cache_prompt": False}
    one = [post(base, "/completion", dict(body, prompt=p))[1] for p in (PROMPT, "Once upon a time")]
    status, both = post(base, "/completion", dict(body, prompt=[PROMPT, "Once upon a time"]))
    assert status == 200 and isinstance(both, list) and [r["index"] for r in both] == [0, 1]
    assert [r["content"] for r in both] == [r["content"] for r in one]
    assert [r["tokens"] for r in both] == [r["tokens"] for r in one]
    chunks, _ = events(base, dict(body, prompt=[PROMPT, "Once upon a time"]))
    for i, expected in enumerate(one):
        mine = [c for c in chunks if c["index"] == i]
        assert "".join(c["content"] for c in mine) == expected["content"] and mine[-1]["stop"] is True
    # a one-element list is that prompt, answered as one object
    status, single = post(base, "/completion", dict(body, prompt=[PROMPT]))
    assert isinstance(single, dict) and single["tokens"] == one[0]["tokens"]


def test_n_predict_zero_evaluates_the_prompt_only(smol, llama):
    _, base = smol
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": 0, "return_tokens": True})
    assert status == 200 and out["content"] == "" and out["tokens"] == [] and out["tokens_predicted"] == 0
    assert out["stop_type"] == "limit"
    assert out["tokens_evaluated"] == len(llama.tokenize(PROMPT.encode(), add_bos=True, special=True))


def test_concurrent_requests_share_the_slots_and_a_dropped_stream_frees_its_own(smol):
    """/completion and /v1/completions decode side by side in the two slots, each with
    its text alone; a /completion stream whose client goes away is cancelled and gives
    its slot back, as an OpenAI stream does."""
    _, base = smol
    prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "The best way to learn"]
    alone = [post(base, "/completion", {"prompt": p, "n_predict": 12, "temperature": 0, "cache_prompt": False})[1]
             ["content"] for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        native = [pool.submit(post, base, "/completion", {"prompt": p, "n_predict": 12, "temperature": 0,
                                                          "cache_prompt": False}) for p in prompts[:2]]
        openai_side = [pool.submit(lambda p: client(base).completions.create(
            model="m", prompt=p, max_tokens=12, temperature=0, extra_body={"cache_prompt": False}), p)
            for p in prompts[2:]]
        assert [f.result()[1]["content"] for f in native] == alone[:2]
        assert [f.result().choices[0].text for f in openai_side] == alone[2:]
    cancelled = metrics(base)["infer_requests_cancelled_total"]
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/completion", body=json.dumps({"prompt": "Tell a long story.", "n_predict": -1,
                                                         "ignore_eos": True, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.fp.readline().startswith(b"data: "):  # chunked: a size line comes first
        pass
    assert any(s["is_processing"] for s in request(base, "GET", "/slots")[2])
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert wait_for(lambda: not any(s["is_processing"] for s in request(base, "GET", "/slots")[2]))
    assert metrics(base)["infer_requests_cancelled_total"] == cancelled + 1


def test_sampling_fields_mean_what_they_mean_on_v1_completions(smol):
    """A seeded, non-greedy /completion equals the same request on /v1/completions
    through the openai client (the sampling fields reach the same sampler)."""
    _, base = smol
    sampling = {"temperature": 0.9, "top_k": 20, "top_p": 0.9, "min_p": 0.02, "repeat_penalty": 1.1,
                "presence_penalty": 0.3, "frequency_penalty": 0.2, "seed": 1234}
    reference = client(base).completions.create(
        model="m", prompt="Once upon a time", max_tokens=24, temperature=0.9, top_p=0.9, presence_penalty=0.3,
        frequency_penalty=0.2, seed=1234, extra_body={"top_k": 20, "min_p": 0.02, "repeat_penalty": 1.1,
                                                      "cache_prompt": False})
    status, out = post(base, "/completion", dict(sampling, prompt="Once upon a time", n_predict=24,
                                                 cache_prompt=False))
    assert status == 200 and out["content"] == reference.choices[0].text
    settings = out["generation_settings"]
    assert {k: settings[k] for k in sampling} == pytest.approx(sampling)
    # n_predict's aliases, n_predict first (server-schema.cpp)
    for limits, n in (({"max_tokens": 3}, 3), ({"max_tokens": 5, "n_predict": 2}, 2),
                      ({"max_completion_tokens": 4}, 4)):
        assert post(base, "/completion", dict(limits, prompt=PROMPT, temperature=0))[1]["tokens_predicted"] == n


def test_no_slots_flag_reaches_the_app():
    import argparse

    from infer.cli import serve

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    assert serve.app_options(parser.parse_args(["serve", "--no-slots"]))["slots_endpoint"] is False
    assert serve.app_options(parser.parse_args(["serve"]))["slots_endpoint"] is True


def test_response_fields(smol):
    _, base = smol
    status, out = post(base, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0,
                                             "response_fields": ["content", "generation_settings/n_predict",
                                                                 "no_such", "timings/no_such"]})
    assert status == 200
    # README.md of llama.cpp's server: a path's field moves to the top under the path; missing ones are left out
    # (" Paris.\n\n": llama.cpp's greedy tokens 7042, 30, 198, 198, each chosen by a logit gap over 1.2)
    assert out == {"content": " Paris.\n\n", "generation_settings/n_predict": 4}
    assert_llama_error(*post(base, "/completion", {"prompt": PROMPT, "response_fields": "content"}), 400,
                       "response_fields")


def test_api_key_errors_in_each_endpoints_shape(smol):
    model, _ = smol
    with app_server(create_app(model, parallel=1, ctx_size=64, api_key="s3cret")) as base:
        status, out = post(base, "/tokenize", {"content": "hi"})
        assert_llama_error(status, out, 401)
        assert out["error"]["type"] == "authentication_error"  # server-common.cpp:44
        status, _, out = request(base, "POST", "/tokenize", {"content": "hi"}, {"Authorization": "Bearer s3cret"})
        assert status == 200 and out["tokens"]
        status, _, out = request(base, "POST", "/v1/completions", {"prompt": "hi"})
        assert status == 401 and out["error"]["code"] == "invalid_api_key"  # OpenAI's shape there
