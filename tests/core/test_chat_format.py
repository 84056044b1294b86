"""One prompt format, the base's own: every request rendered by the tokenizer's chat template as vLLM renders it,
the training target what the template renders for the answer turn, tool calls read back as vLLM's hermes parser
reads them."""

from __future__ import annotations

import json

import pytest

from ratchet_core.chat_format import (
    RATCHET_CHAT_TEMPLATE,
    ChatTemplateError,
    conversation,
    render_answer,
    render_prompt,
    template_tools,
    training_pair,
)
from ratchet_core.tool_calls import answer_message, parse_hermes
from ratchet_core.workloads import TASKS, compare, get_workload


@pytest.fixture(scope="module")
def demo_tokenizer(demo_base):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_base)


def test_the_demo_base_ships_ratchets_format_as_its_chat_template(demo_base, demo_tokenizer):
    config = json.loads((demo_base / "tokenizer_config.json").read_text())
    assert config["chat_template"] == RATCHET_CHAT_TEMPLATE == demo_tokenizer.chat_template
    tools = get_workload("tools").generate(1, seed=1)[0].tools
    prompt = render_prompt(
        demo_tokenizer,
        [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "U"}]}],
        tools,
    )
    # compact: tools as signatures, each turn a header line, ending with the header the answer follows
    assert prompt.startswith("<|tools|>\nlookup_order(order_id)\nrefund_order(order_id,amount)\n")
    assert prompt.endswith("<|system|>\nS\n<|user|>\nU\n<|assistant|>\n")


@pytest.mark.parametrize("task", ["tickets", "extract", "tools"])
def test_the_answer_turn_is_the_target_and_parses_back_to_the_answer(task, demo_tokenizer):
    eos = demo_tokenizer.eos_token
    for example in get_workload(task).generate(30, seed=3):
        prompt, target = training_pair(
            demo_tokenizer, {"messages": [*example.messages, example.expected], "tools": example.tools}
        )
        assert prompt == render_prompt(demo_tokenizer, example.messages, example.tools)
        assert target.endswith(eos + "\n")  # the answer turn ends with EOS: decoding stops there
        got = answer_message(target[: -len(eos) - 1], example.tools)
        assert compare(TASKS[task].comparator, example.expected, got), (target, got)


def test_a_json_schema_answer_is_trained_in_the_schemas_sorted_key_order(demo_tokenizer):
    """The student gets the schema with its keys sorted (as the ledger stores it) and structured decoding writes
    properties in the schema's order: the target is the teacher's JSON value in that order."""
    example = get_workload("extract").generate(1, seed=4)[0]
    row = {"messages": [*example.messages, example.expected], "response_format": example.response_format}
    _, target = training_pair(demo_tokenizer, row)
    content = target.removesuffix("</s>\n")
    assert list(json.loads(content)) == sorted(example.response_format["json_schema"]["schema"]["properties"])
    assert json.loads(content) == json.loads(example.expected["content"]) and " " not in content
    assert list(json.loads(example.expected["content"])) != sorted(
        json.loads(content)
    )  # the teacher's order differs


def test_tool_calls_are_hermes_blocks_with_canonical_arguments(demo_tokenizer):
    call = {"id": "x", "type": "function", "function": {"name": "refund", "arguments": '{"b": 1, "a": "é"}'}}
    answer = {"role": "assistant", "content": None, "tool_calls": [call, call]}
    text = render_answer(demo_tokenizer, [{"role": "user", "content": "hi"}], None, answer)
    block = '<tool_call>{"name":"refund","arguments":{"a":"é","b":1}}</tool_call>'
    assert text == f"{block}\n{block}</s>\n"
    content, calls = parse_hermes(text.removesuffix("</s>\n"))
    assert (
        content is None
        and [json.loads(c["function"]["arguments"]) for c in calls] == [{"a": "é", "b": 1}] * 2
    )
    assert calls[0]["id"] != calls[1]["id"]


def test_hermes_reading_is_vllms():
    calls = lambda text: [(c["function"]["name"], c["function"]["arguments"]) for c in parse_hermes(text)[1]]  # noqa: E731
    # the content is the text before the first call; an unclosed last call reads to the end
    assert (
        parse_hermes('Sure.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>')[0] == "Sure.\n"
    )
    assert calls(
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"y": "é"}}'
    ) == [
        ("a", "{}"),
        ("b", '{"y": "é"}'),
    ]
    # anything but {"name", "arguments"} objects: no calls, the whole text is the content
    for text in ('<tool_call>{"name": "a"}</tool_call>', "<tool_call>{broken", "refund me"):
        assert parse_hermes(text) == (text, [])
    # tool_choice none: vLLM runs no parser
    assert answer_message('<tool_call>{"name": "a", "arguments": {}}', [{}], "none")["tool_calls"] is None


def test_the_conversation_and_tools_are_what_vllm_gives_the_template():
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "name": "u",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"k": 2}'}}
            ],
        },
        {"role": "tool", "content": "ok", "tool_call_id": "c"},
    ]
    assert conversation(messages) == [
        {"role": "user", "content": "a\nb", "name": "u"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"k": 2}}}],
        },
        {"role": "tool", "content": "ok", "tool_call_id": "c"},
    ]
    # pydantic's model_dump of vLLM's tool model: declared fields first (None when absent), extra ones kept
    assert template_tools([{"type": "function", "function": {"name": "f", "strict": True}}]) == [
        {
            "type": "function",
            "function": {"name": "f", "description": None, "parameters": None, "strict": True},
        }
    ]


def test_a_base_without_a_chat_template_is_refused(demo_tokenizer):
    bare = type(demo_tokenizer).from_pretrained(demo_tokenizer.name_or_path)
    bare.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        render_prompt(bare, [{"role": "user", "content": "hi"}])


def test_a_template_whose_answer_turn_does_not_follow_its_prompt_is_refused(demo_tokenizer):
    odd = type(demo_tokenizer).from_pretrained(demo_tokenizer.name_or_path)
    odd.chat_template = (
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}ANSWER:{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="cannot be trained on"):
        render_answer(odd, [{"role": "user", "content": "hi"}], None, {"role": "assistant", "content": "x"})


def test_training_row_without_final_answer_says_what_to_do(demo_tokenizer):
    with pytest.raises(ValueError, match="last message"):
        training_pair(demo_tokenizer, {"messages": [{"role": "user", "content": "hi"}]})
