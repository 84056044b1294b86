"""The body a student endpoint gets, and a student that answers tool calls as text (vLLM without a tool parser):
the gateway reads them hermes-style, the contract guard holds them to the client's own request, and either
endpoint serves the same answer."""

from __future__ import annotations

import json

import openai
import pytest
from fastapi import FastAPI

from ratchet_core.workloads import get_workload
from tests.serve import serve_in_thread

from .conftest import API_KEY, running_gateway

VERSION = "v1-text-tools"


def _text_student(content: str, seen: list[dict]) -> FastAPI:
    """A student endpoint that answers every request with `content` as text, confidently, and keeps the bodies."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(body: dict) -> dict:
        seen.append(body)
        token = {"token": "x", "logprob": -0.001, "bytes": [120], "top_logprobs": []}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "logprobs": {"content": [token]},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }

    return app


@pytest.mark.parametrize(
    "name, arguments, served_by",
    [
        ("cancel_order", {"order_id": "A-12345"}, "student"),
        ("cancel_order", {"order_id": "A-12345", "force": True}, "teacher"),  # breaks the tool's schema
        ("wipe_disk", {}, "teacher"),  # a function the request never declared
    ],
)
def test_text_tool_calls_are_read_and_still_guarded(tmp_path, teacher_url, name, arguments, served_by):
    text = f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
    example = get_workload("tools").generate(1, seed=1)[0]
    seen: list[dict] = []
    with (
        serve_in_thread(_text_student(text, seen)) as surl,
        running_gateway(tmp_path, teacher_url, surl + "/v1") as g,
    ):
        g.publish(tools={"stage": "live", "version": VERSION, "threshold": 0.0})
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
        raw = client.chat.completions.with_raw_response.create(
            model="ratchet",
            messages=example.messages,
            tools=example.tools,
            tool_choice="required",
            temperature=0.9,
            extra_headers={"X-Ratchet-Task": "tools"},
        )
    assert raw.headers["x-ratchet-served-by"] == served_by
    (body,) = seen
    # the student got the tools as the ledger stores them (keys sorted) and `auto` for the client's `required`
    assert body["tool_choice"] == "auto"
    assert [list(t["function"]) for t in body["tools"]] == [sorted(t["function"]) for t in example.tools]
    assert json.dumps(body["tools"]) == json.dumps(body["tools"], sort_keys=True)
    # greedy, as the version was certified, whatever the client's sampling settings
    assert (body["temperature"], body["top_p"]) == (0, 1)
    if served_by == "student":
        choice = raw.parse().choices[0]
        (call,) = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        assert (call.function.name, json.loads(call.function.arguments)) == (name, arguments)
