"""OpenAI's Responses API and Anthropic's Messages API in `infer serve`
(infer/serve/responses.py, infer/serve/anthropic_messages.py).

The references: the official `openai` client (``client.responses``) and `anthropic`
client (``client.messages``), which parse every response and event into their own
models; the same conversation through ``/v1/chat/completions`` on the same server
(a greedy reply's text, its usage and tool calls must agree); `jsonschema` for tool
arguments and structured output; and the event sequences of the two APIs' streaming
documentation, written out below.  SmolLM2 serves the greedy checks (one server for
the module, a dozen tokens a request); the scripted model, whose replies are known,
serves thinking, the API key and the error paths.
"""
import json

import pytest

for _name in ("uvicorn", "starlette", "sse_starlette", "greenlet", "openai", "anthropic", "jsonschema"):
    pytest.importorskip(_name, reason=f"{_name} is not installed (the serve extra and the test extra)")

import anthropic  # noqa: E402
import jsonschema  # noqa: E402
import openai  # noqa: E402
from scripted import scripted_model  # noqa: E402
from test_serve import app_server, client, dropped_stream_frees_its_slot, metrics, request  # noqa: E402

from infer.serve.app import create_app  # noqa: E402

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
QUESTION = "What is the weather in Paris?"
GREEDY = {"temperature": 0}  # the anthropic client has no temperature argument of its own


@pytest.fixture(scope="module")
def smol():
    import infer

    with infer.load() as model, app_server(create_app(model, parallel=2, ctx_size=512)) as base:
        yield base


def anthropic_client(base, key="none"):
    return anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=120)


def chat(base, messages, max_tokens, **options):
    """The same conversation through /v1/chat/completions, greedy."""
    return client(base).chat.completions.create(model="m", messages=messages, max_tokens=max_tokens,
                                                temperature=0, **options)


