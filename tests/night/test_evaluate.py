"""Evaluation helpers: per-task outcomes by each task's comparator (pluggable), fail-closed on missing answers."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request

from ratchet_assets.night import evaluate as ev
from ratchet_stats.canonical import canonical_json
from tests.evidence.auditor import key_of
from tests.serve import serve_in_thread


def _row(i: int, task: str, content: str) -> ev.GoldenRow:
    return ev.GoldenRow(
        key=key_of(i),
        task=task,
        messages=[{"role": "user", "content": f"q{i}"}],
        tools=None,
        response_format=None,
        expected={"role": "assistant", "content": content, "tool_calls": None},
    )


def _answer(content: str | None, confidence: float = 0.9) -> ev.Answer:
    message = None if content is None else {"role": "assistant", "content": content, "tool_calls": None}
    return ev.Answer(message, confidence)


def test_outcomes_group_by_task_and_use_each_comparator():
    rows = [_row(0, "tickets", "billing"), _row(1, "extract", '{"a": 1}'), _row(2, "tickets", "refund")]
    answers = [_answer(" billing "), _answer('{ "a" : 1 }'), _answer("billing")]
    out = {t.task: t for t in ev.task_outcomes(rows, answers)}
    assert list(out) == ["extract", "tickets"]
    assert out["tickets"].correct == [True, False]  # label: exact after strip
    assert out["extract"].correct == [True]  # json: canonical equality, whitespace does not matter
    assert out["tickets"].comparator == "label" and out["extract"].comparator == "json"
    assert out["tickets"].baseline_correct is None


def test_missing_answer_is_wrong_and_baseline_is_paired():
    rows = [_row(0, "tickets", "billing"), _row(1, "tickets", "refund")]
    answers = [_answer(None, 0.0), _answer("refund")]
    live = ("v1-aaaaaaaa", [_answer("billing"), _answer("billing")])
    [t] = ev.task_outcomes(rows, answers, {"tickets": live})
    assert t.correct == [False, True] and t.baseline_correct == [True, False]
    assert t.baseline_version == "v1-aaaaaaaa"
    with pytest.raises(ValueError, match="baseline answers"):
        ev.task_outcomes(rows, answers, {"tickets": ("v1", [_answer("x")])})


def test_custom_comparator_plugs_in(monkeypatch):
    monkeypatch.setitem(ev.COMPARATORS, "sentiment", lambda exp, got: exp["content"][0] == got["content"][0])
    rows = [_row(0, "sentiment", "positive"), _row(1, "sentiment", "negative")]
    [t] = ev.task_outcomes(rows, [_answer("pos"), _answer("positive")])
    assert t.correct == [True, False] and t.comparator == "custom:sentiment"


def test_golden_leaf_is_canonical_row():
    row = _row(3, "tickets", "billing")
    assert row.leaf() == canonical_json(
        {
            "example_key": key_of(3),
            "task": "tickets",
            "messages": row.messages,
            "tools": None,
            "response_format": None,
            "answer": row.expected,
        }
    )
    keys, rows = ev.golden_commitments([row])
    assert (keys.size, rows.size) == (1, 1)


def test_unreachable_endpoint_says_what_to_do():
    from tests.serve import free_port

    with pytest.raises(ev.EvaluationError, match="student-server"):
        ev.loaded_models(f"http://127.0.0.1:{free_port()}/v1")


def test_each_golden_row_asks_for_at_most_twice_the_teacher_answer_plus_16_tokens():
    """The endpoint sees max_tokens = min(cap, 2 * UTF-8 bytes of the answer text + 16) per row."""
    seen: list[tuple[str, int]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        seen.append((body["messages"][-1]["content"], body["max_tokens"]))
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "billing"},
                    "logprobs": {
                        "content": [{"token": "b", "logprob": -0.01, "bytes": [98], "top_logprobs": []}]
                    },
                }
            ],
        }

    long_answer = "é" * 300  # 600 UTF-8 bytes: 2 * 600 + 16 is over the cap
    rows = [_row(0, "tickets", "billing"), _row(1, "extract", '{"a": 1}'), _row(2, "tickets", long_answer)]
    with serve_in_thread(app) as base:
        answers = ev.answer_rows(f"{base}/v1", "", "v1-x", rows, max_tokens=512)
    assert [a.message["content"] for a in answers] == ["billing"] * 3
    assert seen == [("q0", 2 * 7 + 16), ("q1", 2 * 8 + 16), ("q2", 512)]
