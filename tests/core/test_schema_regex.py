"""Client-written schema patterns run under a time limit and otherwise judge exactly as jsonschema does."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from ratchet_core.contract import SCHEMA_MISMATCH, SCHEMA_UNUSABLE, check_answer
from ratchet_core.schema_regex import bounded

SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"}},
    "patternProperties": {"^x-": {"type": "integer"}},
    "additionalProperties": False,
}
KEYS = st.sampled_from(["code", "x-a", "x-", "y", "xa", "X-b"])
VALUES = st.one_of(st.sampled_from(["AB-12", "ab-12", "AB-", "ZZ-0009"]), st.integers(-3, 3), st.none())


@given(st.dictionaries(KEYS, VALUES, max_size=4))
@settings(max_examples=200, deadline=None)
def test_same_verdict_as_jsonschema(instance):
    plain = Draft202012Validator(SCHEMA)
    ours = bounded(Draft202012Validator)(SCHEMA)
    assert ours.is_valid(instance) == plain.is_valid(instance)


def test_catastrophic_pattern_is_unusable_not_a_stall():
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "s",
                "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a|aa)+$"}}},
            },
        },
    }
    answer = {"role": "assistant", "content": orjson.dumps({"a": "a" * 40 + "b"}).decode()}
    v = check_answer(
        body, answer, "stop"
    )  # plain `re` takes minutes on this input: the search's limit stops it
    assert v is not None and v.kind == SCHEMA_UNUSABLE and "PatternTimeout" in v.detail
    answer_ok = {"role": "assistant", "content": '{"a": "b"}'}
    assert check_answer(body, answer_ok, "stop").kind == SCHEMA_MISMATCH  # a quick mismatch stays a mismatch


def _body(pattern: str | None = None, schema: dict | None = None) -> dict:
    schema = schema or {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    return {
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }


def test_a_pattern_costly_to_compile_is_unusable_and_never_compiled(monkeypatch):
    """``(a{1000}){1000}`` held the GIL for a second inside ``regex.compile``; now it is never compiled."""
    import regex

    from ratchet_core import schema_regex

    def refuse(pattern, *a, **k):
        raise AssertionError(f"compiled {pattern!r}")

    monkeypatch.setattr(regex, "compile", refuse)
    answer = {"role": "assistant", "content": '{"a": "a"}'}
    for pattern in ("(a{1000}){1000}", "a{100000}", r"(\p{L}{100}){1000}", "x" * 1001):
        assert schema_regex.too_costly(pattern)
        v = check_answer(_body(pattern), answer, "stop")
        assert v is not None and v.kind == SCHEMA_UNUSABLE and "PatternTooCostly" in v.detail, v
    assert not schema_regex.too_costly("^[A-Z]{2}-[0-9]{1,64}$")


def test_a_checks_deadline_stops_every_later_search():
    from ratchet_core import schema_regex

    with schema_regex.deadline(0):
        try:
            schema_regex.search("^a$", "a")
        except schema_regex.PatternTimeout:
            pass
        else:
            raise AssertionError("a search after the deadline ran")
    assert schema_regex.search("^a$", "a")  # outside a check: no deadline


def test_a_schema_over_64_kib_is_unusable():
    big = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "d" * 60} for i in range(1200)},
    }
    answer = {"role": "assistant", "content": '{"p1": "x"}'}
    v = check_answer(_body(schema=big), answer, "stop")
    assert v is not None and v.kind == SCHEMA_UNUSABLE and "64 KiB" in v.detail
