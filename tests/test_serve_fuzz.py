"""Mutated request bodies at every POST endpoint of `infer serve`: whatever a client sends,
the answer is a 2xx, a 4xx in the endpoint's error shape, or the 501/503 the API defines,
never a 500 and never a hang (the standards: a malformed request gets a 400).

Each body starts from a valid one and has one or two fields replaced by a value of a
random type (numbers out of range, NaN, wrong types, nested junk, message lists with bad
roles and content parts, token lists past the vocabulary); a fixed seed, so a failure
replays.  INFER_FUZZ_REQUESTS runs more (235,000 of them by hand found the NaN body of
commit d7a40cd, and nothing after it).
"""
import http.client
import json
import os
import random

import pytest

for _name in ("uvicorn", "starlette", "sse_starlette", "greenlet"):
    pytest.importorskip(_name, reason=f"{_name} is not installed (the serve extra)")

import vocab_cases  # noqa: E402
from test_serve import app_server  # noqa: E402

import infer  # noqa: E402
from infer.serve.app import create_app  # noqa: E402

REQUESTS = int(os.environ.get("INFER_FUZZ_REQUESTS", "600"))
USER = [{"role": "user", "content": "hi"}]
#: a valid body of each endpoint, and the fields whose values the fuzzer replaces
ENDPOINTS = {
    "/v1/chat/completions": ({"messages": USER, "max_tokens": 3},
                             ["messages", "model", "max_tokens", "temperature", "top_p", "stream", "tools",
                              "tool_choice", "response_format", "logprobs", "top_logprobs", "n", "stop", "seed",
                              "logit_bias", "stream_options", "reasoning_effort", "presence_penalty"]),
    "/v1/completions": ({"prompt": "def f(", "max_tokens": 3},
                        ["prompt", "max_tokens", "suffix", "echo", "logprobs", "n", "stop", "stream", "temperature",
                         "best_of", "logit_bias"]),
    "/v1/embeddings": ({"input": "hello"}, ["input", "model", "encoding_format", "dimensions"]),
    "/v1/responses": ({"input": "hi", "max_output_tokens": 3},
                      ["input", "instructions", "tools", "tool_choice", "max_output_tokens", "stream", "text",
                       "reasoning", "temperature", "store", "previous_response_id"]),
    "/v1/messages": ({"messages": USER, "max_tokens": 3},
                     ["messages", "max_tokens", "system", "tools", "tool_choice", "stream", "thinking",
                      "stop_sequences", "temperature", "top_k"]),
    "/v1/messages/count_tokens": ({"messages": USER}, ["messages", "system", "tools", "model"]),
    "/completion": ({"prompt": "def f(", "n_predict": 3},
                    ["prompt", "n_predict", "stream", "n_probs", "grammar", "json_schema", "logit_bias", "stop",
                     "return_tokens", "ignore_eos", "response_fields", "cache_prompt"]),
    "/infill": ({"input_prefix": "def f(", "input_suffix": ")", "n_predict": 3},
                ["input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "stream"]),
    "/tokenize": ({"content": "hello"}, ["content", "add_special", "parse_special", "with_pieces"]),
    "/detokenize": ({"tokens": [1, 2]}, ["tokens"]),
    "/apply-template": ({"messages": USER}, ["messages", "tools", "add_generation_prompt"]),
    "/v1/rerank": ({"query": "a", "documents": ["b"]}, ["query", "documents", "top_n"]),
    "/api/chat": ({"model": "coder", "messages": USER, "stream": False, "options": {"num_predict": 3}},
                  ["model", "messages", "stream", "tools", "format", "options", "think", "keep_alive"]),
    "/api/generate": ({"model": "coder", "prompt": "hi", "stream": False, "options": {"num_predict": 3}},
                      ["model", "prompt", "suffix", "system", "raw", "stream", "options", "format", "context",
                       "template", "think"]),
    "/api/embed": ({"model": "coder", "input": "hi"}, ["model", "input", "truncate", "dimensions"]),
    "/api/embeddings": ({"model": "coder", "prompt": "hi"}, ["model", "prompt"]),
    "/api/show": ({"model": "coder"}, ["model", "name", "verbose"]),
}
KEYS = ["role", "content", "type", "text", "name", "function", "arguments", "x"]


def value(rng, depth=0):
    """A random JSON value, shallow past depth 2."""
    kinds = ["int", "float", "str", "bool", "null", "list", "dict", "neg", "big", "messages", "tokens"]
    kind = rng.choice(kinds if depth < 2 else kinds[:5])
    if kind == "int":
        return rng.randint(-3, 40)
    if kind == "neg":
        return -rng.randint(1, 10 ** 6)
    if kind == "big":
        return 10 ** rng.randint(6, 20)
    if kind == "float":
        return rng.choice([0.5, -1.0, 1e308, float("nan")] if depth else [0.7, 2.5, -0.1])
    if kind == "str":
        return rng.choice(["", "x", "hi there", "<|im_start|>", "é🙂", "a" * 300])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "dict":
        return {rng.choice(KEYS): value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if kind == "messages":
        contents = ["hi", "", None, 3, [{"type": "text", "text": "yo"}],
                    [{"type": "image_url", "image_url": {"url": "x"}}]]
        return [{"role": rng.choice(["user", "assistant", "system", "tool", "bogus"]), "content": rng.choice(contents)}
                for _ in range(rng.randint(0, 3))]
    return [rng.randint(-5, 300) for _ in range(rng.randint(0, 5))]  # token ids, some past the vocabulary


def mutated(rng, endpoint):
    valid, fields = ENDPOINTS[endpoint]
    body = json.loads(json.dumps(valid))
    for name in rng.sample(fields, 1 if rng.random() < 0.75 or len(fields) < 2 else 2):
        body[name] = value(rng)
    for name in ("max_tokens", "n_predict", "max_output_tokens"):  # keep replies short
        if isinstance(body.get(name), int) and not isinstance(body[name], bool) and body[name] > 8:
            body[name] = 4
    return body


def test_no_body_gets_a_500(tmp_path):
    rng = random.Random(1234)
    path = vocab_cases.write("qwen-coder", str(tmp_path / "coder.gguf"), weights=True)
    seen: dict = {}
    with infer.load(path) as model, app_server(create_app(model, parallel=2, ctx_size=256)) as base:
        host, port = base.removeprefix("http://").split(":")
        for _ in range(REQUESTS):
            endpoint = rng.choice(sorted(ENDPOINTS))
            data = json.dumps(mutated(rng, endpoint))
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                conn.request("POST", endpoint, body=data, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                text = resp.read().decode("utf-8", "replace")
            finally:
                conn.close()
            assert resp.status < 500 or resp.status in (501, 503), (endpoint, data, text[:300])
            seen.setdefault(endpoint, set()).add(resp.status)
    # the mutations reach past the checks: each endpoint that generates answered some with a 200
    generating = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/completion", "/infill",
                  "/api/chat", "/api/generate"]
    assert [e for e in generating if 200 not in seen.get(e, ())] == [], seen
