"""`infer serve` over loopback, checked with the official `openai` client.

Two kinds of server: `infer serve` itself as a subprocess on SmolLM2 (the
reference text is the same request run in this process on a plain Context, no
scheduler), and the app in this process on the scripted variant, whose replies
are known (tool calls) and whose steps can be slowed (a client dropped mid-stream,
a full queue).  /metrics is parsed with prometheus_client's own parser.
"""
import concurrent.futures
import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

for _name in ("uvicorn", "starlette", "sse_starlette", "greenlet", "openai"):
    pytest.importorskip(_name, reason=f"{_name} is not installed (the serve extra and the test extra)")

import openai  # noqa: E402
import uvicorn  # noqa: E402

from infer import api  # noqa: E402
from infer.serve.app import create_app  # noqa: E402
from scripted import GreedySampler, ScriptedContext, ScriptedTokenizer, scripted_model  # noqa: E402
from under_test import IMPORT_ROOT  # noqa: E402

parser = pytest.importorskip("prometheus_client.parser")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


# ---- servers ---------------------------------------------------------------------------------
@contextlib.contextmanager
def cli_server(*args, timeout=120):
    """`infer serve --port 0 ARGS` as a subprocess; yields (base URL, process)."""
    proc = subprocess.Popen([sys.executable, "-m", "infer", "serve", "--port", "0", *args], cwd=IMPORT_ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        line = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            if line.startswith("infer serve:"):
                break
        match = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
        assert match, f"no startup line; last: {line!r}; exit {proc.poll()}"
        proc.stderr_lines = []  # what it writes later (the pipe kept drained)
        threading.Thread(target=lambda: proc.stderr_lines.extend(proc.stderr), daemon=True).start()
        yield match.group(1), proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def app_server(app):
    """``app`` served by uvicorn on a thread of this process; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


class SlowContext(ScriptedContext):
    """A scripted context whose every forward pass takes 20 ms."""

    def _forward(self, tokens, start):
        time.sleep(0.02)
        super()._forward(tokens, start)


def slow_model(script, max_seq_len=4096):
    model = scripted_model(script, max_seq_len=max_seq_len)
    engine = model.engine
    engine.create_context = lambda n_ctx=None, sampler=None: SlowContext(
        engine, n_ctx or engine.max_seq_len, sampler or GreedySampler())
    return model


def client(base, key="none"):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)


def request(base, method, path, body=None, headers=None, raw=None):
    """(status, headers, parsed JSON or text) of one request."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = text
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed


def metrics(base):
    status, _, text = request(base, "GET", "/metrics")
    assert status == 200
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out


def assert_openai_error(body, status_code, param=None):
    assert set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str)
    if param is not None:
        assert err["param"] == param, err


# ---- SmolLM2 behind `infer serve` ----------------------------------------------------------------
@pytest.fixture(scope="module")
def smol():
    import infer

    with infer.load() as model, cli_server("--parallel", "8", "--ctx-size", "512") as (base, _):
        yield model, base


def prompts(n):
    return [[{"role": "user", "content": f"Write one sentence about the number {i}."}] for i in range(n)]


def test_model_list(smol):
    _, base = smol
    models = client(base).models.list()
    (entry,) = models.data
    assert entry.id == "SmolLM2-135M-Instruct.Q4_1.gguf" and entry.object == "model"
    assert client(base).models.retrieve(entry.id).id == entry.id
    with pytest.raises(openai.NotFoundError):
        client(base).models.retrieve("gpt-4")


