"""``/v1/responses``, ``/v1/messages`` and ``/v1/embeddings`` beyond the clients' happy paths: what each request
becomes on the chat pipeline (the stored translation), what is refused and how (each API's own error shape, the
field named), a stream that breaks mid-answer, a teacher reached through litellm's Anthropic provider, and the
embeddings route (logged, priced, no content stored)."""

from __future__ import annotations

import base64
import json
import struct

import httpx
import openai
import orjson
import pytest

from ratchet_gateway.apis.messages_request import MessagesRequest
from ratchet_gateway.apis.messages_request import to_chat as messages_to_chat
from ratchet_gateway.apis.responses_request import ResponsesRequest
from ratchet_gateway.apis.responses_request import to_chat as responses_to_chat
from tests.faults.upstream import faulty_upstream

from .conftest import API_KEY, running_gateway, sealed_rows

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher_url):
    with running_gateway(
        tmp_path_factory.mktemp("apis"),
        teacher_url,
        embedding_model="openai/demo-teacher",
        embedding_api_base=teacher_url,
        embedding_api_key="sk-embedding-upstream",
    ) as g:
        yield g


def _post(gateway, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(gateway.url + path, json=body, headers=AUTH if headers is None else headers, timeout=30)


def _row(gateway, request_id: str) -> dict:
    gateway.drain()
    (row,) = [r for r in sealed_rows(gateway.settings.lake_root) if r["request_id"] == request_id]
    return row


# translations ---------------------------------------------------------------------------------------------------
def test_a_responses_request_becomes_the_chat_request_a_chat_client_would_send():
    req = ResponsesRequest.model_validate(
        {
            "model": "ratchet",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me see."}],
                },
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": '{"city":"Paris"}',
                },
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "And this?"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                    ],
                },
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": TOOL_SCHEMA, "strict": True}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {
                "format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}, "strict": True}
            },
            "max_output_tokens": 64,
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 2,
            "reasoning": {"effort": "low"},
            "metadata": {"ratchet_task": "weather", "team": "a"},
            "user": "u1",
            "truncation": "auto",
            "store": False,
        }
    )
    assert responses_to_chat(req) == {
        "model": "ratchet",
        "stream": False,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "Let me see.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                    },
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "parameters": TOOL_SCHEMA, "strict": True},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": True},
        },
        "max_completion_tokens": 64,
        "logprobs": True,
        "top_logprobs": 2,
        "reasoning_effort": "low",
        "user": "u1",
        "metadata": {"ratchet_task": "weather", "team": "a"},
    }


def test_a_messages_request_becomes_the_chat_request_a_chat_client_would_send():
    req = MessagesRequest.model_validate(
        {
            "model": "ratchet",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "...", "signature": "s"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "sunny"}],
                        },
                        {"type": "text", "text": "Thanks."},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                        },
                    ],
                },
            ],
            "tools": [{"name": "get_weather", "description": "w", "input_schema": TOOL_SCHEMA}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "temperature": 0.2,
            "top_k": 5,
            "metadata": {"user_id": "u1", "ratchet_task": "weather"},
        }
    )
    assert messages_to_chat(req) == {
        "model": "ratchet",
        "stream": False,
        "max_completion_tokens": 100,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Thanks."},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
        ],
        "stop": ["END"],
        "temperature": 0.2,
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "parameters": TOOL_SCHEMA, "description": "w"},
            }
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "user": "u1",
        "metadata": {"ratchet_task": "weather"},
    }


# refusals and error shapes --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "input[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "input[0].content[0].type"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"max_output_tokens": True}, "max_output_tokens"),
        ({"input": 5}, "input"),
    ],
)
def test_responses_refuses_what_it_cannot_serve_naming_the_field(gateway, change, param):
    r = _post(gateway, "/v1/responses", {"model": "ratchet", "input": "hi", **change})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]


def test_a_stateless_refusal_says_what_to_send_instead(gateway):
    r = _post(gateway, "/v1/responses", {"model": "ratchet", "input": "hi", "previous_response_id": "resp_1"})
    assert "send the whole conversation in `input`" in r.json()["error"]["message"]


