"""The official `openai` Python client against the IOP Edge, as a real client.

Run by hack/openai-client-test.sh, which starts its own mock provider, Edge
and Node and sets:

  IOP_BASE_URL  the Edge's OpenAI base URL, e.g. http://127.0.0.1:41234/v1
  IOP_MOCK_URL  the mock provider itself, e.g. http://127.0.0.1:41233

The Edge serves the default config's two models:

  mock-chat    an `openai_compat` provider: a raw tunnel, the provider's own
               bytes reach the client untouched
  mock-ollama  an `ollama` provider: a normalized run, translated by the Edge

The mock provider is deterministic: a content token is "tok ", 16 tokens by
default, prompt_tokens = ceil(bytes of message text / 4); only ids and
`created` timestamps vary per request.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.parse

import openai
import pytest

BASE_URL = os.environ.get("IOP_BASE_URL", "http://127.0.0.1:8080/v1")
MOCK_URL = os.environ.get("IOP_MOCK_URL", "http://127.0.0.1:8000")

# Marks for the tests of the raw tunnel (mock-chat), all in this one place
# (e.g. an xfail while the tunnel is being reworked).
TUNNEL_MARKS: list = []

TUNNEL = pytest.param("mock-chat", marks=TUNNEL_MARKS, id="mock-chat")
NORMALIZED = pytest.param("mock-ollama", id="mock-ollama")
MODELS = [TUNNEL, NORMALIZED]

MESSAGES = [{"role": "user", "content": "hello, edge"}]
PROMPT_TOKENS = 3  # ceil(len("hello, edge") / 4)
TOKENS = 16  # the mock provider's default completion length
TEXT = "tok " * TOKENS


@pytest.fixture(scope="module")
def client() -> openai.OpenAI:
    c = openai.OpenAI(base_url=BASE_URL, api_key="iop-test", max_retries=0, timeout=20.0)
    yield c
    c.close()


def check_chat_usage(usage) -> None:
    assert usage is not None
    assert usage.prompt_tokens == PROMPT_TOKENS
    assert usage.completion_tokens == TOKENS
    assert usage.total_tokens == PROMPT_TOKENS + TOKENS


# --- Chat Completions -------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_chat_non_stream(client, model):
    completion = client.chat.completions.create(model=model, messages=MESSAGES)
    assert completion.object == "chat.completion"
    assert completion.id
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == TEXT
    assert choice.finish_reason == "stop"
    check_chat_usage(completion.usage)


def collect_chat_stream(stream):
    chunks = list(stream)
    assert chunks, "no chunk arrived"
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return chunks, text, finish


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream(client, model):
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    chunks, text, finish = collect_chat_stream(stream)
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1, "the answer should arrive in several chunks"
    assert text == TEXT
    assert finish == ["stop"]
    # The client did not ask for usage: no chunk carries it.
    assert all(c.usage is None for c in chunks), [c.usage for c in chunks]


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_matches_non_stream(client, model):
    full = client.chat.completions.create(model=model, messages=MESSAGES)
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    _, text, finish = collect_chat_stream(stream)
    assert text == full.choices[0].message.content
    assert finish == [full.choices[0].finish_reason]


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_include_usage(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks, text, finish = collect_chat_stream(stream)
    assert text == TEXT
    assert finish == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    check_chat_usage(last.usage)
    assert all(c.usage is None for c in chunks[:-1])


# An agent's turn: a tool list, the model's tool call and the tool's answer
# in the history. Texts with escapes (a quote, a newline, a two-byte é).
AGENT_TURN = [
    {"role": "system", "content": "Be \"terse\".\n"},
    {"role": "user", "content": "Weather in Orléans?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Orléans"})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp_c": 21})},
    {"role": "user", "content": "And tomorrow?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city now.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.mark.parametrize("model", MODELS)
def test_an_agents_turn_reaches_the_provider_whole(client, model):
    completion = client.chat.completions.create(model=model, messages=AGENT_TURN, tools=TOOLS)
    assert completion.choices[0].message.content == TEXT
    # The mock counts every message text's UTF-8 bytes it received.
    text_bytes = sum(len((m["content"] or "").encode()) for m in AGENT_TURN)
    assert completion.usage.prompt_tokens == -(-text_bytes // 4)


# --- Responses API ------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_responses_non_stream(client, model):
    response = client.responses.create(model=model, input="hello, edge")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.output_text == TEXT
    assert response.usage is not None
    assert response.usage.input_tokens == PROMPT_TOKENS
    assert response.usage.output_tokens == TOKENS


@pytest.mark.parametrize("model", MODELS)
def test_responses_stream(client, model):
    events = list(client.responses.create(model=model, input="hello, edge", stream=True))
    types = [e.type for e in events]
    assert "response.output_text.delta" in types, types
    assert types[-1] == "response.completed", types
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == TEXT
    completed = events[-1].response
    assert completed.status == "completed"
    assert completed.output_text == TEXT
    assert completed.usage is not None and completed.usage.output_tokens == TOKENS


def test_responses_cut_at_the_output_limit_are_incomplete(client):
    # A normalized run that stops at max_output_tokens says so, as OpenAI's do.
    response = client.responses.create(
        model="mock-ollama", input="hello, edge", max_output_tokens=2
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    events = list(
        client.responses.create(
            model="mock-ollama", input="hello, edge", max_output_tokens=2, stream=True
        )
    )
    assert events[-1].type == "response.incomplete", [e.type for e in events]
    assert events[-1].response.status == "incomplete"
    assert events[-1].response.output_text == response.output_text


# --- models and errors ----------------------------------------------------------


def test_models_list(client):
    ids = [m.id for m in client.models.list()]
    assert "mock-chat" in ids and "mock-ollama" in ids, ids


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")


@pytest.mark.parametrize("model", ["mock-chat", "mock-ollama"])
def test_malformed_request_is_bad_request(client, model):
    # `stream` must be a boolean: the Edge refuses it before choosing a wire,
    # so this holds for both models whatever their provider does.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, extra_body={"stream": "yes"})
    assert caught.value.status_code == 400
    assert caught.value.code == "invalid_stream"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=model, input="hi", extra_body={"stream": 1})


@pytest.mark.parametrize("model", MODELS)
def test_request_the_provider_refuses_is_bad_request(client, model):
    # Well-formed for the Edge, refused by the provider (`max_tokens` must be
    # a number): the tunnel relays the provider's 400 as it is; a normalized
    # run reports the provider's 4xx as a 400.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, extra_body={"max_tokens": "many"})
    assert caught.value.status_code == 400


# --- the raw tunnel: the provider's bytes, untouched ----------------------------


def post(base: str, path: str, body: dict) -> tuple[int, dict[str, str], bytes]:
    """One POST with a plain HTTP client; the body as received (de-chunked)."""
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
    try:
        conn.request(
            "POST",
            url.path.rstrip("/") + path,
            body=json.dumps(body),
            headers={"content-type": "application/json"},
        )
        resp = conn.getresponse()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, resp.read()
    finally:
        conn.close()


# What the mock provider varies per request: its ids (a counter) and the
# `created` / `created_at` timestamps. Nothing else may differ.
PER_REQUEST = [
    (re.compile(rb'"(chatcmpl-mock|resp_mock|msg_mock|rs_mock)-\d+"'), rb'"\1-N"'),
    (re.compile(rb'"(created|created_at)":\d+'), rb'"\1":0'),
]


def normalize(body: bytes) -> bytes:
    for pattern, repl in PER_REQUEST:
        body = pattern.sub(repl, body)
    return body


EDGE_ROOT = BASE_URL[: -len("/v1")] if BASE_URL.endswith("/v1") else BASE_URL


@pytest.mark.parametrize(
    "path,body",
    [
        pytest.param(
            "/v1/chat/completions",
            {"model": "mock-chat", "messages": MESSAGES, "stream": True},
            id="chat-stream",
        ),
        pytest.param(
            "/v1/chat/completions",
            {
                "model": "mock-chat",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            id="chat-stream-include-usage",
        ),
        pytest.param(
            "/v1/chat/completions",
            {"model": "mock-chat", "messages": MESSAGES},
            id="chat-non-stream",
        ),
        pytest.param(
            "/v1/responses",
            {"model": "mock-chat", "input": "hello, edge", "stream": True},
            id="responses-stream",
        ),
    ],
)
@pytest.mark.parametrize("_tunnel", [TUNNEL])
def test_tunnel_is_byte_for_byte_the_provider(_tunnel, path, body):
    direct_status, direct_headers, direct = post(MOCK_URL, path, body)
    edge_status, edge_headers, tunneled = post(EDGE_ROOT, path, body)
    assert direct_status == 200, direct
    assert edge_status == direct_status, tunneled
    assert edge_headers.get("content-type") == direct_headers.get("content-type")
    assert normalize(direct) != direct, "the mock's per-request fields moved: update PER_REQUEST"
    assert normalize(tunneled) == normalize(direct)