def test_chat_completion_and_stream_match_the_library(smol):
    model, base = smol
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    expected = model.create_chat_completion(messages, max_tokens=24, temperature=0, context=model.create_context())
    out = client(base).chat.completions.create(model="any", messages=messages, max_tokens=24, temperature=0)
    assert out.choices[0].message.content == expected["choices"][0]["message"]["content"]
    assert out.choices[0].finish_reason == expected["choices"][0]["finish_reason"]
    assert out.usage.prompt_tokens == expected["usage"]["prompt_tokens"]
    assert out.usage.completion_tokens == expected["usage"]["completion_tokens"]
    pieces, finish, usage = [], None, None
    for chunk in client(base).chat.completions.create(model="any", messages=messages, max_tokens=24,
                                                      temperature=0, stream=True,
                                                      stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(pieces) == out.choices[0].message.content and finish == out.choices[0].finish_reason
    assert usage.completion_tokens == out.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == out.usage.prompt_tokens - 1  # the same prompt again


def test_completion_matches_generate(smol):
    from infer import generate

    model, base = smol
    gen = generate(model, "The capital of France is", max_tokens=12, temperature=0)
    expected = "".join(gen)
    out = client(base).completions.create(model="any", prompt="The capital of France is", max_tokens=12,
                                          temperature=0)
    assert out.choices[0].text == expected and out.choices[0].finish_reason == gen.finish_reason
    assert out.usage.completion_tokens == len(gen.tokens)
    streamed = "".join(c.choices[0].text for c in client(base).completions.create(
        model="any", prompt="The capital of France is", max_tokens=12, temperature=0, stream=True) if c.choices)
    assert streamed == expected


def test_sixteen_concurrent_streams_on_eight_slots(smol):
    """Exactly the text of the request alone on a fresh context.  cache_prompt=false:
    a prefix reused from another request is prefilled in a different split, which
    rounds differently in this runtime as in llama.cpp (its docs say the same)."""
    model, base = smol
    requests = prompts(16)
    expected = [model.create_chat_completion(m, max_tokens=16, temperature=0, context=model.create_context())
                ["choices"][0]["message"]["content"] for m in requests]
    before = metrics(base)
    api_client = client(base)

    def stream(messages):
        pieces, usage = [], None
        for chunk in api_client.chat.completions.create(model="any", messages=messages, max_tokens=16,
                                                        temperature=0, stream=True,
                                                        stream_options={"include_usage": True},
                                                        extra_body={"cache_prompt": False}):
            if chunk.usage is not None:
                usage = chunk.usage
            pieces += [c.delta.content or "" for c in chunk.choices]
        return "".join(pieces), usage.completion_tokens

    def bad(i):  # bad requests mixed in must not disturb the others
        return request(base, "POST", "/v1/chat/completions",
                    {"messages": requests[0], "max_tokens": "many"} if i % 2 else
                    {"messages": [{"role": "user", "content": "word " * 600}]})[0]

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        streams = [pool.submit(stream, m) for m in requests]
        bads = [pool.submit(bad, i) for i in range(4)]
        results = [f.result(timeout=600) for f in streams]
        assert [f.result(timeout=60) for f in bads] == [400] * 4
    assert [text for text, _ in results] == expected
    after = metrics(base)
    key = "infer_requests_total{endpoint=/v1/chat/completions,status=200}"
    assert after[key] - before.get(key, 0) == 16
    key400 = "infer_requests_total{endpoint=/v1/chat/completions,status=400}"
    assert after[key400] - before.get(key400, 0) == 4
    generated = sum(n for _, n in results)
    assert after["infer_completion_tokens_total"] - before["infer_completion_tokens_total"] == generated
    assert after["infer_tokens_decoded_total"] - before["infer_tokens_decoded_total"] == generated
    assert after["infer_time_to_first_token_seconds_count"] - before["infer_time_to_first_token_seconds_count"] == 16
    # the steps really were shared: fewer decode steps than tokens
    steps = after["infer_decode_steps_total"] - before["infer_decode_steps_total"]
    assert steps < generated / 2
    assert after["infer_slots_busy"] == 0 and after["infer_queue_depth"] == 0


def test_seeded_streams_ending_on_stop_strings_match_the_library(smol):
    """Concurrent seeded (non-greedy) streams, each ended by a stop string: the
    scheduler has decoded a token ahead of each end, and takes it back (cache and
    RNG), so each gets exactly the text of the same request alone in this process."""
    model, base = smol
    requests = prompts(6)
    options = dict(max_tokens=40, temperature=0.9, top_k=40, stop=[" the", "."])
    expected = [model.create_chat_completion(m, seed=i, context=model.create_context(), **options)
                ["choices"][0] for i, m in enumerate(requests)]
    assert sum(e["finish_reason"] == "stop" for e in expected) >= 3  # the stop strings do end replies
    before = metrics(base)
    api_client = client(base)

    def stream(i):
        pieces, finish = [], None
        for chunk in api_client.chat.completions.create(
                model="any", messages=requests[i], stream=True, seed=i, max_tokens=40, temperature=0.9,
                stop=[" the", "."], extra_body={"top_k": 40, "cache_prompt": False}):
            for c in chunk.choices:
                pieces.append(c.delta.content or "")
                finish = c.finish_reason or finish
        return "".join(pieces), finish

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(stream, range(6)))
    assert results == [(e["message"]["content"], e["finish_reason"]) for e in expected]
    after = metrics(base)
    assert after["infer_tokens_discarded_total"] > before["infer_tokens_discarded_total"]


def test_a_completion_without_max_tokens_stops_at_16_and_decodes_no_token_beyond(smol):
    """OpenAI's default max_tokens for completions is 16: the scheduler must not
    decode a 17th token ahead and throw it away."""
    _, base = smol
    before = metrics(base)["infer_tokens_discarded_total"]
    out = client(base).completions.create(model="m", prompt="Once upon a time", temperature=0,
                                          logit_bias={"0": -100, "2": -100})
    assert out.usage.completion_tokens == 16 and out.choices[0].finish_reason == "length"
    assert metrics(base)["infer_tokens_discarded_total"] == before