def test_messages_errors_have_anthropics_shape_and_take_the_x_api_key(gateway):
    body = {"model": "ratchet", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    r = _post(gateway, "/v1/messages", body, headers={})
    assert r.status_code == 401
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "authentication_error"
    assert "x-api-key" in doc["error"]["message"] and doc["request_id"] == r.headers["x-ratchet-request-id"]
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    assert _post(gateway, "/v1/messages", body, headers=headers).status_code == 200
    r = _post(gateway, "/v1/messages", {**body, "max_tokens": 0}, headers=headers)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in r.json()["error"]["message"]
    r = _post(gateway, "/v1/messages", {**body, "model": "claude-opus"}, headers=headers)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    tool = {"type": "web_search_20250305", "name": "web_search"}
    r = _post(gateway, "/v1/messages", {**body, "tools": [tool]}, headers=headers)
    assert r.status_code == 400 and "tools[0].type" in r.json()["error"]["message"]


def test_rows_store_the_translation_and_the_api(gateway):
    r = _post(
        gateway,
        "/v1/responses",
        {"model": "ratchet", "instructions": "Be brief.", "input": "mail a@b.co", "max_output_tokens": 40},
    )
    row = _row(gateway, r.headers["x-ratchet-request-id"])
    assert row["api"] == "responses" and row["status_code"] == 200
    messages = json.loads(row["messages"])
    assert [m["role"] for m in messages] == ["system", "user"] and "a@b.co" not in row["messages"]
    assert json.loads(row["params"])["max_completion_tokens"] == 40
    assert row["answer"] == r.json()["output"][0]["content"][0]["text"]
    r = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "ratchet", "messages": [{"role": "user", "content": "hi"}]},
        headers=AUTH,
    )
    assert _row(gateway, r.headers["x-ratchet-request-id"])["api"] == "chat.completions"


# a stream that breaks -------------------------------------------------------------------------------------------
def _events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"data" in lines:
            out.append((lines.get(b"event", b"").decode(), orjson.loads(lines[b"data"])))
    return out


def test_a_teacher_stream_that_breaks_ends_each_api_in_its_own_shape(tmp_path):
    with faulty_upstream() as up, running_gateway(tmp_path, up.url) as g:
        up.set("sse_error", content="one two three four", chunks_before=2)
        bodies = {
            "/v1/responses": {"model": "ratchet", "input": "hi", "stream": True},
            "/v1/messages": {
                "model": "ratchet",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
            },
        }
        ends = {}
        for path, body in bodies.items():
            with httpx.stream("POST", g.url + path, json=body, headers=AUTH, timeout=30) as r:
                assert r.status_code == 200
                events = _events(r.read())
            ends[path] = [name for name, _ in events[-2:]], events
            row = _row(g, r.headers["x-ratchet-request-id"])
            assert row["status_code"] == 502 and row["truncated"] and row["answer"] == "one two"
            assert row["api"] == path.rsplit("/", 1)[1]
        names, events = ends["/v1/responses"]
        assert names == ["error", "response.failed"] and events[-1][1]["response"]["status"] == "failed"
        assert "".join(d["delta"] for n, d in events if n == "response.output_text.delta") == "one two"
        names, events = ends["/v1/messages"]
        assert names[-1] == "error" and events[-1][1]["error"]["type"] == "api_error"
        assert "message_stop" not in {n for n, _ in events}

        up.set("sse_error", chunks_before=1)  # the openai client: no response.completed, so no final response
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=10)
        with (
            pytest.raises(RuntimeError, match="response.completed"),
            client.responses.stream(model="ratchet", input="hi") as stream,
        ):
            kinds = [e.type for e in stream]
            stream.get_final_response()
        assert kinds[-2:] == ["error", "response.failed"]