# ---- /v1/responses ------------------------------------------------------------------------------
def test_response_text_equals_chat_completions_and_the_stream_equals_the_response(smol):
    oc = client(smol)
    expected = chat(smol, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}], 12)
    out = oc.responses.create(model="m", instructions="Be brief.", input="Say hi", max_output_tokens=12,
                              temperature=0)
    assert out.id.startswith("resp_") and out.object == "response"
    assert out.output_text == expected.choices[0].message.content
    (item,) = out.output
    assert item.type == "message" and item.id.startswith("msg_") and item.role == "assistant"
    # 12 tokens cut it (finish_reason "length"): OpenAI's incomplete response
    assert expected.choices[0].finish_reason == "length"
    assert out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens"
    assert item.status == "incomplete"
    assert out.usage.input_tokens == expected.usage.prompt_tokens
    assert out.usage.output_tokens == expected.usage.completion_tokens == 12
    assert out.usage.total_tokens == out.usage.input_tokens + out.usage.output_tokens
    count = oc.responses.input_tokens.count(model="m", instructions="Be brief.", input="Say hi")
    assert count.input_tokens == expected.usage.prompt_tokens

    events = list(oc.responses.create(model="m", instructions="Be brief.", input="Say hi", max_output_tokens=12,
                                      temperature=0, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    # OpenAI's order of events for one message item (the Responses streaming guide)
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + ["response.output_text.delta"] * deltas + [
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.incomplete"]
    assert events[0].response.status == "in_progress" and events[0].response.id == events[-1].response.id
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == out.output_text == events[-1].response.output_text
    assert events[-4].text == text and events[-1].response.usage.output_tokens == 12
    assert events[-2].item.status == "incomplete"
    assert len({e.item_id for e in events if hasattr(e, "item_id")}) == 1


def test_response_function_call_round_trip(smol):
    oc = client(smol)
    tool = {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}
    out = oc.responses.create(model="m", input=QUESTION, tools=[tool], tool_choice="required",
                              max_output_tokens=40, temperature=0)
    (call,) = out.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    arguments = json.loads(call.arguments)
    jsonschema.validate(arguments, WEATHER)
    chat_tools = [{"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")}}]
    expected = chat(smol, [{"role": "user", "content": QUESTION}], 40, tool_choice="required", tools=chat_tools)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in expected.choices[0].message.tool_calls] \
        == [("get_weather", arguments)]

    # the call and its output given back: the answer, as chat completions gives it
    history = [{"role": "user", "content": QUESTION},
               {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}]
    answer = oc.responses.create(model="m", input=history, tools=[tool], max_output_tokens=16, temperature=0)
    expected = chat(smol, [{"role": "user", "content": QUESTION},
                           {"role": "assistant", "content": "", "tool_calls": [
                               {"id": call.call_id, "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments}}]},
                           {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"}], 16,
                    tools=chat_tools)
    assert answer.output_text == expected.choices[0].message.content and answer.output_text

    streamed = list(oc.responses.create(model="m", input=QUESTION, tools=[tool], max_output_tokens=40,
                                        tool_choice={"type": "function", "name": "get_weather"}, temperature=0,
                                        stream=True))
    kinds = [e.type for e in streamed]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    done = streamed[-2].item
    assert done.type == "function_call" and done.name == "get_weather"
    assert json.loads(done.arguments) == arguments == json.loads(streamed[3].delta)
    assert streamed[-1].response.output[0].call_id == done.call_id


def test_response_text_format_json_schema(smol):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    out = client(smol).responses.create(
        model="m", input="Give me a person.", max_output_tokens=40, temperature=0,
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
    assert out.status == "completed"
    jsonschema.validate(json.loads(out.output_text), schema)


def test_responses_refuse_what_they_cannot_honour(smol):
    oc = client(smol)
    cases = [
        (dict(input="x", previous_response_id="resp_1"), "previous_response_id"),
        (dict(input="x", store=True), "store"),
        (dict(input=[{"type": "item_reference", "id": "x"}]), "input"),
        (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]), "input"),
        (dict(input="x", tools=[{"type": "web_search"}]), "tools"),
        (dict(input="x", max_output_tokens="ten"), "max_output_tokens"),
        (dict(input="x", text={"format": {"type": "json_schema", "name": "n", "schema": "nope"}}), "text"),
    ]
    for options, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            oc.responses.create(model="m", **options)
        assert info.value.status_code == 400 and info.value.body["param"] == param, (options, info.value.body)
        assert info.value.body["message"]
    status, _, body = request(smol, "POST", "/v1/responses", {"input": "x", "frobnicate": 1})
    assert status == 400 and body["error"]["message"] == "unrecognized request argument supplied: frobnicate"
    status, _, body = request(smol, "POST", "/v1/responses", {"instructions": "x"})
    assert status == 400 and body["error"]["param"] == "input"


# ---- /v1/messages -------------------------------------------------------------------------------
def test_message_text_equals_chat_completions_and_the_stream_equals_the_message(smol):
    ac = anthropic_client(smol)
    messages = [{"role": "user", "content": "Say hi"}]
    expected = chat(smol, [{"role": "system", "content": "Be brief."}] + messages, 12)
    out = ac.messages.create(model="m", max_tokens=12, system=[{"type": "text", "text": "Be brief."}],
                             messages=messages, extra_body=GREEDY)
    assert out.id.startswith("msg_") and out.type == "message" and out.role == "assistant"
    (block,) = out.content
    assert block.type == "text" and block.text == expected.choices[0].message.content
    assert out.stop_reason == "max_tokens" and out.stop_sequence is None
    # Anthropic's input_tokens leave out those read from the cache
    assert out.usage.input_tokens + out.usage.cache_read_input_tokens == expected.usage.prompt_tokens
    assert out.usage.cache_read_input_tokens == expected.usage.prompt_tokens - 1  # the same prompt again
    assert out.usage.output_tokens == expected.usage.completion_tokens == 12
    count = ac.messages.count_tokens(model="m", system="Be brief.", messages=messages)
    assert count.input_tokens == expected.usage.prompt_tokens

    with ac.messages.stream(model="m", max_tokens=12, system="Be brief.", messages=messages,
                            extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    raw = [e.type for e in events if e.type not in ("text",)]  # "text": the SDK's own helper event
    deltas = raw.count("content_block_delta")
    # Anthropic's order of events (its streaming documentation)
    assert raw == ["message_start", "content_block_start"] + ["content_block_delta"] * deltas + [
        "content_block_stop", "message_delta", "message_stop"]
    assert final.content[0].text == block.text and final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 12
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == expected.usage.prompt_tokens


def test_message_blocks_read_as_the_plain_conversation(smol):
    """A user turn's text blocks are one message; an assistant turn's blocks one reply
    (counted with count_tokens against chat completions' prompt of the plain messages)."""
    ac = anthropic_client(smol)
    blocks = [{"role": "user", "content": [{"type": "text", "text": "What is"},
                                           {"type": "text", "text": " the answer?", "cache_control": {
                                               "type": "ephemeral"}}]},
              {"role": "assistant", "content": [{"type": "text", "text": "42."}]},
              {"role": "user", "content": "Why?"}]
    plain = [{"role": "user", "content": "What is the answer?"}, {"role": "assistant", "content": "42."},
             {"role": "user", "content": "Why?"}]
    expected = chat(smol, plain, 1)
    assert ac.messages.count_tokens(model="m", messages=blocks).input_tokens == expected.usage.prompt_tokens
    out = client(smol).responses.create(model="m", max_output_tokens=1, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "What is"},
                                     {"type": "input_text", "text": " the answer?"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42."}]},
        {"role": "user", "content": "Why?"}])
    assert out.usage.input_tokens == expected.usage.prompt_tokens
    assert out.output_text == expected.choices[0].message.content


def test_message_stop_sequence(smol):
    ac = anthropic_client(smol)
    full = ac.messages.create(model="m", max_tokens=12, messages=[{"role": "user", "content": "Say hi"}],
                              extra_body=GREEDY).content[0].text
    word = full.split()[3]  # a word the greedy reply writes, to stop at
    out = ac.messages.create(model="m", max_tokens=12, messages=[{"role": "user", "content": "Say hi"}],
                             stop_sequences=["no such text", word], extra_body=GREEDY)
    assert out.stop_reason == "stop_sequence" and out.stop_sequence == word
    assert out.content[0].text == full[:full.index(word)]
    with ac.messages.stream(model="m", max_tokens=12, messages=[{"role": "user", "content": "Say hi"}],
                            stop_sequences=[word], extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == word
    assert final.content[0].text == out.content[0].text


def test_message_tool_use_round_trip(smol):
    ac = anthropic_client(smol)
    tool = {"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}
    out = ac.messages.create(model="m", max_tokens=40, messages=[{"role": "user", "content": QUESTION}],
                             tools=[tool], tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    (use,) = out.content
    assert use.type == "tool_use" and use.name == "get_weather" and out.stop_reason == "tool_use"
    jsonschema.validate(use.input, WEATHER)
    chat_tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                  "parameters": WEATHER}}
    expected = chat(smol, [{"role": "user", "content": QUESTION}], 40, tools=[chat_tool],
                    tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert [json.loads(c.function.arguments) for c in expected.choices[0].message.tool_calls] == [use.input]

    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": out.content},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": [{"type": "text", "text": "Sunny, 21 C"}]}]}]
    answer = ac.messages.create(model="m", max_tokens=16, messages=history, tools=[tool], extra_body=GREEDY)
    expected = chat(smol, [{"role": "user", "content": QUESTION},
                           {"role": "assistant", "content": "", "tool_calls": [
                               {"id": use.id, "type": "function",
                                "function": {"name": "get_weather", "arguments": json.dumps(use.input)}}]},
                           {"role": "tool", "tool_call_id": use.id, "content": "Sunny, 21 C"}], 16,
                    tools=[chat_tool])
    assert answer.content[0].text == expected.choices[0].message.content and answer.content[0].text
    count = ac.messages.count_tokens(model="m", messages=history, tools=[tool])
    assert count.input_tokens == expected.usage.prompt_tokens

    with ac.messages.stream(model="m", max_tokens=40, messages=[{"role": "user", "content": QUESTION}],
                            tools=[tool], tool_choice={"type": "any"}, extra_body=GREEDY) as stream:
        raw = [e for e in stream if e.type.startswith(("message", "content_block"))]
        final = stream.get_final_message()
    assert [e.type for e in raw] == ["message_start", "content_block_start", "content_block_delta",
                                     "content_block_stop", "message_delta", "message_stop"]
    assert raw[2].delta.type == "input_json_delta" and json.loads(raw[2].delta.partial_json) == use.input
    assert final.content[0].input == use.input and final.stop_reason == "tool_use"


def test_messages_errors_have_anthropics_shape(smol):
    ac = anthropic_client(smol)
    hello = [{"role": "user", "content": "hi"}]
    cases = [
        ({"messages": hello}, "max_tokens"),
        ({"messages": hello, "max_tokens": "ten"}, "max_tokens"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]}, "video"),
        ({"max_tokens": 5, "messages": hello, "tools": [{"name": "f", "input_schema": {"type": "array"}}]},
         "input_schema"),
        ({"max_tokens": 5, "messages": hello, "tools": [{"name": "f"}]}, "input_schema"),
        ({"max_tokens": 5, "messages": hello, "tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"max_tokens": 5, "messages": hello, "frobnicate": 1}, "frobnicate"),
    ]
    for body, named in cases:
        status, _, out = request(smol, "POST", "/v1/messages", body)
        assert status == 400, (body, out)
        assert set(out) == {"type", "error"} and out["type"] == "error", out
        assert out["error"]["type"] == "invalid_request_error" and named in out["error"]["message"], out
    status, _, out = request(smol, "POST", "/v1/messages", raw=b"{not json")
    assert status == 400 and out["type"] == "error"
    with pytest.raises(anthropic.BadRequestError) as info:
        ac.messages.create(model="m", max_tokens=0, messages=hello)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    status, _, out = request(smol, "POST", "/v1/messages/count_tokens", {"messages": "hi"})
    assert status == 400 and out["type"] == "error"


def test_both_apis_batch_together_on_the_slots(smol):
    """A Responses stream and a Messages stream at once on the two slots (continuous
    batching through the same scheduler): each the same text as its chat completion."""
    import concurrent.futures

    topics = ["cats", "rain"]
    expected = [chat(smol, [{"role": "user", "content": f"One line about {t}."}], 8).choices[0].message.content
                for t in topics]

    def via_responses(topic):
        events = client(smol).responses.create(model="m", input=f"One line about {topic}.", max_output_tokens=8,
                                               temperature=0, stream=True)
        return "".join(e.delta for e in events if e.type == "response.output_text.delta")

    def via_messages(topic):
        with anthropic_client(smol).messages.stream(model="m", max_tokens=8, extra_body=GREEDY, messages=[
                {"role": "user", "content": f"One line about {topic}."}]) as stream:
            return "".join(stream.text_stream)

    calls = [via_responses, via_messages]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        texts = list(pool.map(lambda call_topic: call_topic[0](call_topic[1]), zip(calls, topics)))
    assert texts == expected


def test_metrics_count_both_endpoints(smol):
    before = metrics(smol)
    client(smol).responses.create(model="m", input="Hi", max_output_tokens=3, temperature=0)
    anthropic_client(smol).messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "Hi"}],
                                           extra_body=GREEDY)
    after = metrics(smol)
    for endpoint in ("/v1/responses", "/v1/messages"):
        key = f'infer_requests_total{{endpoint={endpoint},status=200}}'
        assert after[key] - before.get(key, 0) == 1
    assert after["infer_completion_tokens_total"] - before["infer_completion_tokens_total"] == 6


