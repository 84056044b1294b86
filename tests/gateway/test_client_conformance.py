"""The clients apps and agents are built on, through the gateway, on the teacher path and the student path: the
OpenAI Agents SDK (an agent with a function tool, streamed and not), the ``openai`` client's ``responses.create``
and ``responses.stream``, the Anthropic SDK (``messages.create`` and ``messages.stream``, with a tool) and
LangChain's ``ChatOpenAI(use_responses_api=True)``, all real and pinned (pyproject's ``dev`` extra).

The gateway runs in front of the demo teacher; the student path is a signed manifest that serves the test's task
live from a student endpoint (the demo teacher as a stand-in student, ``conftest.student_url``). Each test's task
names what it checks, and its ledger rows must say which API it came through and who served it. Nothing reaches
the network: the Agents SDK's tracing (which would export to OpenAI) is turned off (``set_tracing_disabled``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import anthropic
import jsonschema
import openai
import pytest

from .conftest import API_KEY, STUDENT_VERSION, running_gateway, sealed_rows

PATHS = ("teacher", "student")
TASKS = ("responses", "agents", "anthropic", "langchain")
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": CITY,
}
REPLY = {
    "type": "object",
    "properties": {"label": {"type": "string"}, "urgent": {"type": "boolean"}},
    "required": ["label", "urgent"],
    "additionalProperties": False,
}


def _task(name: str, path: str) -> str:
    return f"{name}-{path}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, teacher_url, student_url):
    """One gateway for the module; every ``*-student`` task is live on the stand-in student."""
    with running_gateway(tmp_path_factory.mktemp("clients"), teacher_url, student_url) as g:
        live = {"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0}
        g.publish(**{_task(name, "student"): live for name in TASKS})
        yield g


@pytest.fixture(scope="module", autouse=True)
def _no_tracing() -> Iterator[None]:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # the Agents SDK exports traces to OpenAI by default
    yield


def _rows(gateway, task: str) -> list[dict]:
    gateway.drain()
    rows = [
        r for r in sealed_rows(gateway.settings.lake_root) if r["task"] == task and r["kind"] == "request"
    ]
    return sorted(rows, key=lambda r: r["ts"])


def _served(rows: list[dict], api: str, path: str) -> None:
    """Every row came through `api`, answered 200 by `path` (the student: the live version)."""
    assert rows and {r["api"] for r in rows} == {api}, [r["api"] for r in rows]
    assert {(r["served_by"], r["status_code"]) for r in rows} == {(path, 200)}
    if path == "student":
        assert {r["version"] for r in rows} == {STUDENT_VERSION}


def _openai(gateway, task: str, cls=openai.OpenAI):
    return cls(
        base_url=gateway.url + "/v1",
        api_key=API_KEY,
        max_retries=0,
        timeout=30,
        default_headers={"X-Ratchet-Task": task},
    )


@pytest.mark.parametrize("path", PATHS)
def test_openai_responses_create_and_stream(gateway, path):
    task = _task("responses", path)
    client = _openai(gateway, task)
    raw = client.responses.with_raw_response.create(
        model="ratchet", instructions="Use the tools.", input="What is the weather in Paris?", tools=[WEATHER]
    )
    assert raw.headers["x-ratchet-served-by"] == path
    first = raw.parse()
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and first.status == "completed"
    jsonschema.validate(json.loads(call.arguments), CITY)
    assert first.id == "resp_" + raw.headers["x-ratchet-request-id"].removeprefix("req_")
    assert (
        first.usage.input_tokens > 0
        and first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    )

    # the tool's result goes back as input items; the model answers in text
    follow = client.responses.create(
        model="ratchet",
        instructions="Use the tools.",
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
        ],
        tools=[WEATHER],
    )
    assert follow.output_text and follow.output[0].type == "message"

    structured = client.responses.create(
        model="ratchet",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Label: my parcel is late"}]}],
        text={"format": {"type": "json_schema", "name": "reply", "schema": REPLY, "strict": True}},
        max_output_tokens=200,
    )
    jsonschema.validate(json.loads(structured.output_text), REPLY)

    with client.responses.stream(model="ratchet", input="Tell me something.") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and final.output_text == deltas
    assert [e.sequence_number for e in events] == list(range(len(events)))

    with client.responses.stream(model="ratchet", input="Weather in Oslo?", tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (call,) = final.output
    assert call.type == "function_call" and call.arguments == args
    jsonschema.validate(json.loads(args), CITY)
    _served(_rows(gateway, task), "responses", path)


@pytest.mark.parametrize("path", PATHS)
def test_openai_agents_sdk_agent_with_a_function_tool(gateway, path):
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool

    task = _task("agents", path)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        cities.append(city)
        return f"sunny in {city}"

    model = OpenAIResponsesModel(model="ratchet", openai_client=_openai(gateway, task, openai.AsyncOpenAI))
    agent = Agent(
        name="forecaster", instructions="Answer weather questions.", tools=[get_weather], model=model
    )

    async def run() -> tuple[str, str, set[str]]:
        done = await Runner.run(agent, "What is the weather in Paris?")
        streamed = Runner.run_streamed(agent, "What is the weather in Rome?")
        raw = {ev.data.type async for ev in streamed.stream_events() if ev.type == "raw_response_event"}
        return done.final_output, streamed.final_output, raw

    final, streamed_final, raw = asyncio.run(run())
    assert len(cities) == 2 and all(cities)  # each run called the tool once, then answered
    assert final and streamed_final and isinstance(final, str)
    assert {"response.created", "response.output_text.delta", "response.function_call_arguments.delta"} <= raw
    rows = _rows(gateway, task)
    assert len(rows) == 4  # per run: the call to the tool, then the answer with its result
    assert [bool(r["tool_calls"]) for r in rows] == [True, False, True, False]
    _served(rows, "responses", path)
    # the tool's result reached the model as a chat tool message, as the night will train on it
    assert json.loads(rows[1]["messages"])[-1]["role"] == "tool"


@pytest.mark.parametrize("path", PATHS)
def test_anthropic_sdk_messages_with_a_tool(gateway, path):
    task = _task("anthropic", path)
    client = anthropic.Anthropic(
        base_url=gateway.url, api_key=API_KEY, max_retries=0, default_headers={"X-Ratchet-Task": task}
    )
    tool = {"name": "get_weather", "description": "The weather in a city.", "input_schema": CITY}
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    raw = client.messages.with_raw_response.create(
        model="ratchet", max_tokens=200, system="Use the tools.", messages=[ask], tools=[tool]
    )
    assert raw.headers["x-ratchet-served-by"] == path
    msg = raw.parse()
    (use,) = msg.content
    assert use.type == "tool_use" and use.name == "get_weather" and msg.stop_reason == "tool_use"
    jsonschema.validate(use.input, CITY)
    assert msg.id == "msg_" + raw.headers["x-ratchet-request-id"].removeprefix("req_")

    answer = client.messages.create(
        model="ratchet",
        max_tokens=200,
        system="Use the tools.",
        tools=[tool],
        messages=[
            ask,
            {"role": "assistant", "content": [use.model_dump(include={"type", "id", "name", "input"})]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
        ],
    )
    assert answer.stop_reason == "end_turn" and answer.content[0].type == "text" and answer.content[0].text

    with client.messages.stream(model="ratchet", max_tokens=200, messages=[ask], tools=[tool]) as stream:
        final = stream.get_final_message()
    (use,) = final.content
    assert use.type == "tool_use" and final.stop_reason == "tool_use" and final.usage.input_tokens > 0
    jsonschema.validate(use.input, CITY)

    with client.messages.stream(
        model="ratchet", max_tokens=200, messages=[{"role": "user", "content": "Hi"}]
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text and final.content[0].text == text and final.stop_reason == "end_turn"

    # the key as a bearer token works too (Anthropic's auth_token)
    bearer = anthropic.Anthropic(
        base_url=gateway.url, auth_token=API_KEY, max_retries=0, default_headers={"X-Ratchet-Task": task}
    )
    assert bearer.messages.create(model="ratchet", max_tokens=50, messages=[ask]).content
    _served(_rows(gateway, task), "messages", path)


@pytest.mark.parametrize("path", PATHS)
def test_langchain_chat_openai_on_the_responses_api(gateway, path):
    from langchain_openai import ChatOpenAI

    task = _task("langchain", path)
    llm = ChatOpenAI(
        model="ratchet",
        base_url=gateway.url + "/v1",
        api_key=API_KEY,
        use_responses_api=True,
        max_retries=0,
        default_headers={"X-Ratchet-Task": task},
    )
    reply = llm.invoke("Tell me something.")
    assert reply.text and reply.usage_metadata["input_tokens"] > 0
    with_tools = llm.bind_tools([WEATHER])
    (call,) = with_tools.invoke("What is the weather in Lima?").tool_calls
    assert call["name"] == "get_weather"
    jsonschema.validate(call["args"], CITY)
    chunks = list(with_tools.stream("What is the weather in Lima?"))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert [c["name"] for c in merged.tool_calls] == ["get_weather"]
    _served(_rows(gateway, task), "responses", path)