def test_bad_requests_get_openai_errors(smol):
    _, base = smol
    status, _, body = request(base, "POST", "/v1/chat/completions", raw=b"{not json")
    assert status == 400
    assert_openai_error(body, 400)
    # NaN and Infinity are Python's, not JSON's (RFC 8259): a schema holding one once came
    # back as a 500 when the reply echoed it
    for raw in (b'{"prompt": "x", "n_predict": 2, "json_schema": {"a": NaN}}',
                b'{"prompt": "x", "temperature": -Infinity}'):
        status, _, body = request(base, "POST", "/completion", raw=raw)
        assert status == 400 and "not a JSON value" in body["error"]["message"], body
    with pytest.raises(openai.BadRequestError) as info:
        client(base).chat.completions.create(model="any", messages=prompts(1)[0], temperature="hot")
    assert info.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as info:
        client(base).chat.completions.create(model="any", messages=prompts(1)[0], max_tokens=100000)
    assert info.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as info:  # 600 words do not fit in 512 tokens
        client(base).chat.completions.create(model="any", messages=[{"role": "user", "content": "word " * 600}])
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="unrecognized request argument"):
        client(base).chat.completions.create(model="any", messages=prompts(1)[0], extra_body={"bogus": 1})
    with pytest.raises(openai.BadRequestError, match="not supported"):
        client(base).completions.create(model="any", prompt="def f(", suffix=")")
    with pytest.raises(openai.BadRequestError) as info:
        client(base).chat.completions.create(model="any", messages=prompts(1)[0],
                                             response_format={"type": "json_schema",
                                                              "json_schema": {"name": "x", "schema": {"type": 7}}})
    assert info.value.param == "response_format"
    status, _, body = request(base, "POST", "/v1/completions", {"prompt": 3})
    assert status == 400 and body["error"]["param"] == "prompt"
    status, _, body = request(base, "GET", "/v1/nowhere")
    assert status == 404 and "error" in body
    assert request(base, "GET", "/health")[2]["status"] == "ok"
    assert request(base, "GET", "/v1/health")[2]["status"] == "ok"  # llama-server's other spelling


def test_structured_output_and_logprobs_through_the_official_client(smol):
    """response_format, tool_choice and logprobs/top_logprobs on the real server;
    outputs validated with `jsonschema`, logprobs in OpenAI's shape."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("llguidance")
    _, base = smol
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    out = client(base).chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Name a city in France as JSON."}], temperature=0,
        max_tokens=40, response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        logprobs=True, top_logprobs=2)
    choice = out.choices[0]
    jsonschema.validate(json.loads(choice.message.content), schema)
    content = choice.logprobs.content
    # at most 2 alternatives: tokens the grammar forbids (logprob -inf) are not listed
    assert content and all(1 <= len(e.top_logprobs) <= 2 and e.logprob <= 0 for e in content)
    assert "".join(e.token for e in content) == choice.message.content
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
               "required": ["city"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather}}]
    out = client(base).chat.completions.create(
        model="any", messages=[{"role": "user", "content": "Weather in Paris?"}], temperature=0, max_tokens=60,
        tools=tools, tool_choice="required")
    (call,) = out.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), weather)


def test_streamed_logprobs_come_with_the_chunk_that_carries_their_token(smol):
    """OpenAI's (and llama-server's) stream shape: each chunk's logprobs are those of
    the tokens whose text it carries, read here by the official client; together they
    are the non-streamed request's logprobs."""
    _, base = smol
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    args = dict(model="any", messages=messages, max_tokens=20, temperature=0, logprobs=True, top_logprobs=2)
    whole = client(base).chat.completions.create(**args).choices[0]
    text, tokens, carrying = "", [], 0
    for chunk in client(base).chat.completions.create(**args, stream=True):
        for c in chunk.choices:
            entries = c.logprobs.content if c.logprobs is not None and c.logprobs.content else []
            tokens += entries
            text += c.delta.content or ""
            carrying += bool(c.delta.content and entries)
            # a token's text never comes before its logprob does
            assert "".join(e.token for e in tokens).startswith(text)
    assert carrying >= 5  # per chunk, not all in the last one
    assert text == whole.message.content
    assert [e.token for e in tokens] == [e.token for e in whole.logprobs.content]
    assert [e.logprob for e in tokens] == pytest.approx([e.logprob for e in whole.logprobs.content], abs=1e-4)
    assert all(len(e.top_logprobs) == 2 for e in tokens)

    # the legacy completions stream: tokens, token_logprobs and text_offset per chunk
    args = dict(model="any", prompt="The capital of France is", max_tokens=12, temperature=0, logprobs=2)
    whole = client(base).completions.create(**args).choices[0].logprobs
    streamed = {"tokens": [], "token_logprobs": [], "text_offset": []}
    carrying = 0
    for chunk in client(base).completions.create(**args, stream=True):
        for c in chunk.choices:
            if c.logprobs is not None:
                for key in streamed:
                    streamed[key] += getattr(c.logprobs, key)
                carrying += bool(c.text and c.logprobs.tokens)
    assert carrying >= 5
    assert streamed["tokens"] == whole.tokens and streamed["text_offset"] == whole.text_offset
    assert streamed["token_logprobs"] == pytest.approx(whole.token_logprobs, abs=1e-4)


