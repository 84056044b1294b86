"""The one text format: targets parse back to the same answer by the task's own comparator."""

from __future__ import annotations

import json

import pytest

from ratchet_core.chat_format import (
    ASSISTANT_HEADER,
    parse_completion,
    render_prompt,
    render_target,
    training_pair,
)
from ratchet_core.workloads import TASKS, compare, get_workload


@pytest.mark.parametrize("task", ["tickets", "extract", "tools"])
def test_target_parses_back_to_an_answer_the_comparator_accepts(task):
    for example in get_workload(task).generate(40, seed=3):
        text = render_target(example.expected)
        got = parse_completion(text, example.tools)
        assert compare(TASKS[task].comparator, example.expected, got), (text, got)


def test_tool_calls_render_name_first_with_canonical_arguments():
    call = {"id": "x", "type": "function", "function": {"name": "refund", "arguments": '{"b": 1, "a": "é"}'}}
    text = render_target({"role": "assistant", "content": None, "tool_calls": [call, call]})
    assert text.split("\n") == ['<tool_call>{"name":"refund","arguments":{"a":"é","b":1}}'] * 2
    msg = parse_completion(text, [{"type": "function", "function": {"name": "refund", "parameters": {}}}])
    assert msg["content"] is None and len(msg["tool_calls"]) == 2
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"a": "é", "b": 1}
    assert msg["tool_calls"][0]["id"] != msg["tool_calls"][1]["id"]


def test_undeclared_tool_or_broken_json_stays_content():
    tools = [{"type": "function", "function": {"name": "refund", "parameters": {}}}]
    for text in (
        '<tool_call>{"name":"wipe_disk","arguments":{}}',
        '<tool_call>{"name":"refund"',
        "refund me",
    ):
        msg = parse_completion(text, tools)
        assert msg["tool_calls"] is None and msg["content"] == text


def test_text_after_a_new_turn_header_is_cut():
    assert parse_completion("billing\n<|user|>\nmore")["content"] == "billing"


def test_prompt_carries_every_part_and_ends_with_the_assistant_header():
    tools = [
        {
            "type": "function",
            "function": {"name": "get_order", "parameters": {"properties": {"order_id": {}}}},
        }
    ]
    prompt = render_prompt(
        [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "U"}]}],
        tools,
        {"type": "json_object"},
    )
    assert prompt.endswith(ASSISTANT_HEADER)
    for part in ("get_order(order_id)", "json_object", "<|system|>\nS\n", "<|user|>\nU\n"):
        assert part in prompt


def test_training_row_without_final_answer_says_what_to_do():
    with pytest.raises(ValueError, match="last message"):
        training_pair({"messages": [{"role": "user", "content": "hi"}]})