# ---- the scripted model: stop strings, thinking, the API key -----------------------------------
def test_a_chat_choice_ended_by_a_stop_string_names_it():
    """vLLM's stop_reason on chat choices, which /v1/messages' stop_sequence reads: the
    stop string that ended the reply; absent when the turn ended by itself."""
    from infer import api

    model = scripted_model(["Hello world, again."] * 8)
    hello = [{"role": "user", "content": "x"}]
    out = api.create_chat_completion(model, hello, stop=["again", "world"], temperature=0)
    (choice,) = out["choices"]
    assert choice["message"]["content"] == "Hello " and choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == "world"
    chunks = list(api.create_chat_completion(model, hello, stop=["world"], temperature=0, stream=True))
    assert [c["choices"][0].get("stop_reason") for c in chunks if c["choices"][0]["finish_reason"]] == ["world"]
    plain = api.create_chat_completion(model, hello, stop=["nowhere"], temperature=0)["choices"][0]
    assert plain["message"]["content"] == "Hello world, again." and "stop_reason" not in plain



def test_thinking_comes_back_as_reasoning_items_and_thinking_blocks():
    script = ["<think>Let me see.</think>Hi."] * 8
    with app_server(create_app(scripted_model(script))) as base:
        out = client(base).responses.create(model="m", input="x", reasoning={"effort": "high"}, temperature=0)
        reasoning, message = out.output
        assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
        assert [c.text for c in reasoning.content] == ["Let me see."] and out.output_text == "Hi."
        events = list(client(base).responses.create(model="m", input="x", temperature=0, stream=True))
        kinds = [e.type for e in events]
        assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
        assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "Let me see."
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hi."
        assert [i.type for i in events[-1].response.output] == ["reasoning", "message"]
        assert [e.output_index for e in events if e.type == "response.output_item.done"] == [0, 1]
        # the output items given back as input (reasoning, then the message): one assistant turn
        history = [{"role": "user", "content": "x"}] + [item.model_dump(exclude_none=True) for item in out.output] \
            + [{"role": "user", "content": "y"}]
        again = client(base).responses.create(model="m", input=history, temperature=0)
        assert again.output_text == "Hi." and again.usage.input_tokens == client(base).chat.completions.create(
            model="m", temperature=0, messages=[{"role": "user", "content": "x"}, {
                "role": "assistant", "content": "Hi.", "reasoning_content": "Let me see."},
                {"role": "user", "content": "y"}]).usage.prompt_tokens

        ac = anthropic_client(base)
        msg = ac.messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}],
                                 thinking={"type": "enabled", "budget_tokens": 1024}, extra_body=GREEDY)
        assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in msg.content] == \
            [("thinking", "Let me see."), ("text", "Hi.")]
        assert msg.stop_reason == "end_turn"
        with ac.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}],
                                extra_body=GREEDY) as stream:
            raw = [e for e in stream if e.type.startswith(("message", "content_block"))]
            final = stream.get_final_message()
        assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == \
            [("thinking", "Let me see."), ("text", "Hi.")]
        assert [e.delta.type for e in raw if e.type == "content_block_delta"] == \
            ["thinking_delta"] * sum(e.type == "content_block_delta" and e.delta.type == "thinking_delta"
                                     for e in raw) + ["signature_delta"] + \
            ["text_delta"] * sum(e.type == "content_block_delta" and e.delta.type == "text_delta" for e in raw)
        # thinking given back in the history: the template sees it as reasoning_content
        again = ac.messages.create(model="m", max_tokens=50, extra_body=GREEDY, messages=[
            {"role": "user", "content": "x"}, {"role": "assistant", "content": msg.content},
            {"role": "user", "content": "y"}])
        assert again.content[-1].text == "Hi."