def test_embeddings_through_the_official_client(smol):
    import numpy as np

    model, base = smol
    texts = ["A cat sits on the mat.", "Stocks fell today."]
    out = client(base).embeddings.create(model="any", input=texts)
    assert [d.index for d in out.data] == [0, 1] and out.usage.prompt_tokens > 0
    np.testing.assert_allclose(np.array([d.embedding for d in out.data]), model.embed(texts), atol=1e-6)
    # the client asks for base64 unless told otherwise (and decodes it); "float" is the JSON list
    floats = client(base).embeddings.create(model="any", input=texts[0], encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, model.embed(texts[0]), atol=1e-6)
    with pytest.raises(openai.BadRequestError):
        client(base).embeddings.create(model="any", input=[])


def test_embeddings_of_token_ids_through_the_official_client(smol):
    # OpenAI takes token ids too (one list, or a list of lists), and LangChain's
    # OpenAIEmbeddings sends them by default
    import numpy as np

    model, base = smol
    ids = [model.tokenizer.encode(t) for t in ("A cat sits on the mat.", "Stocks fell today.")]
    many = client(base).embeddings.create(model="any", input=ids, encoding_format="float")
    np.testing.assert_allclose(np.array([d.embedding for d in many.data]), model.embed(ids), atol=1e-6)
    assert many.usage.prompt_tokens == sum(map(len, ids))
    one = client(base).embeddings.create(model="any", input=ids[1], encoding_format="float")
    assert len(one.data) == 1
    np.testing.assert_allclose(one.data[0].embedding, many.data[1].embedding, atol=1e-6)
    with pytest.raises(openai.BadRequestError) as info:
        client(base).embeddings.create(model="any", input=[[1, 10 ** 9]])
    assert info.value.body["param"] == "input" and "outside the vocabulary" in info.value.body["message"]


# ---- the scripted model in this process ---------------------------------------------------------
def test_tool_call_through_the_official_client():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    with app_server(create_app(scripted_model([call] * 4), parallel=2)) as base:
        out = client(base).chat.completions.create(model="m", messages=[{"role": "user", "content": "weather?"}],
                                                   tools=TOOLS, temperature=0)
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls"
        (tc,) = choice.message.tool_calls
        assert tc.type == "function" and tc.function.name == "get_weather"
        assert json.loads(tc.function.arguments) == {"city": "Paris"}
        streamed = [tc for chunk in client(base).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, temperature=0,
            stream=True) for c in chunk.choices for tc in (c.delta.tool_calls or [])]
        assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in streamed] == \
            [("get_weather", {"city": "Paris"})]


