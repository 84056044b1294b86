"""PII in every stored field (issue 13 item 6): a request carrying e-mails (ASCII and Unicode), a card number with
dots, a phone number and a provider key in its messages, participant name, ``user``, ``stop``, ``metadata``,
tool definitions, ``response_format`` schema and an unknown parameter leaves none of them in a sealed segment,
the student never sees them, the teacher gets the client's body as sent, and the redaction map still puts the
client's values back into a student answer."""

from __future__ import annotations

import copy
import json

import openai
import orjson
import pytest

from tests.core.test_redact_request import EMAIL, PLANTED, UNI_EMAIL, _body

from .conftest import API_KEY, STUDENT_VERSION, running_gateway, sealed_rows
from .test_student_redaction import recording_upstream

# how a planted value could survive in a row: as sent, lower-cased, or (card, phone) as its digits
_FORMS = [p.lower() for p in PLANTED] + ["4111111111111111", "442079460958", "example.com", "correo.es"]


def _leaks(obj) -> list[str]:
    text = orjson.dumps(obj, default=str).decode().lower()
    return [f for f in _FORMS if f in text]


def _full_body() -> dict:
    body = _body()
    body["model"] = "ratchet"
    body["some_future_param"] = {"note": f"call me at {EMAIL}"}
    return body


def _restorable_body() -> dict:
    """PII everywhere, but a contract the echoing student can keep (one declared tool it may call)."""
    return {
        "model": "ratchet",
        "messages": [{"role": "user", "name": EMAIL, "content": f"Please reply to {UNI_EMAIL}."}],
        "user": EMAIL,
        "stop": [f"END {EMAIL}"],
        "metadata": {"ratchet_task": "echo", "customer": EMAIL},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "send",
                    "description": f"Send mail (the admin is {EMAIL})",
                    "parameters": {
                        "type": "object",
                        "properties": {"to": {"type": "string", "description": f"like {EMAIL}"}},
                    },
                },
            }
        ],
    }


def _post(g, body: dict) -> tuple[str, dict]:
    c = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)
    known = {k: v for k, v in body.items() if k not in ("metadata", "some_future_param", "functions")}
    extra = {k: body[k] for k in ("metadata", "some_future_param", "functions") if k in body}
    raw = c.chat.completions.with_raw_response.create(**known, extra_body=extra)
    return raw.headers["x-ratchet-served-by"], raw.parse().model_dump()


@pytest.mark.slow
def test_no_pii_from_any_field_reaches_a_sealed_segment_or_the_student(tmp_path):
    with (
        recording_upstream() as (url, seen),
        # a provider-specific field the operator lets through (RATCHET_PROVIDER_EXTRA_FIELDS): stored redacted too
        running_gateway(tmp_path, url, url, provider_extra_fields="some_future_param") as g,
    ):
        g.publish(**{"support.tickets-v2": {"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0}})
        body = _full_body()
        sent = copy.deepcopy(body)
        served, _ = _post(g, body)
        # the student answered, but its answer breaks the request's json_schema: the teacher served
        assert served == "teacher"
        g.publish(echo={"stage": "live", "version": STUDENT_VERSION, "threshold": 0.0})
        served, answer = _post(g, _restorable_body())
        assert served == "student"
        msg = answer["choices"][0]["message"]
        assert msg["content"] == f"Write to {UNI_EMAIL}."  # the client's own value, restored
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"to": UNI_EMAIL}
        g.drain()

        student = [b for b in seen if b["model"] == STUDENT_VERSION]
        teacher = [b for b in seen if b["model"] != STUDENT_VERSION]
        assert len(student) == 2 and student[0]["user"] != sent["user"]
        for b in student:
            assert _leaks(b) == [], b
        # the teacher is the client's chosen provider: it gets the body as sent (the task travels as a header)
        full = next(b for b in teacher if b.get("some_future_param"))
        assert full["messages"] == sent["messages"] and full["response_format"] == sent["response_format"]
        assert full["user"] == sent["user"] and full["tools"] == sent["tools"]

        rows = sealed_rows(g.settings.lake_root)
        assert {r["kind"] for r in rows} >= {"request"} and len(rows) >= 2
        for r in rows:
            assert _leaks(r) == [], {k: v for k, v in r.items() if _leaks({k: v})}
        req = next(r for r in rows if r["kind"] == "request" and r["task"] == "support.tickets-v2")
        params = json.loads(req["params"])
        assert set(params) >= {"user", "stop", "metadata", "temperature", "max_tokens", "some_future_param"}
        assert params["metadata"]["customer"].startswith("<EMAIL_") and params["temperature"] == 0.2
        stored_rf = json.loads(req["response_format"])
        assert stored_rf["json_schema"]["schema"]["required"] == ["to", "card", "items"]  # structure kept
        assert json.loads(req["tools"])["tool_choice"] == sent["tool_choice"]


def test_erasure_by_end_user_finds_the_redacted_user():
    """`user` is stored redacted now; `ratchet erase --user <e-mail>` still finds the rows (either form)."""
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa

    from ratchet_assets.governance.erase import ErasureScope
    from ratchet_core.redact import redact_request

    stored = redact_request({"user": EMAIL, "temperature": 0})
    params = orjson.dumps({k: v for k, v in stored.body.items()}).decode()
    assert EMAIL not in params
    now = datetime.now(UTC)
    rows = pa.table(
        {
            "request_id": ["r-alice", "r-someone"],
            "client": ["app", "app"],
            "ts": pa.array([now - timedelta(minutes=1)] * 2, pa.timestamp("us", tz="UTC")),
            "params": [params, '{"user": "someone"}'],
            "messages": ["[]", "[]"],
            "answer": ["a", "b"],
            "tool_calls": [None, None],
        }
    )
    matcher = ErasureScope(users=(EMAIL,)).matcher(now)
    assert matcher.matched_request_ids(rows) == {"r-alice"}