# the teacher through litellm's Anthropic provider ---------------------------------------------------------------
def test_an_anthropic_teacher_through_litellm(tmp_path, teacher_url):
    """``anthropic/...`` teachers go through litellm, which speaks Messages to the demo teacher's /v1/messages."""
    import anthropic

    root = teacher_url.removesuffix("/v1")  # litellm appends /v1/messages
    with running_gateway(
        tmp_path, teacher_url, teacher_model="anthropic/demo-teacher", teacher_api_base=root
    ) as g:
        assert g.gw.teacher.fast is False
        client = anthropic.Anthropic(base_url=g.url, api_key=API_KEY, max_retries=0)
        tool = {"name": "get_weather", "description": "w", "input_schema": TOOL_SCHEMA}
        msg = client.messages.create(
            model="ratchet",
            max_tokens=100,
            messages=[{"role": "user", "content": "weather in Oslo?"}],
            tools=[tool],
        )
        assert msg.content[0].type == "tool_use" and msg.content[0].input["city"]
        with client.messages.stream(
            model="ratchet", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            text = "".join(s.text_stream)
        assert text.startswith("Demo teacher reply")
        responses = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0)
        assert responses.responses.create(model="ratchet", input="hi").output_text.startswith(
            "Demo teacher reply"
        )
        g.drain()
        rows = sealed_rows(g.settings.lake_root)
        assert sorted(r["api"] for r in rows) == ["messages", "messages", "responses"]
        assert all(r["status_code"] == 200 and r["teacher_cost_usd"] > 0 for r in rows)


# embeddings -----------------------------------------------------------------------------------------------------
def test_embeddings_are_answered_logged_and_priced_but_store_no_content(gateway):
    from ratchet_gateway.demo_teacher.model_apis import embedding

    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
    raw = client.embeddings.with_raw_response.create(
        model="demo-teacher", input=["my card is 4111 1111 1111 1111", "second"], dimensions=8, user="u1"
    )
    got = raw.parse()
    texts = ("my card is 4111 1111 1111 1111", "second")
    for item, text in zip(got.data, texts, strict=True):
        assert item.embedding == pytest.approx(embedding("demo-teacher", text, 8))
    row = _row(gateway, raw.headers["x-ratchet-request-id"])
    assert row["api"] == "embeddings" and row["served_by"] == "teacher" and row["status_code"] == 200
    assert row["prompt_tokens"] == got.usage.prompt_tokens > 0 and row["completion_tokens"] == 0
    assert row["teacher_cost_usd"] == row["actual_cost_usd"] > 0
    assert row["messages"] == row["answer"] == "" and "4111" not in json.dumps(row, default=str)
    # the client asks for base64 unless told otherwise, and decodes it
    assert json.loads(row["params"]) == {
        "dimensions": 8,
        "inputs": 2,
        "user": "u1",
        "encoding_format": "base64",
    }

    floats = client.embeddings.create(
        model="openai/demo-teacher", input="second", encoding_format="float", dimensions=8
    )
    assert floats.data[0].embedding == embedding(
        "demo-teacher", "second", 8
    )  # passed on as the model sent it
    r = _post(
        gateway, "/v1/embeddings", {"model": "demo-teacher", "input": "second", "encoding_format": "base64"}
    )
    vector = struct.unpack("<64f", base64.b64decode(r.json()["data"][0]["embedding"]))
    assert vector == pytest.approx(embedding("demo-teacher", "second", 64), abs=1e-6)

    for body, status in (
        ({"model": "text-embedding-3-large", "input": "x"}, 404),
        ({"model": "demo-teacher", "input": []}, 400),
        ({"model": "demo-teacher", "input": [1.5]}, 400),
        ({"model": "demo-teacher"}, 400),
    ):
        r = _post(gateway, "/v1/embeddings", body)
        assert r.status_code == status and r.json()["error"]["message"], (body, r.text)
    assert (
        _post(gateway, "/v1/embeddings", {"model": "demo-teacher", "input": "x"}, headers={}).status_code
        == 401
    )


def test_embeddings_without_a_configured_model_say_how_to_configure_one(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url) as g:
        r = _post(g, "/v1/embeddings", {"model": "text-embedding-3-small", "input": "x"})
        assert r.status_code == 404 and "RATCHET_EMBEDDING_MODEL" in r.json()["error"]["message"]