def open_stream(base, max_tokens=1000, headers=None, path="/v1/chat/completions", body=None):
    """A raw streaming request (a chat completion unless ``path`` and ``body`` say
    otherwise); returns the connection once the first event arrived."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = body or {"messages": [{"role": "user", "content": "go"}], "stream": True, "max_tokens": max_tokens,
                    "temperature": 0}
    conn.request("POST", path, body=json.dumps(body),
                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.fp.readline().startswith(b"data:"):
        pass
    return conn, resp


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def dropped_stream_frees_its_slot(path="/v1/chat/completions", body=None):
    """A stream whose client goes away (the scripted model, 20 ms a step: its reply would
    take 80 s) frees the only slot, is counted as cancelled, and the slot serves the
    next chat completion, which this returns."""
    with app_server(create_app(slow_model(["ab" * 2000, "Hi."]), parallel=1, max_queue=0)) as base:
        conn, resp = open_stream(base, path=path, body=body)
        assert resp.getheader("content-type").startswith("text/event-stream")
        assert request(base, "GET", "/health")[2]["slots_processing"] == 1
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        assert wait_for(lambda: request(base, "GET", "/health")[2]["slots_idle"] == 1)
        assert metrics(base)["infer_requests_cancelled_total"] == 1
        return client(base).chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                                    max_tokens=5, temperature=0)


def test_dropped_client_frees_its_slot():
    out = dropped_stream_frees_its_slot()
    # the slot serves the next request (the script's next turn)
    assert out.choices[0].finish_reason in ("stop", "length")


def test_client_dropped_while_queued_leaves_the_queue():
    """A request waiting for the only slot (its greenlet paused in the queue) whose
    client goes away leaves the queue at once, without taking the slot; the next
    request gets the slot once it is free, with the library's reply."""
    script = ["ab" * 2000, "Hi."]
    messages = [{"role": "user", "content": "go"}]
    expected = api.create_chat_completion(slow_model(script), messages, max_tokens=5, temperature=0)
    with app_server(create_app(slow_model(script), parallel=1, max_queue=2)) as base:
        conn, _ = open_stream(base)
        host, port = base.removeprefix("http://").split(":")
        queued = http.client.HTTPConnection(host, int(port), timeout=60)
        queued.request("POST", "/v1/chat/completions", body=json.dumps({"messages": messages, "max_tokens": 5}),
                       headers={"Content-Type": "application/json"})
        assert wait_for(lambda: metrics(base)["infer_queue_depth"] == 1)
        queued.sock.shutdown(socket.SHUT_RDWR)
        queued.close()
        assert wait_for(lambda: metrics(base)["infer_queue_depth"] == 0)
        assert metrics(base)["infer_requests_cancelled_total"] == 1
        assert request(base, "GET", "/health")[2]["slots_processing"] == 1  # the stream goes on
        conn.close()
        assert wait_for(lambda: request(base, "GET", "/health")[2]["slots_idle"] == 1)
        out = client(base).chat.completions.create(model="m", messages=messages, max_tokens=5, temperature=0)
        assert out.choices[0].message.content == expected["choices"][0]["message"]["content"]
        assert out.usage.completion_tokens == expected["usage"]["completion_tokens"] == 5


def test_full_queue_is_503_with_retry_after():
    with app_server(create_app(slow_model(["ab" * 2000] * 3), parallel=1, max_queue=1)) as base:
        conn, _ = open_stream(base)
        waiting = concurrent.futures.ThreadPoolExecutor(1).submit(
            request, base, "POST", "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
        assert wait_for(lambda: metrics(base)["infer_queue_depth"] == 1)
        status, headers, body = request(base, "POST", "/v1/chat/completions",
                                     {"messages": [{"role": "user", "content": "y"}]})
        assert status == 503 and headers["retry-after"] == "1"
        assert_openai_error(body, 503)
        with pytest.raises(openai.APIStatusError) as info:
            client(base).completions.create(model="m", prompt="z")
        assert info.value.status_code == 503
        conn.close()
        assert waiting.result(timeout=60)[0] == 200  # the queued one ran once the slot was free
        assert metrics(base)["infer_requests_rejected_total"] == 2


# Long replies: the end-of-turn and end-of-text tokens barred (SmolLM2's ids 2 and 0).
ENDLESS = {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 4000,
           "temperature": 0, "logit_bias": {"0": -100, "2": -100}}


def stream_in_thread(base, received, ended):
    """Stream ENDLESS through the official client on a thread: the time of each chunk
    into ``received``, how it ended (None, or the exception) into ``ended``."""
    def run():
        try:
            for _ in client(base).chat.completions.create(model="m", stream=True, **ENDLESS):
                received.append(time.monotonic())
            ended.append(None)
        except openai.APIError as exc:
            ended.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_refuses_the_queue_and_lets_running_streams_go_on_for_the_grace():
    """Ctrl-C on `infer serve`: the requests waiting for a slot get 503 with
    Retry-After at once (the official client may retry elsewhere), the running
    stream goes on and, still running after the grace, ends with an error event;
    the process then exits as interrupted (130)."""
    from infer.serve.app import SHUTDOWN_GRACE

    with cli_server("--parallel", "1", "--ctx-size", "4096") as (base, proc):
        received, ended = [], []
        runner = stream_in_thread(base, received, ended)
        assert wait_for(lambda: len(received) > 1)
        pool = concurrent.futures.ThreadPoolExecutor(2)
        queued = [pool.submit(request, base, "POST", "/v1/chat/completions", dict(ENDLESS, max_tokens=5)),
                  pool.submit(lambda: client(base).completions.create(model="m", prompt="Once", max_tokens=5,
                                                                     stream=True).response.status_code)]
        assert wait_for(lambda: metrics(base)["infer_queue_depth"] == 2)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status, headers, body = queued[0].result(timeout=30)
        assert status == 503 and headers["retry-after"] == "1"
        assert_openai_error(body, 503)
        assert body["error"]["code"] == "server_stopping"
        with pytest.raises(openai.APIStatusError) as info:
            queued[1].result(timeout=30)
        assert info.value.status_code == 503 and info.value.body["code"] == "server_stopping"
        assert proc.wait(timeout=SHUTDOWN_GRACE + 30) == 130
        runner.join(timeout=30)
        assert received[-1] > signalled  # it went on after Ctrl-C
        (end,) = ended
        assert isinstance(end, openai.APIError) and end.body["code"] == "server_stopping"
        assert any(line.startswith("infer serve: stopping") for line in proc.stderr_lines)


def test_a_second_ctrl_c_stops_at_once_without_tracebacks():
    with cli_server("--parallel", "1", "--ctx-size", "4096") as (base, proc):
        received, ended = [], []
        runner = stream_in_thread(base, received, ended)
        assert wait_for(lambda: len(received) > 1)
        proc.send_signal(signal.SIGINT)
        assert wait_for(lambda: any(line.startswith("infer serve: stopping") for line in proc.stderr_lines))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        runner.join(timeout=30)
        assert len(ended) == 1 and ended[0] is not None  # cut short
        time.sleep(0.2)  # the drain thread reads the last lines
        assert proc.stderr_lines[-1] == "infer serve: stopped\n"
        assert not any("Traceback" in line for line in proc.stderr_lines), "".join(proc.stderr_lines)


def test_api_key_is_required_but_not_for_health():
    with app_server(create_app(scripted_model(["Hi."] * 3), api_key="s3cret")) as base:
        with pytest.raises(openai.AuthenticationError):
            client(base).models.list()
        with pytest.raises(openai.AuthenticationError):
            client(base, "wrong").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        status, _, body = request(base, "GET", "/metrics")
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        assert request(base, "GET", "/health")[0] == 200
        out = client(base, "s3cret").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                             temperature=0)
        assert out.choices[0].message.content == "Hi."


