"""Ollama's HTTP API in `infer serve`, checked with the official `ollama` Python client.

One server on SmolLM2 (in this process, on loopback): its greedy replies must equal
the same request through /v1/chat/completions and /v1/completions (with ollama's
sampling defaults spelt out there), its counts the token counts, its listing the
file's facts as the `gguf` package's reader gives them (recorded below).  The scripted
variant (tests/scripted.py), whose replies are known, serves the tool-call, thinking,
dropped-client, server-stopping and API-key checks.
"""
import http.client
import json
import os
import socket

import pytest

for _name in ("uvicorn", "starlette", "greenlet", "openai", "ollama", "jsonschema"):
    pytest.importorskip(_name, reason=f"{_name} is not installed (the serve extra and the test extra)")

import jsonschema  # noqa: E402
import ollama  # noqa: E402

from infer.serve.app import create_app  # noqa: E402
from scripted import ScriptedTokenizer, scripted_model  # noqa: E402
from test_serve import app_server, client, metrics, request, slow_model, wait_for  # noqa: E402

#: ollama's sampling defaults (its docs/modelfile.md), as /v1 fields
OLLAMA_DEFAULTS = {"top_k": 40, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1, "repeat_last_n": 64}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def smol():
    import infer

    with infer.load() as model, app_server(create_app(model, parallel=2, ctx_size=512)) as base:
        yield model, base, ollama.Client(host=base, timeout=120)


