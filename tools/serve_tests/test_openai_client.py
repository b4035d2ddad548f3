"""The official `openai` client drives `cyb-llm serve` (tiny chat fixture) on 127.0.0.1.

Expected texts come from tests/fixtures/tiny_chat/reference.json (transformers' greedy
output). The server is started on a free port for this module and stopped with SIGTERM,
which must drain and exit cleanly.
"""

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
from serving import serve

# Loopback only: never through a proxy.
os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_chat"
BIN = os.environ.get("CYB_LLM_BIN", str(ROOT / "target" / "debug" / "cyb-llm"))
REF = json.loads((FIXTURE / "reference.json").read_text())


def greedy(case):
    pieces = REF[case]["greedy_stop_at_eos"]["pieces"]
    return "".join(pieces[:-1])  # the last piece is the end-of-turn token


@pytest.fixture(scope="module")
def server():
    yield from serve([BIN, "serve", FIXTURE / "hf", "--alias", "tiny", "--parallel", "2", "--queue", "8",
                      "--max-tokens-limit", "200"], timeout=60)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_chat_greedy_matches_transformers(client):
    for case in ["chat", "chat_next_turn"]:
        r = client.chat.completions.create(model="tiny", messages=REF[case]["messages"], temperature=0)
        assert r.choices[0].message.content == greedy(case)
        assert r.choices[0].finish_reason == "stop"
        assert r.usage.prompt_tokens == len(REF[case]["prompt_ids"])
        assert r.usage.completion_tokens == len(REF[case]["greedy_stop_at_eos"]["ids"]) - 1


def test_streaming_with_usage(client):
    stream = client.chat.completions.create(
        model="tiny", messages=REF["chat"]["messages"], temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None and not chunk.choices:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == greedy("chat")
    assert finish == "stop"
    assert usage.completion_tokens == len(REF["chat"]["greedy_stop_at_eos"]["ids"]) - 1


def test_stop_strings_and_length(client):
    full = greedy("chat")
    r = client.chat.completions.create(model="tiny", messages=REF["chat"]["messages"], temperature=0, stop=["8"])
    assert r.choices[0].message.content == full[: full.index("8")]
    assert r.choices[0].finish_reason == "stop"
    r = client.chat.completions.create(model="tiny", messages=REF["chat"]["messages"], temperature=0, max_tokens=2)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 2


def test_seed_reproducibility(client):
    def ask(seed):
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Tell me something"}],
            temperature=1.0, seed=seed, max_tokens=30, extra_body={"ignore_eos": True},
        )
        return r.choices[0].message.content
    assert ask(5) == ask(5)
    assert len({ask(s) for s in range(4)}) > 1


def test_logprobs(client):
    r = client.chat.completions.create(
        model="tiny", messages=REF["chat"]["messages"], temperature=0, logprobs=True, top_logprobs=2,
    )
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == greedy("chat")
    assert all(t.top_logprobs[0].token == t.token for t in content)


def test_text_completions(client):
    n = len(REF["raw"]["greedy_ignore_eos"]["ids"])
    r = client.completions.create(
        model="tiny", prompt=REF["raw"]["text"], temperature=0, max_tokens=n, extra_body={"ignore_eos": True},
    )
    assert r.choices[0].text == REF["raw"]["greedy_ignore_eos"]["text"]
    assert r.usage.completion_tokens == n


def test_errors(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="missing", messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], temperature=-1)
    assert e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=500)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "word " * 400}])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="tiny", input="hello")
    assert "not an embedding model" in str(e.value)
    req = urllib.request.Request(
        server + "/v1/chat/completions", data=b"{not json", headers={"content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400
    assert json.loads(e.value.read())["error"]["type"] == "invalid_request_error"
    # Still serving.
    with urllib.request.urlopen(server + "/health", timeout=30) as r:
        assert r.status == 200


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", None]},
        "scores": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1},
                   "minItems": 1, "maxItems": 3},
        "home": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                 "required": ["city"], "additionalProperties": False},
    },
    "required": ["name", "age", "pet", "scores", "home"],
    "additionalProperties": False,
}


def test_json_schema_response_format(client):
    # The tiny model has random weights: its answers validate only because of the grammar.
    import jsonschema

    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed, temperature in [(0, 0.0), (1, 0.8), (2, 1.0), (3, 1.5)]:
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "A person, please."}],
            response_format=fmt, seed=seed, temperature=temperature, max_tokens=180,
        )
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
        chunks = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "A person, please."}],
            response_format=fmt, seed=seed, temperature=temperature, max_tokens=180, stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        jsonschema.validate(json.loads(text), PERSON)

    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "{"}], response_format={"type": "json_object"},
        seed=1, max_tokens=120,
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)

    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], response_format=bad)
    assert "strnig" in str(e.value)


def test_forced_tool_call_follows_the_schema(client):
    import jsonschema

    params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                               "unit": {"enum": ["C", "F"]}},
              "required": ["city", "unit"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.chat.completions.create(
        model="tiny", messages=messages, tools=tools, tool_choice="required", seed=5, temperature=1.0, max_tokens=120,
    )
    assert r.choices[0].finish_reason == "tool_calls"
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), params)
    # The tool result round trip continues the conversation (the fixture's template needs a
    # string content in every message).
    messages += [{**r.choices[0].message.model_dump(exclude_none=True), "content": ""},
                 {"role": "tool", "tool_call_id": call.id, "content": "18 C"}]
    r = client.chat.completions.create(model="tiny", messages=messages, tools=tools, seed=5, max_tokens=8)
    assert r.choices[0].message.content is not None or r.choices[0].message.tool_calls
