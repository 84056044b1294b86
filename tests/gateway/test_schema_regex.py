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