def ndjson(base, path, body):
    """(status, content type, the parsed lines) of a raw request."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    lines = resp.read().decode().splitlines()
    conn.close()
    return resp.status, resp.getheader("content-type"), [json.loads(line) for line in lines]


# ---- SmolLM2 ---------------------------------------------------------------------------------------
def test_listing_shows_the_file_as_ollama_lists_models(smol):
    model, base, oc = smol
    # the file's facts as gguf.GGUFReader reads them (general.architecture, the sum of the
    # tensors' n_elements, llama.context_length, general.file_type 3 = MOSTLY_Q4_1), recorded
    # here because reading the whole file with it takes seconds
    arch, n_params, ctx_len = "llama", 134_515_008, 8192

    (entry,) = oc.list().models
    assert entry.model == "SmolLM2-135M-Instruct.Q4_1:latest"
    assert entry.size == os.path.getsize(model.path) and len(entry.digest) == 64
    assert entry.details.format == "gguf" and entry.details.family == arch == "llama"
    assert entry.details.parameter_size == "134.52M"  # ollama's HumanNumber: two decimals in millions
    assert entry.details.quantization_level == "Q4_1"
    (running,) = oc.ps().models
    assert running.model == entry.model and running.context_length == 512

    shown = oc.show(entry.model)
    assert shown.capabilities == ["completion"]  # its template takes no tools and has no thinking
    assert shown.modelinfo["general.architecture"] == arch
    assert shown.modelinfo[f"{arch}.context_length"] == ctx_len
    assert shown.modelinfo["general.parameter_count"] == n_params
    assert shown.modelinfo["tokenizer.ggml.tokens"] == []  # long arrays only with verbose, as ollama
    assert "general.name" not in shown.modelinfo and shown.template == model.chat.source
    verbose = request(base, "POST", "/api/show", {"model": entry.model, "verbose": True})[2]["model_info"]
    assert len(verbose["tokenizer.ggml.tokens"]) == 49152 and verbose["tokenizer.ggml.tokens"][:2] == [
        "<|endoftext|>", "<|im_start|>"]

    assert request(base, "GET", "/api/version")[2]["version"].count(".") == 2
    host, port = base.removeprefix("http://").split(":")
    for method in ("GET", "HEAD"):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request(method, "/")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == (b"Ollama is running" if method == "GET" else b"")
        conn.close()


def test_chat_equals_the_openai_endpoint_streamed_or_not(smol):
    model, base, oc = smol
    expected = client(base).chat.completions.create(model="any", messages=QUESTION, max_tokens=24, temperature=0,
                                                    extra_body=OLLAMA_DEFAULTS)
    out = oc.chat(model="SmolLM2-135M-Instruct.Q4_1", messages=QUESTION, stream=False,
                  options={"temperature": 0, "num_predict": 24})
    assert out.message.role == "assistant" and out.message.content == expected.choices[0].message.content
    assert out.done and out.done_reason == expected.choices[0].finish_reason == "length"
    prompt_ids = model.tokenizer.encode(model.chat.render(QUESTION), add_special=True, parse_special=True)
    assert out.prompt_eval_count == len(prompt_ids) == expected.usage.prompt_tokens
    assert out.eval_count == 24
    assert out.total_duration >= out.prompt_eval_duration > 0 and out.eval_duration > 0

    parts = list(oc.chat(model="smollm2-135m-instruct.q4_1:latest", messages=QUESTION,
                         options={"temperature": 0, "num_predict": 24}, stream=True))
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert "".join(p.message.content for p in parts) == out.message.content
    assert parts[-1].eval_count == 24 and parts[-1].prompt_eval_count == out.prompt_eval_count

    # no "stream": ollama's default is to stream
    status, kind, lines = ndjson(base, "/api/chat", {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "messages": QUESTION,
                                                     "options": {"temperature": 0, "num_predict": 3}})
    assert status == 200 and kind == "application/x-ndjson" and lines[-1]["done"] is True
    assert all(isinstance(lines[-1][k], int) for k in ("total_duration", "load_duration", "prompt_eval_count",
                                                       "prompt_eval_duration", "eval_count", "eval_duration"))
    assert lines[-1]["created_at"].endswith("Z") and lines[-1]["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_generate_equals_chat_and_raw_equals_completions(smol):
    model, base, oc = smol
    prompt = "What is the capital of France?"
    expected = client(base).chat.completions.create(model="any", messages=QUESTION, max_tokens=12, temperature=0,
                                                    extra_body=OLLAMA_DEFAULTS)
    out = oc.generate(model="SmolLM2-135M-Instruct.Q4_1", prompt=prompt, options={"temperature": 0, "num_predict": 12})
    assert out.response == expected.choices[0].message.content and out.eval_count == 12
    # context: the tokens of the prompt and the reply, as ollama computes it
    assert out.context == model.tokenizer.encode(model.chat.render(QUESTION) + out.response, add_special=True,
                                                 parse_special=True)
    again = oc.generate(model="SmolLM2-135M-Instruct.Q4_1", prompt="And of Italy?", context=out.context,
                        options={"temperature": 0, "num_predict": 4}, stream=False)
    assert again.done and again.eval_count == 4 and again.context[:len(out.context)] == out.context

    raw = oc.generate(model="SmolLM2-135M-Instruct.Q4_1", prompt="The capital of France is", raw=True,
                      options={"temperature": 0, "num_predict": 10})
    text = client(base).completions.create(model="any", prompt="The capital of France is", max_tokens=10,
                                           temperature=0, extra_body=OLLAMA_DEFAULTS)
    assert raw.response == text.choices[0].text and raw.context is None


def test_concurrent_streams_share_the_slots_and_equal_the_openai_replies(smol):
    import concurrent.futures

    _, base, oc = smol
    questions = [[{"role": "user", "content": f"Name a colour and the number {i}."}] for i in range(3)]
    expected = [client(base).chat.completions.create(model="any", messages=q, max_tokens=10, temperature=0,
                                                     extra_body=OLLAMA_DEFAULTS).choices[0].message.content
                for q in questions]

    def stream(messages):
        parts = oc.chat(model="SmolLM2-135M-Instruct.Q4_1", messages=messages, stream=True,
                        options={"temperature": 0, "num_predict": 10})
        return "".join(p.message.content for p in parts)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # three streams on two slots
        assert list(pool.map(stream, questions)) == expected


def test_format_constrains_the_reply_to_the_schema(smol):
    _, _, oc = smol
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    out = oc.chat(model="SmolLM2-135M-Instruct.Q4_1", messages=QUESTION, format=schema,
                  options={"temperature": 0, "num_predict": 40})
    jsonschema.validate(json.loads(out.message.content), schema)
    out = oc.generate(model="SmolLM2-135M-Instruct.Q4_1", prompt="A city as JSON:", format="json",
                      options={"temperature": 0, "num_predict": 40})
    assert isinstance(json.loads(out.response), dict)


def test_embed_and_legacy_embeddings_equal_the_openai_endpoint(smol):
    import numpy as np

    _, base, oc = smol
    texts = ["The cat sat on the mat.", "Paris is in France."]
    expected = client(base).embeddings.create(model="any", input=texts)
    out = oc.embed(model="SmolLM2-135M-Instruct.Q4_1", input=texts)
    assert np.allclose(out.embeddings, [d.embedding for d in expected.data], atol=1e-6)
    assert out.prompt_eval_count == expected.usage.prompt_tokens
    legacy = np.asarray(oc.embeddings(model="SmolLM2-135M-Instruct.Q4_1", prompt=texts[0]).embedding)
    assert np.linalg.norm(legacy) > 1.5  # not normalized, as ollama's legacy endpoint
    assert np.allclose(legacy / np.linalg.norm(legacy), expected.data[0].embedding, atol=1e-6)
    cut = oc.embed(model="SmolLM2-135M-Instruct.Q4_1", input=texts[0], dimensions=8).embeddings[0]
    want = np.asarray(expected.data[0].embedding[:8])
    assert np.allclose(cut, want / np.linalg.norm(want), atol=1e-6)
    assert oc.embed(model="SmolLM2-135M-Instruct.Q4_1", input=[]).embeddings == []


@pytest.mark.parametrize("path, body, status, says", [
    ("/api/chat", {"messages": QUESTION}, 400, "model is required"),
    ("/api/chat", {"model": "llama3.2", "messages": QUESTION}, 404, "model 'llama3.2' not found"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "options": {"num_ctx": 100000}}, 400, "num_ctx"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "options": {"mirostat": 2}}, 400, "mirostat"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "options": {"top_kk": 2}}, 400, "top_kk"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "think": True}, 400, "does not support thinking"),
    ("/api/generate", {"model": "M", "prompt": "x", "think": "high"}, 400, "does not support thinking"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "think": "max"}, 400, "think"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "format": "xml"}, 400, "format"),
    ("/api/chat", {"model": "M", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400,
     "images"),
    ("/api/chat", {"model": "M", "messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
    ("/api/chat", {"model": "M", "messages": QUESTION, "stream": "yes"}, 400, "stream"),
    ("/api/generate", {"model": "M", "prompt": "x", "suffix": "y"}, 400, "suffix"),
    ("/api/generate", {"model": "M", "prompt": "x", "template": "{{ .System }} {{ .Prompt }}"}, 400, "template"),
    ("/api/generate", {"model": "M", "prompt": "x", "raw": True, "system": "s"}, 400, "raw mode"),
    ("/api/generate", {"model": "M", "prompt": "x", "context": [-1]}, 400, "context"),
    ("/api/embed", {"model": "M", "input": [1, 2]}, 400, "invalid input type"),
    ("/api/show", {"model": "gpt-4"}, 404, "not found"),
    ("/api/pull", {"model": "llama3.2"}, 400, "one model file given at startup"),
    ("/api/create", {"model": "x", "from": "y"}, 400, "one model file given at startup"),
])
def test_bad_requests_get_ollama_errors(smol, path, body, status, says):
    _, base, _ = smol
    if body.get("model") == "M":
        body = dict(body, model="SmolLM2-135M-Instruct.Q4_1:latest")
    got, _, error = request(base, "POST", path, body)
    assert got == status and set(error) == {"error"} and says in error["error"], error


def test_malformed_bodies_and_load_requests(smol):
    _, base, oc = smol
    for raw in (b"{", b"[1]", b"\xff"):
        status, _, error = request(base, "POST", "/api/chat", raw=raw)
        assert status == 400 and isinstance(error["error"], str), error
    for method, path in (("DELETE", "/api/delete"), ("POST", "/api/copy"), ("POST", "/api/push")):
        status, _, error = request(base, method, path, {"model": "x"})
        assert status == 400 and "one model file" in error["error"]
    for method, path, status in (("GET", "/api/chat", 405), ("POST", "/api/blobs/sha256:0", 404)):
        got, _, error = request(base, method, path)
        assert got == status and set(error) == {"error"}, error
    with pytest.raises(ollama.ResponseError) as caught:
        oc.chat(model="mistral", messages=QUESTION)
    assert caught.value.status_code == 404
    # an empty chat or prompt only "loads" the model, as ollama answers it
    assert request(base, "POST", "/api/chat", {"model": "SmolLM2-135M-Instruct.Q4_1", "messages": []})[2][
        "done_reason"] == "load"
    assert oc.generate(model="SmolLM2-135M-Instruct.Q4_1", prompt="").done_reason == "load"
    assert oc.generate(model="SmolLM2-135M-Instruct.Q4_1", prompt="", keep_alive=0).done_reason == "unload"
    assert oc.ps().models  # still served
    # a num_ctx that fits the slot, and options about the hardware, are accepted
    out = oc.chat(model="SmolLM2-135M-Instruct.Q4_1", messages=QUESTION, keep_alive="5m",
                  options={"num_ctx": 512, "num_gpu": 0, "num_thread": 2, "num_predict": 2, "temperature": 0})
    assert out.eval_count == 2
    # integer options written as JSON floats, as ollama's Go decoding takes them
    body = {"model": "SmolLM2-135M-Instruct.Q4_1", "messages": QUESTION, "stream": False,
            "options": {"num_predict": 3.0, "top_k": 40.0, "temperature": 0}}
    assert request(base, "POST", "/api/chat", body)[2]["eval_count"] == 3


# ---- the scripted model -----------------------------------------------------------------------------
def get_weather(city: str) -> str:
    """Weather in a city

    Args:
      city: the city
    """
    return "sunny"


def test_tool_calls_and_thinking_through_the_official_client():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    script = [call, "<think>It is sunny.</think>Sunny in Paris.", call, "<think>x</think>y"]
    with app_server(create_app(scripted_model(script), parallel=1)) as base:
        oc = ollama.Client(host=base, timeout=60)
        (name,) = [m.model for m in oc.list().models]
        assert oc.show(name).capabilities == ["completion", "thinking"]  # CHATML takes no tools
        weather = [{"role": "user", "content": "weather?"}]
        greedy = {"temperature": 0}  # the script is the model's most likely reply
        out = oc.chat(model=name, messages=weather, tools=[get_weather], stream=False, options=greedy)
        (tc,) = out.message.tool_calls
        assert tc.function.name == "get_weather" and tc.function.arguments == {"city": "Paris"}
        assert out.done_reason == "stop"
        # the reply and the tool's result go back as ollama's client sends them
        history = weather + [out.message, {"role": "tool", "tool_name": "get_weather", "content": "sunny"}]
        answer = oc.chat(model=name, messages=history, tools=[get_weather], think=True, stream=False,
                         options=greedy)
        assert answer.message.thinking == "It is sunny." and answer.message.content == "Sunny in Paris."
        parts = list(oc.chat(model=name, messages=weather, tools=[get_weather], stream=True, options=greedy))
        streamed = [(c.function.name, c.function.arguments) for p in parts for c in (p.message.tool_calls or [])]
        assert streamed == [("get_weather", {"city": "Paris"})] and parts[-1].done


def test_dropped_client_frees_its_slot():
    with app_server(create_app(slow_model(["ab" * 2000, "Hi."]), parallel=1)) as base:
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        body = {"model": "infer", "messages": [{"role": "user", "content": "go"}], "options": {"temperature": 0}}
        conn.request("POST", "/api/chat", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.readline())["done"] is False
        assert request(base, "GET", "/health")[2]["slots_processing"] == 1
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        assert wait_for(lambda: request(base, "GET", "/health")[2]["slots_idle"] == 1)
        assert metrics(base)["infer_requests_cancelled_total"] == 1
        # the slot serves the next request (the script's next turn)
        out = ollama.Client(host=base, timeout=60).chat(model="infer", messages=[{"role": "user", "content": "go"}],
                                                        options={"temperature": 0, "num_predict": 5})
        assert out.done and out.eval_count <= 5
        counted = metrics(base)
        assert counted["infer_requests_total{endpoint=/api/chat,status=200}"] == 1
        assert counted["infer_completion_tokens_total"] == out.eval_count


def test_a_stream_cut_by_the_server_stopping_ends_with_an_error_line():
    app = create_app(slow_model(["ab" * 2000]), parallel=1, shutdown_grace=0.2)
    with app_server(app) as base:
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        body = {"model": "infer", "prompt": "go", "options": {"temperature": 0}}
        conn.request("POST", "/api/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert json.loads(resp.readline())["done"] is False
        app.state.server.stop_soon()
        lines = [json.loads(line) for line in resp.read().splitlines()]  # every line is JSON
        conn.close()
        assert all(line["done"] is False for line in lines[:-1])
        assert set(lines[-1]) == {"error"} and "stopping" in lines[-1]["error"]


def test_api_key_errors_have_ollama_shape():
    with app_server(create_app(scripted_model(["Hi."] * 2), api_key="s3cret")) as base:
        status, _, error = request(base, "GET", "/api/tags")
        assert status == 401 and set(error) == {"error"} and "API key" in error["error"]
        oc = ollama.Client(host=base, headers={"Authorization": "Bearer s3cret"})
        assert [m.model for m in oc.list().models] == ["infer:latest"]


def test_generate_separates_thinking_and_returns_it_in_the_context():
    with app_server(create_app(scripted_model(["<think>hmm</think>Hi."] * 2), parallel=1)) as base:
        oc = ollama.Client(host=base, timeout=60)
        out = oc.generate(model="infer", prompt="x", think=True, options={"temperature": 0})
        assert (out.thinking, out.response, out.done_reason) == ("hmm", "Hi.", "stop")
        # the tokens of the prompt and of the reply as the model wrote it
        tok = ScriptedTokenizer()
        prompt = "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
        assert out.context == tok.encode(prompt + "<think>hmm</think>Hi.", add_special=True, parse_special=True)
        parts = list(oc.generate(model="infer", prompt="x", think=True, options={"temperature": 0}, stream=True))
        assert "".join(p.thinking or "" for p in parts) == "hmm" and "".join(p.response for p in parts) == "Hi."
        assert parts[-1].context == out.context


def test_capabilities_follow_the_template_and_the_file():
    from infer.serve.ollama import capabilities

    model = scripted_model(["Hi."])  # CHATML with <think> tokens in its vocabulary, no tools in its template
    assert capabilities(model) == ["completion", "thinking"]
    model.metadata = {"general.architecture": "llama", "llama.pooling_type": 1}  # a file made for embeddings
    assert capabilities(model) == ["completion", "embedding", "thinking"]
    tools = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
    assert capabilities(scripted_model(["Hi."], template=tools)) == ["completion", "tools", "thinking"]