# every API: headers, large bodies -------------------------------------------------------------------------------
ANSWERED = {
    "/v1/responses": {"model": "ratchet", "input": "Where is my order?"},
    "/v1/messages": {"model": "ratchet", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/embeddings": {"model": "demo-teacher", "input": "Where is my order?"},
}


@pytest.mark.parametrize("path", list(ANSWERED))
def test_every_apis_answer_carries_the_ratchet_headers(gateway, path):
    r = _post(gateway, path, ANSWERED[path])
    assert r.status_code == 200, r.text
    for name in ("x-ratchet-request-id", "x-ratchet-served-by", "x-ratchet-version", "x-ratchet-manifest"):
        assert r.headers.get(name), (name, dict(r.headers))
    assert r.headers["x-ratchet-manifest"] == str(gateway.gw.manifest.sequence)
    assert r.headers["x-content-type-options"] == "nosniff"


def test_a_large_body_of_every_api_is_parsed_and_validated_in_the_lane(gateway, monkeypatch):
    """Over 64 KiB, each API's body is parsed and validated in the large-body lane, never on the event loop (and
    an embeddings request's parameters column is redacted there too)."""
    lane = gateway.gw.offload
    ran: list[str] = []
    run = lane.run

    async def recorded(fn, *args):
        ran.append(getattr(getattr(fn, "func", fn), "__name__", repr(fn)))
        return await run(fn, *args)

    monkeypatch.setattr(lane, "run", recorded)
    turns = [{"role": "user", "content": f"turn {i}: where is my order? " + "x" * 100} for i in range(600)]
    bodies = {
        "/v1/responses": {"model": "ratchet", "input": turns},
        "/v1/messages": {"model": "ratchet", "max_tokens": 50, "messages": turns},
        "/v1/embeddings": {
            "model": "demo-teacher",
            "input": [t["content"] for t in turns],
            "user": "x" * 70_000,
        },
    }
    for path, body in bodies.items():
        assert len(orjson.dumps(body)) > 64 * 1024
        ran.clear()
        r = _post(gateway, path, body)
        assert r.status_code == 200, (path, r.text)
        assert "parse" in ran or "_parsed" in ran, (path, ran)
    assert "_params_column" in ran  # the last one: embeddings


def test_long_lists_are_validated_in_slices_with_the_same_result():
    """A Messages or Responses body's long lists are validated a slice at a time (no pydantic call, which holds the
    GIL, sees more than ``wire.SLICE + 1`` items), with the same request, and an error names its item's place."""
    from pydantic import model_validator

    from ratchet_gateway.apis import wire
    from ratchet_gateway.errors import GatewayError

    seen: list[int] = []

    class Recorded(MessagesRequest):
        @model_validator(mode="before")
        @classmethod
        def _seen(cls, data):
            seen.extend(len(v) for v in data.values() if isinstance(v, list))
            return data

    class Counting:
        def __init__(self, adapter):
            self.adapter = adapter

        def validate_python(self, items):
            seen.append(len(items))
            return self.adapter.validate_python(items)

    turns = [{"role": "user", "content": f"turn {i}"} for i in range(3000)]
    tools = [{"name": f"t{i}", "input_schema": TOOL_SCHEMA} for i in range(600)]
    body = {"model": "ratchet", "max_tokens": 5, "messages": turns, "tools": tools, "extra": list(range(900))}
    adapter = wire._adapter
    try:
        wire._adapter = lambda annotation: Counting(adapter(annotation))
        req = wire.validated(Recorded, body, "Anthropic Messages")
        assert max(seen) <= wire.SLICE + 1 and sum(seen) > 3600
        assert req.model_dump() == MessagesRequest.model_validate(body).model_dump()
        turns[2222] = "not a message"
        with pytest.raises(GatewayError) as info:
            wire.validated(Recorded, body, "Anthropic Messages")
    finally:
        wire._adapter = adapter
    assert info.value.param == "messages" and "messages.2222: Input should be a valid dictionary" in str(
        info.value.message
    )
    ints = {"model": "m", "input": ["a", *[1] * 600]}  # a union takes one member for the whole list
    with pytest.raises(GatewayError):
        wire.validated(ResponsesRequest, ints, "OpenAI Responses")