def test_cors_is_off_by_default_and_on_when_asked():
    preflight = {"Origin": "http://example.test", "Access-Control-Request-Method": "POST"}
    with app_server(create_app(scripted_model(["Hi."]))) as base:
        _, headers, _ = request(base, "OPTIONS", "/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in headers
    with app_server(create_app(scripted_model(["Hi."]), cors_origins=["http://example.test"])) as base:
        status, headers, _ = request(base, "OPTIONS", "/v1/chat/completions", headers=preflight)
        assert status == 200
        assert headers["access-control-allow-origin"] == "http://example.test"


def test_cli_rejects_bad_options():
    out = subprocess.run([sys.executable, "-m", "infer", "serve", "--parallel", "0"], cwd=IMPORT_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--parallel: must be >= 1" in out.stderr


MOOD_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "<|im_start|>assistant\n{% if mood is defined %}I am {{ mood }}. {% endif %}")


def test_chat_template_kwargs_from_the_command_line(smol, tmp_path):
    """llama-server's --chat-template-kwargs: every chat request renders with them, a
    request's own chat_template_kwargs win key by key.  The reference is the prompt
    written out by hand, continued greedily by create_completion in this process."""
    model, _ = smol
    path = tmp_path / "mood.jinja"
    path.write_text(MOOD_TEMPLATE, encoding="utf-8")
    turn = "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n"

    def by_hand(mood):
        return model.create_completion(turn + f"I am {mood}. ", max_tokens=6, temperature=0,
                                       context=model.create_context())["choices"][0]["text"]
    messages = [{"role": "user", "content": "How are you?"}]
    with cli_server("--chat-template-file", str(path), "--chat-template-kwargs", '{"mood": "happy"}') as (base, _):
        default = client(base).chat.completions.create(model="any", messages=messages, max_tokens=6, temperature=0)
        own = client(base).chat.completions.create(model="any", messages=messages, max_tokens=6, temperature=0,
                                                   extra_body={"chat_template_kwargs": {"mood": "sad"}})
    assert default.choices[0].message.content == by_hand("happy") != by_hand("sad")
    assert own.choices[0].message.content == by_hand("sad")
    bad = subprocess.run([sys.executable, "-m", "infer", "serve", "--chat-template-kwargs", '["x"]'],
                         cwd=IMPORT_ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--chat-template-kwargs: expected a JSON object, got list" in bad.stderr


def test_malformed_bodies():
    with app_server(create_app(scripted_model(["Hi."]))) as base:
        for raw in (b"[1, 2]", b"\xff\xfe", b"[" * 100000 + b"]" * 100000):
            status, _, body = request(base, "POST", "/v1/chat/completions", raw=raw)
            assert status == 400
            assert_openai_error(body, 400)
        status, _, body = request(base, "POST", "/v1/completions", raw=b" " * (17 << 20))
        assert status == 413
        status, _, body = request(base, "POST", "/v1/completions", {"model": 3, "prompt": "x"})
        assert status == 400 and body["error"]["param"] == "model"
        status, _, body = request(base, "POST", "/v1/chat/completions", {"model": "m"})
        assert status == 400 and body["error"]["param"] == "messages"
        # the server still answers
        status, _, body = request(base, "POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "x"}], "temperature": 0})
        assert status == 200 and body["choices"][0]["message"]["content"] == "Hi."


def test_malformed_tool_calls_in_history_are_400_not_500():
    """An assistant message's tool call without a function name (a client's mistake)
    is the client's error, in OpenAI's shape naming `messages`; the server goes on."""
    with app_server(create_app(scripted_model(["Hi."] * 8))) as base:
        for calls in ([{"id": "call_1"}], [{"id": "call_1", "type": "function", "function": "get_weather"}],
                      [{"id": "call_1", "type": "function", "function": {"arguments": "{}"}}],
                      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}):
            messages = [{"role": "user", "content": "weather?"},
                        {"role": "assistant", "content": None, "tool_calls": calls},
                        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
            for stream in (False, True):
                status, _, body = request(base, "POST", "/v1/chat/completions",
                                          {"messages": messages, "tools": TOOLS, "stream": stream})
                assert status == 400, body
                assert_openai_error(body, 400, param="messages")
                assert "tool_calls: expected" in body["error"]["message"]
                if isinstance(calls, dict):  # one call, not in a list: not read as its keys
                    assert "a list" in body["error"]["message"], body
        out = client(base).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                   temperature=0)
        assert out.choices[0].message.content == "Hi."


def test_openai_fields_that_do_not_change_the_reply_are_accepted():
    """Fields of OpenAI's chat request that only label, log or route it (metadata, store,
    service_tier, prompt_cache_key, safety_identifier, stream_options.include_obfuscation)
    are accepted, as llama-server accepts them, and the reply is the same; a wrong type
    is still a 400 naming the field."""
    with app_server(create_app(scripted_model(["Hi."] * 8))) as base:
        messages = [{"role": "user", "content": "x"}]
        out = client(base).chat.completions.create(
            model="m", messages=messages, temperature=0, metadata={"session": "42"}, store=False,
            service_tier="auto", prompt_cache_key="conversation-42", safety_identifier="user-hash", user="u")
        assert out.choices[0].message.content == "Hi."
        chunks = list(client(base).chat.completions.create(
            model="m", messages=messages, temperature=0, stream=True, store=True,
            stream_options={"include_usage": True, "include_obfuscation": False}))
        assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == "Hi."
        assert chunks[-1].usage.completion_tokens > 0
        for field, value in (("metadata", "x"), ("metadata", {"k": 1}), ("store", "yes"), ("service_tier", 1),
                             ("prompt_cache_key", 1), ("safety_identifier", ["a"])):
            status, _, body = request(base, "POST", "/v1/chat/completions", {"messages": messages, field: value})
            assert status == 400, (field, body)
            assert_openai_error(body, 400, param=field)
        status, _, body = request(base, "POST", "/v1/chat/completions",
                                  {"messages": messages, "stream": True,
                                   "stream_options": {"include_obfuscation": "no"}})
        assert status == 400 and "include_obfuscation" in body["error"]["message"], body


def test_api_key_scheme_is_case_insensitive():
    """RFC 7235 (2.1): the auth-scheme is case-insensitive, so 'bearer KEY' is the key too;
    the key itself is compared exactly."""
    with app_server(create_app(scripted_model(["Hi."] * 3), api_key="s3cret")) as base:
        for header, expected in (("bearer s3cret", 200), ("BEARER s3cret", 200), ("Bearer s3cret", 200),
                                 ("Bearer S3CRET", 401), ("Basic s3cret", 401), ("s3cret", 401),
                                 ("bearer", 401), ("Bearer  s3cret", 401)):
            status, _, body = request(base, "GET", "/v1/models", headers={"Authorization": header})
            assert status == expected, header
            if status == 401:
                assert_openai_error(body, 401)
                assert body["error"]["code"] == "invalid_api_key"


def test_malformed_embedding_bodies_are_checked_as_the_completions_are():
    """/v1/embeddings reads its body through the same checks as the completions: a body
    past the limit is a 413 without being read whole, one nested too deeply a 400 (not a
    500), and a field that is not the endpoint's a 400 naming it."""
    with app_server(create_app(scripted_model(["Hi."]))) as base:
        status, _, body = request(base, "POST", "/v1/embeddings", raw=b"[" * 100000 + b"]" * 100000)
        assert status == 400
        assert_openai_error(body, 400)
        status, _, body = request(base, "POST", "/v1/embeddings", raw=b" " * (17 << 20))
        assert status == 413
        assert_openai_error(body, 413)
        for fields, param in (({"model": 3}, "model"), ({"model_name": "x"}, "model_name"),
                              ({"context": 1}, "context"), ({"ignored": 1}, "ignored"), ({}, "input")):
            status, _, body = request(base, "POST", "/v1/embeddings", dict({"input": "hi"}, **fields)
                                      if param != "input" else {"model": "m"})
            assert status == 400, (fields, body)
            assert_openai_error(body, 400, param=param)
        assert request(base, "GET", "/health")[0] == 200


class SlowPromptPassContext(ScriptedContext):
    """A scripted context whose all-logits prefill (the echoed prompt's logprobs) takes 1.5 s."""

    def prefill(self, tokens, all_logits=False, **kwargs):
        if all_logits:
            time.sleep(1.5)
        return super().prefill(tokens, all_logits=all_logits, **kwargs)


def test_echoed_prompt_logprobs_do_not_hold_up_the_event_loop():
    """`echo` with `logprobs` runs one all-logits pass over the prompt outside the scheduler;
    run on the event loop's thread, it stalled every other stream and /health for as long
    (4.6 s for 900 tokens of SmolLM2 beside a stream whose tokens came every 9 ms)."""
    model = scripted_model(["Hello world"] * 4)
    engine = model.engine
    engine.create_context = lambda n_ctx=None, sampler=None: SlowPromptPassContext(
        engine, n_ctx or engine.max_seq_len, sampler or GreedySampler())
    with app_server(create_app(model, parallel=2)) as base:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            echoed = pool.submit(client(base).completions.create, model="m", prompt="Hello world", max_tokens=2,
                                 temperature=0, echo=True, logprobs=1)
            time.sleep(0.3)
            status, _, _ = request(base, "GET", "/health")
            health_seconds = time.monotonic() - started - 0.3
            out = echoed.result(timeout=60)
        assert status == 200 and health_seconds < 0.8, health_seconds
        choice = out.choices[0]
        assert choice.text.startswith("Hello world") and choice.logprobs.token_logprobs[0] is None


class SlowLongTextTokenizer(ScriptedTokenizer):
    """Takes 1.5 s to encode a text of 100 000 characters or more (infer's BPE takes about
    1 s per million characters, and a body may carry 16 MB)."""

    def encode(self, text, add_special=True, parse_special=False):
        if len(text) >= 100_000:
            time.sleep(1.5)
        return super().encode(text, add_special, parse_special)


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_tokenizing_a_long_prompt_does_not_hold_up_the_event_loop(endpoint):
    """A prompt's text is tokenized before the server knows it does not fit; on the event
    loop's thread a 2 MB prompt stopped every other stream for 1.8 s (on SmolLM2), and
    one of 16 MB, the largest body, would for about 15 s."""
    model = scripted_model(["Hello world"] * 4, tokenizer=SlowLongTextTokenizer())
    text = "ab " * 40_000
    body = ({"messages": [{"role": "user", "content": text}]} if endpoint == "/v1/chat/completions"
            else {"prompt": text})
    with app_server(create_app(model, parallel=2, ctx_size=512)) as base:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            long_one = pool.submit(request, base, "POST", endpoint, body)
            time.sleep(0.3)
            status, _, _ = request(base, "GET", "/health")
            health_seconds = time.monotonic() - started - 0.3
            long_status, _, long_body = long_one.result(timeout=60)
        assert status == 200 and health_seconds < 0.8, health_seconds
        assert long_status == 400 and long_body["error"]["code"] == "context_length_exceeded", long_body


def test_completions_take_llama_server_grammar_and_json_schema(smol):
    """llama-server's /v1/completions fields `grammar` (GBNF) and `json_schema` constrain
    the completion (they were a 400 'unrecognized request argument'); outputs checked by
    hand and with `jsonschema`; a bad grammar is a 400 naming its field."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("llguidance")
    _, base = smol
    out = client(base).completions.create(model="m", prompt="Is the sky blue? Answer:", max_tokens=8, temperature=0,
                                          n=2, seed=1, extra_body={"grammar": 'root ::= " " ("yes" | "no")'})
    assert [c.text for c in out.choices] in ([" yes"] * 2, [" no"] * 2) and out.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
              "required": ["city"], "additionalProperties": False}
    for stream in (False, True):
        out = client(base).completions.create(model="m", prompt="The capital of France as JSON:", max_tokens=30,
                                              temperature=0, stream=stream, extra_body={"json_schema": schema})
        text = "".join(c.choices[0].text for c in out if c.choices) if stream else out.choices[0].text
        jsonschema.validate(json.loads(text), schema)
    for fields, param in (({"grammar": "root ::= ("}, "grammar"), ({"json_schema": {"type": 7}}, "json_schema"),
                          ({"grammar": 'root ::= "a"', "json_schema": {}}, "json_schema"), ({"grammar": 5}, "grammar")):
        status, _, body = request(base, "POST", "/v1/completions", dict({"prompt": "x"}, **fields))
        assert status == 400, (fields, body)
        assert_openai_error(body, 400, param=param)
