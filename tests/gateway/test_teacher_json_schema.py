"""A teacher without strict json_schema (``RATCHET_TEACHER_JSON_SCHEMA=json_object``): the gateway sends it
json_object with the schema in the system message, the row keeps the client's json_schema and records how the
teacher got it and whether its answer kept the schema (the answer-contract guard); the capability file that
``ratchet doctor teacher --apply`` writes is read per teacher."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from ratchet_core.settings import SettingsError, load_settings
from ratchet_core.teacher_capabilities import record
from ratchet_gateway.schema_prompt import for_teacher, schema_in_system
from tests.serve import serve_in_thread

from .conftest import API_KEY, buffered, running_gateway, sealed_rows

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _json_schema(schema: dict, name: str = "reply") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def test_schema_goes_into_the_system_message_and_nothing_else_changes() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": _json_schema(CITY_SCHEMA),
    }
    moved = schema_in_system(body)
    assert moved is not None and moved["response_format"] == {"type": "json_object"}
    assert moved["messages"][1] == {"role": "user", "content": "hi"}
    system = moved["messages"][0]
    assert system["role"] == "system" and 'named "reply"' in system["content"]
    assert json.dumps(CITY_SCHEMA, sort_keys=True, separators=(",", ":")) in system["content"]
    assert body["response_format"]["type"] == "json_schema" and len(body["messages"]) == 1  # not changed

    with_system = {**body, "messages": [{"role": "system", "content": "Be brief."}, *body["messages"]]}
    moved = schema_in_system(with_system)
    assert moved is not None and len(moved["messages"]) == 2
    assert moved["messages"][0]["content"].startswith("Be brief.\n\nAnswer with one JSON object")

    plain = {"model": "m", "messages": body["messages"], "response_format": {"type": "json_object"}}
    assert schema_in_system(plain) is None
    assert for_teacher(plain, "json_object") == (plain, False)
    assert for_teacher(body, "strict") == (body, False)


def test_the_capability_file_is_per_teacher_and_the_variable_wins(tmp_path: Path, monkeypatch) -> None:
    for k in ("RATCHET_TEACHER_JSON_SCHEMA", "RATCHET_TEACHER_MODEL", "RATCHET_TEACHER_API_BASE"):
        monkeypatch.delenv(k, raising=False)
    base = "http://teacher.example/v1"
    record(tmp_path, "openai/gpt-x", base + "/", "json_object", "2026-01-01T00:00:00Z", {"seed": "ok"})
    assert (tmp_path / "teacher.json").stat().st_mode & 0o077 == 0
    assert load_settings(
        home=tmp_path, teacher_model="openai/gpt-x", teacher_api_base=base
    ).teacher_json_schema == ("json_object")
    assert load_settings(
        home=tmp_path, teacher_model="openai/gpt-y", teacher_api_base=base
    ).teacher_json_schema == ("strict")
    monkeypatch.setenv("RATCHET_TEACHER_JSON_SCHEMA", "strict")
    assert load_settings(
        home=tmp_path, teacher_model="openai/gpt-x", teacher_api_base=base
    ).teacher_json_schema == ("strict")
    monkeypatch.setenv("RATCHET_TEACHER_JSON_SCHEMA", "loose")
    with pytest.raises(SettingsError, match="RATCHET_TEACHER_JSON_SCHEMA"):
        load_settings(home=tmp_path)
    monkeypatch.delenv("RATCHET_TEACHER_JSON_SCHEMA")
    (tmp_path / "teacher.json").write_text("{not json")
    with pytest.raises(SettingsError, match="teacher.json is not JSON.*doctor teacher --apply"):
        load_settings(home=tmp_path)


def _recording(app, seen: list[dict]):
    """`app` (an ASGI app) with every request body appended to `seen`."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        body, replay = await buffered(receive)
        if body:
            seen.append(orjson.loads(body))
        await app(scope, replay, send)

    return wrapped


def test_the_gateway_sends_the_schema_in_the_system_message_and_the_row_records_it(tmp_path: Path) -> None:
    import openai

    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app

    seen: list[dict] = []
    teacher = _recording(create_app(DemoTeacherConfig(model="demo-teacher")), seen)
    with (
        serve_in_thread(teacher) as turl,
        running_gateway(tmp_path, turl + "/v1", teacher_json_schema="json_object") as g,
    ):
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        messages = [{"role": "user", "content": "Say something."}]
        # the demo teacher answers json_object with {"answer": ...}: valid for ANSWER_SCHEMA, not for CITY_SCHEMA
        kept = client.chat.completions.with_raw_response.create(
            model="ratchet", messages=messages, response_format=_json_schema(ANSWER_SCHEMA)
        )
        stream = client.chat.completions.create(
            model="ratchet", messages=messages, response_format=_json_schema(CITY_SCHEMA, "city"), stream=True
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        plain = client.chat.completions.with_raw_response.create(model="ratchet", messages=messages)
        with pytest.raises(
            openai.BadRequestError, match="ratchet_teacher_schema"
        ):  # a client cannot write the note
            client.chat.completions.create(
                model="ratchet",
                messages=messages,
                extra_body={"ratchet_teacher_schema": {"sent_as": "forged"}},
            )
        g.drain()
        rows = {r["request_id"]: r for r in sealed_rows(g.settings.lake_root)}

    assert json.loads(kept.parse().choices[0].message.content).keys() == {"answer"}
    assert json.loads(streamed).keys() == {"answer"}  # served as the teacher answered it
    first, second, third = seen
    for got, schema in ((first, ANSWER_SCHEMA), (second, CITY_SCHEMA)):
        assert got["response_format"] == {"type": "json_object"}
        assert got["messages"][0]["role"] == "system" and got["messages"][1:] == messages
        assert json.dumps(schema, sort_keys=True, separators=(",", ":")) in got["messages"][0]["content"]
    assert third["messages"] == messages and "response_format" not in third

    row = rows[kept.headers["x-ratchet-request-id"]]
    assert json.loads(row["response_format"]) == _json_schema(ANSWER_SCHEMA)  # the client's contract is kept
    assert json.loads(row["messages"]) == messages
    assert json.loads(row["params"])["ratchet_teacher_schema"] == {"sent_as": "json_object", "violation": ""}
    (stream_row,) = [r for r in rows.values() if r["stream"]]
    assert json.loads(stream_row["params"])["ratchet_teacher_schema"] == {
        "sent_as": "json_object",
        "violation": "schema_mismatch",
    }
    assert stream_row["contract_violation"] == ""  # that column is evidence about student versions only
    plain_row = rows[plain.headers["x-ratchet-request-id"]]
    assert "ratchet_teacher_schema" not in json.loads(plain_row["params"])  # a client cannot write the note

    # the night: an answer outside the client's schema is never a label; the others are
    import pyarrow.parquet as pq

    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.traffic import consolidate_traffic

    art = tmp_path / "art"
    days = {r["day"] for r in rows.values()}
    labelled: set[str] = set()
    for day in days:
        consolidate_traffic(g.settings.lake_root, art, day)
        labelled |= {e["request_id"] for e in pq.read_table(build_examples(art, day).path).to_pylist()}
    assert stream_row["request_id"] not in labelled
    assert {row["request_id"], plain_row["request_id"]} <= labelled
