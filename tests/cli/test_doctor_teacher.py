"""`ratchet doctor teacher` against real servers on loopback: the demo teacher passes every check; a deliberately
limited provider (no logprobs, no strict json_schema, refuses `seed`, ignores `stop`, streams without usage) gets
exactly those warnings and failures and exit 1; `--apply` records json_object for that teacher, which the settings
then read; the spend cap stops requests before they are sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ratchet_cli.doctor_cmd import doctor
from ratchet_core.settings import describe, load_settings
from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app
from tests.serve import serve_in_thread

LIMITED_MODEL = "limited-1"
PARIS = '{"city":"Paris","population":2100000}'


def limited_provider(seen: list[dict]) -> Starlette:
    """An OpenAI-compatible provider with the gaps real ones have: it refuses `seed` and strict json_schema,
    never returns logprobs, ignores `stop`, and sends no usage in streams. JSON mode answers a fixed object."""

    def error(status: int, message: str, param: str) -> Response:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
        return JSONResponse(body, status)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": LIMITED_MODEL, "object": "model"}]})

    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        seen.append(body)
        if body.get("model") != LIMITED_MODEL:
            return error(404, f"model {body.get('model')} does not exist", "model")
        if "seed" in body:
            return error(400, "Unrecognized request argument supplied: seed", "seed")
        rf = body.get("response_format") or {}
        if rf.get("type") == "json_schema":
            return error(400, "response_format json_schema is not supported by this model", "response_format")
        message: dict = {"role": "assistant", "content": " ".join(str(i) for i in range(1, 31))}
        if body.get("tools"):
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif rf.get("type") == "json_object":
            message["content"] = PARIS
        limit = body.get("max_tokens") or 1000
        words = (message["content"] or "").split(" ")
        finish = "tool_calls" if body.get("tools") else "stop"
        if message["content"] and len(words) > limit:
            message["content"], finish = " ".join(words[:limit]), "length"
        completion = min(len(words), limit)
        usage = {"prompt_tokens": 20, "completion_tokens": completion, "total_tokens": 20 + completion}
        if body.get("stream"):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": LIMITED_MODEL, "choices": []}
            parts = [
                {
                    **chunk,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": message["content"]}}],
                },
                {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            ]
            text = "".join(f"data: {json.dumps(p)}\n\n" for p in parts) + "data: [DONE]\n\n"
            return Response(text, media_type="text/event-stream")
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return JSONResponse(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": LIMITED_MODEL,
                "choices": [choice],
                "usage": usage,
            }
        )

    return Starlette(
        routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
    )


@pytest.fixture(scope="module")
def demo_teacher() -> Iterator[str]:
    with serve_in_thread(create_app(DemoTeacherConfig(api_key="sk-demo-key"))) as url:
        yield url + "/v1"


def _doctor(home: Path, base: str, *args: str, model: str = "openai/demo-teacher", key: str = "sk-demo-key"):
    env = {
        "RATCHET_HOME": str(home),
        "RATCHET_TEACHER_MODEL": model,
        "RATCHET_TEACHER_API_BASE": base,
        "RATCHET_TEACHER_API_KEY": key,
        "RATCHET_TEACHER_JSON_SCHEMA": None,
    }
    return CliRunner().invoke(doctor, ["teacher", *args], env=env, catch_exceptions=False)


def test_every_check_passes_against_the_demo_teacher(demo_teacher: str, tmp_path: Path) -> None:
    res = _doctor(tmp_path, demo_teacher, "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    results = {c["name"]: c["result"] for c in report["checks"]}
    assert results == {
        "model": "ok",
        "answer": "ok",
        "logprobs": "ok",
        "json_object": "ok",
        "json_schema (strict)": "ok",
        "tools": "ok",
        "max_tokens": "ok",
        "stop": "ok",
        "seed": "ok",
        "temperature": "ok",
        "stream": "ok",
    }
    assert report["requests"] == 10 and 0 < report["spend_usd"] <= report["cap_usd"] == 0.05
    assert report["spend_usd"] == pytest.approx(sum(c["cost_usd"] for c in report["checks"]))
    assert report["json_schema"] == {"current": "strict", "source": "default", "recommended": "strict"}
    assert "sk-demo-key" not in res.output

    table = _doctor(tmp_path, demo_teacher)
    assert table.exit_code == 0 and "teacher OK" in table.output
    assert "json_schema (strict)  ok      an answer valid for the schema" in table.output


def test_a_limited_provider_gets_its_warnings_and_failures(tmp_path: Path) -> None:
    seen: list[dict] = []
    with serve_in_thread(limited_provider(seen)) as url:
        res = _doctor(tmp_path, url + "/v1", "--json", model=f"openai/{LIMITED_MODEL}", key="sk-limited")
        applied = _doctor(tmp_path, url + "/v1", "--apply", model=f"openai/{LIMITED_MODEL}", key="sk-limited")

    assert res.exit_code == 1, res.output
    report = json.loads(res.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert {name: c["result"] for name, c in checks.items()} == {
        "model": "ok",
        "answer": "ok",
        "logprobs": "warn",
        "json_object": "ok",
        "json_schema (strict)": "warn",
        "json_schema via json_object": "ok",
        "tools": "ok",
        "max_tokens": "ok",
        "stop": "warn",
        "seed": "fail",
        "temperature": "ok",
        "stream": "warn",
    }
    assert "json_schema is not supported" in checks["json_schema (strict)"]["detail"]
    assert "Unrecognized request argument supplied: seed" in checks["seed"]["detail"]
    assert "no logprobs" in checks["logprobs"]["detail"]
    assert "without usage" in checks["stream"]["detail"]
    assert report["json_schema"]["recommended"] == "json_object" and report["applied"] is None

    # the fallback request is the gateway's own rewrite: json_object, the schema in the system message
    fallback = [b for b in seen if (b.get("response_format") or {}).get("type") == "json_object"][-1]
    assert fallback["messages"][0]["role"] == "system"
    assert '"population":{"type":"integer"}' in fallback["messages"][0]["content"]
    assert all(b.get("max_tokens") for b in seen)  # every request carried a token limit

    # --apply: recorded for this teacher; the settings read it as RATCHET_TEACHER_JSON_SCHEMA
    assert applied.exit_code == 1
    assert "recorded json_schema=json_object" in applied.output and "seed" in applied.output
    doc = json.loads((tmp_path / "teacher.json").read_text())
    (entry,) = doc["teachers"].values()
    assert entry["model"] == f"openai/{LIMITED_MODEL}" and entry["json_schema"] == "json_object"
    assert entry["checks"]["seed"] == "fail"
    settings = load_settings(
        home=tmp_path, teacher_model=f"openai/{LIMITED_MODEL}", teacher_api_base=url + "/v1"
    )
    assert settings.teacher_json_schema == "json_object"
    row = next(r for r in describe(settings) if r["name"] == "teacher_json_schema")
    assert row["source"] == "home"
    # another teacher inherits nothing
    other = load_settings(home=tmp_path, teacher_model="openai/gpt-4o", teacher_api_base=url + "/v1")
    assert other.teacher_json_schema == "strict"


def test_the_spend_cap_stops_requests_before_they_are_sent(demo_teacher: str, tmp_path: Path) -> None:
    res = _doctor(tmp_path, demo_teacher, "--json", "--max-usd", "0.0015")
    assert res.exit_code == 0, res.output  # checks not run are warnings
    report = json.loads(res.stdout)
    not_sent = [c for c in report["checks"] if c["detail"].startswith("not sent")]
    assert not_sent and all(c["result"] == "warn" and c["cost_usd"] == 0 for c in not_sent)
    assert "would pass the $0.0015 cap" in not_sent[0]["detail"]
    assert 0 < report["requests"] < 10 and report["spend_usd"] <= 0.0015

    nothing = json.loads(_doctor(tmp_path, demo_teacher, "--json", "--max-usd", "0").stdout)
    assert nothing["requests"] == 0 and nothing["spend_usd"] == 0
    assert {c["result"] for c in nothing["checks"]} == {"ok", "warn"}  # only the (free) model listing ran