def test_api_key_as_x_api_key_or_bearer():
    with app_server(create_app(scripted_model(["Hi."] * 8), api_key="s3cret")) as base:
        with pytest.raises(anthropic.AuthenticationError) as info:
            anthropic_client(base, "wrong").messages.create(model="m", max_tokens=5,
                                                            messages=[{"role": "user", "content": "x"}])
        assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "authentication_error"
        out = anthropic_client(base, "s3cret").messages.create(model="m", max_tokens=5, extra_body=GREEDY,
                                                               messages=[{"role": "user", "content": "x"}])
        assert out.content[0].text == "Hi."
        with pytest.raises(openai.AuthenticationError):
            client(base, "wrong").responses.create(model="m", input="x")
        assert client(base, "s3cret").responses.create(model="m", input="x", temperature=0).output_text == "Hi."
        status, _, _ = request(base, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
                               headers={"x-api-key": "s3cret"})
        assert status == 200


def test_claude_codes_habits_large_max_tokens_and_a_stamped_system_prompt():
    """Claude Code asks for 32000 tokens (more than a slot holds: the reply runs until
    the context is full) and stamps its first system line anew each request (made
    constant, as llama-server does, so the next request reads the prompt from the cache)."""
    with app_server(create_app(scripted_model(["Hi."] * 8), parallel=1, ctx_size=256)) as base:
        ac = anthropic_client(base)
        usages = []
        for stamp in ("a5145", "0b1c2"):
            system = [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1; cch={stamp};"},
                      {"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}}]
            out = ac.messages.create(model="m", max_tokens=32000, system=system, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": "x"}])
            assert out.content[0].text == "Hi." and out.stop_reason == "end_turn"
            usages.append(out.usage)
        prompt = usages[0].input_tokens + usages[0].cache_read_input_tokens
        assert usages[1].cache_read_input_tokens == prompt - 1 and usages[1].input_tokens == 1
        status, _, body = request(base, "POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 32000})
        assert status == 400 and "exceeds the context" in body["error"]["message"]  # OpenAI's rule stays


def test_an_error_mid_stream_is_a_named_error_event():
    """What the client reads when a stream fails after it began (the server stopping, a
    fault): each API's error event, which each official client raises."""
    from infer.serve.anthropic_messages import ANTHROPIC
    from infer.serve.app import error_body
    from infer.serve.responses import RESPONSES

    openai_error = error_body("the server is stopping", "server_busy", code="server_stopping")
    name, data = RESPONSES.event(RESPONSES.error_body(503, openai_error)).decode().split("\r\n")[:2]
    assert name == "event: error"
    event = json.loads(data.removeprefix("data: "))
    assert event["type"] == "error" and event["code"] == "server_stopping"
    assert event["message"] == "the server is stopping" and event["error"] == openai_error["error"]
    name, data = ANTHROPIC.event(ANTHROPIC.error_body(503, openai_error)).decode().split("\r\n")[:2]
    assert name == "event: error"
    assert json.loads(data.removeprefix("data: ")) == {
        "type": "error", "error": {"type": "overloaded_error", "message": "the server is stopping"}}


@pytest.mark.parametrize("path, body", [
    ("/v1/responses", {"input": "go", "stream": True, "max_output_tokens": 1000, "temperature": 0}),
    ("/v1/messages", {"messages": [{"role": "user", "content": "go"}], "stream": True, "max_tokens": 1000,
                      "temperature": 0})])
def test_a_dropped_stream_frees_its_slot(path, body):
    """The scheduler's cancellation reaches through the translation: a client gone
    mid-stream ends the turn, and the slot serves the next request."""
    out = dropped_stream_frees_its_slot(path, body)
    # the script's first turn again ("ab" is one token): the dropped turn left nothing in the cache
    assert out.choices[0].message.content == "ab" * 5
