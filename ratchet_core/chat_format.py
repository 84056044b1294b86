"""The ONE way a chat request becomes the student's text: the base model's own chat template, as vLLM renders it.

Training, Ratchet's student server and vLLM render a request with the same call, the tokenizer's
``apply_chat_template(conversation, tools=..., add_generation_prompt=True)``, so an adapter sees at serving the
bytes it was trained on (ARCHITECTURE.md, "The path of a request"). What the template gets is what vLLM gives
it for a ``/v1/chat/completions`` request (``vllm.entrypoints.chat_utils.parse_chat_messages`` with the
"string" content format, and ``tool.model_dump()`` of each tool):

- :func:`conversation`: each message as ``{"role", "content": text}`` (text parts joined with newlines, no
  content = ``""``), plus ``tool_calls`` on an assistant message with every ``arguments`` JSON string parsed
  into its object (an empty one: ``{}``), ``tool_call_id`` on a tool message and ``name`` when it is a string;
- :func:`template_tools`: each tool as ``{"type": "function", "function": {"name", "description",
  "parameters", ...}, ...}`` with absent declared fields as ``None`` and extra fields kept (pydantic's
  ``model_dump`` of vLLM's ``ChatCompletionToolsParam``, whose models allow extra fields).

``response_format`` is NOT rendered: vLLM constrains decoding to it instead (structured outputs), and so does
Ratchet's student server (``ratchet_gateway.student_server.constrained``).

The training target is what the template renders for the answer turn: the conversation with the answer rendered
without a generation prompt, minus the prompt (:func:`render_answer`; the prompt must be a prefix of it, or the
template cannot be trained on and says so). A ``json_schema`` answer is written as structured decoding will
write it: keys in the order of the schema the student gets, sorted (:func:`structured_answer`). Tool calls are
in the template's own format (hermes-style ``<tool_call>`` blocks for Qwen2.5-style templates and the demo
base's), which a vLLM tool parser reads back (``ratchet_core.tool_calls``).

The demo base ships :data:`RATCHET_CHAT_TEMPLATE`, Ratchet's compact format, as its template (in its
``tokenizer_config.json``): tools as signatures ``name(arg1,arg2)``, a tool call as
``<tool_call>{"name":..,"arguments":{..}}</tool_call>`` (canonical JSON), each answer ended by the EOS token. It
is short because the demo base reads bytes. A base without a template is refused (:class:`ChatTemplateError`):
guessing one would train an adapter on a prompt its server never sends.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Ratchet's compact format, the demo base's chat template (Jinja, rendered by transformers with trim_blocks and
# lstrip_blocks: every newline of the output is a '\n' inside a string, none comes from the layout).
RATCHET_CHAT_TEMPLATE = (
    "{%- if tools -%}{{- '<|tools|>\\n' -}}"
    "{%- for tool in tools -%}{%- set fn = tool.function if tool.function is defined else tool -%}"
    "{%- set props = fn.parameters.properties if fn.parameters and fn.parameters.properties else {} -%}"
    "{{- fn.name ~ '(' ~ (props | join(',')) ~ ')\\n' -}}{%- endfor -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = 'system' if message.role == 'developer' else message.role -%}"
    "{{- '<|' ~ role ~ '|>\\n' -}}"
    "{%- if message.role == 'assistant' -%}{{- message.content or '' -}}"
    "{%- for call in (message.tool_calls or []) -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    "{%- if message.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>{\"name\":' ~ (fn.name | tojson) ~ ',\"arguments\":' -}}"
    "{{- (fn.arguments | tojson(separators=(',', ':'), sort_keys=True)) ~ '}</tool_call>' -}}"
    "{%- endfor -%}{{- eos_token ~ '\\n' -}}"
    "{%- else -%}{{- (message.content or '') ~ '\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)

# vLLM's content-part types whose text it keeps (chat_utils._parse_chat_message_content_part).
_TEXT_PARTS = ("text", "input_text", "output_text", "refusal", "thinking")


class ChatTemplateError(ValueError):
    """The base cannot render chat requests the way it is served: no chat template, or one that cannot be trained
    on (its render of a conversation with the answer does not start with its render of the prompt)."""


def chat_template(tokenizer: Any) -> str:
    """The tokenizer's chat template (the default one when it has several); ChatTemplateError when it has none."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError(
            f"the base model's tokenizer ({getattr(tokenizer, 'name_or_path', '?')}) has no chat template: "
            "Ratchet renders every request with it, as vLLM does. Use an instruct model that ships one "
            "(tokenizer_config.json `chat_template` or chat_template.jinja), or add one to the base folder and "
            "serve the base with the same file (`vllm serve --chat-template`)"
        )
    return template


def template_sha256(template: str) -> str:
    """SHA-256 hex of a chat template's UTF-8 text: the template's part of the base identity."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
                text = part.get(part["type"]) if part["type"] == "refusal" else part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return str(content)


def _arguments(arguments: Any) -> Any:
    """Tool-call arguments as the template sees them: a JSON string parsed into its value, nothing = ``{}``."""
    if not arguments:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments  # vLLM refuses such a request; a training row keeps the text rather than fail
    return arguments


def conversation(messages: list[dict]) -> list[dict]:
    """The messages as vLLM hands them to the chat template (module docstring)."""
    out = []
    for message in messages:
        role = message.get("role", "user")
        item: dict[str, Any] = {"role": role, "content": _text(message.get("content"))}
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = dict(call.get("function") or {})
                fn["arguments"] = _arguments(fn.get("arguments"))
                calls.append({**call, "function": fn})
            item["tool_calls"] = calls
        elif role == "tool" and "tool_call_id" in message:
            item["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            item["name"] = message["name"]
        out.append(item)
    return out


def template_tools(tools: list[dict] | None) -> list[dict] | None:
    """The tools as vLLM hands them to the chat template (module docstring); None without tools."""
    if not tools:
        return None
    out = []
    for tool in tools:
        fn = tool.get("function") or {}
        declared = {
            "name": fn.get("name"),
            "description": fn.get("description"),
            "parameters": fn.get("parameters"),
        }
        extra = {k: v for k, v in fn.items() if k not in declared}
        rest = {k: v for k, v in tool.items() if k not in ("type", "function")}
        out.append({"type": tool.get("type", "function"), "function": {**declared, **extra}, **rest})
    return out


def render_prompt(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt text of a chat request: its conversation and tools through the base's chat template, with the
    generation prompt (the header the answer follows)."""
    chat_template(tokenizer)
    return tokenizer.apply_chat_template(
        conversation(messages), tools=template_tools(tools), add_generation_prompt=True, tokenize=False
    )


def render_answer(tokenizer: Any, messages: list[dict], tools: list[dict] | None, answer: dict) -> str:
    """What the template renders for `answer` after `messages`: the whole conversation rendered without a
    generation prompt, minus :func:`render_prompt` (which must be its prefix)."""
    prompt = render_prompt(tokenizer, messages, tools)
    full = tokenizer.apply_chat_template(
        conversation([*messages, answer]),
        tools=template_tools(tools),
        add_generation_prompt=False,
        tokenize=False,
    )
    if not full.startswith(prompt):
        raise ChatTemplateError(
            "the base's chat template renders a conversation ending with the answer so that it does not start "
            "with its render of the prompt (the generation prompt differs from the answer's header): an adapter "
            "cannot be trained on it; fix the template so both renders agree"
        )
    return full[len(prompt) :]


def structured_answer(answer: dict, response_format: dict | None) -> dict:
    """`answer` as structured decoding writes it for `response_format`: for a ``json_schema``, a JSON content
    re-written with its keys sorted and no spaces (the schema the student gets has its keys sorted, as the ledger
    stores it, and decoding writes properties in the schema's order: ``ratchet_gateway.chat.student_format``);
    the same JSON value, so the same answer to the comparator and the guard. Anything else unchanged."""
    content = answer.get("content")
    if not response_format or response_format.get("type") != "json_schema" or not isinstance(content, str):
        return answer
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return answer
    return {**answer, "content": json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)}


def training_pair(tokenizer: Any, row: dict) -> tuple[str, str]:
    """(prompt, target) of one train.jsonl row in OpenAI chat fine-tuning format (last message = the answer);
    the answer as structured decoding writes it (:func:`structured_answer`)."""
    messages = row.get("messages") or []
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError(
            "a training row must end with the assistant's answer: add it as the last message "
            '{"role": "assistant", ...} (OpenAI chat fine-tuning format)'
        )
    tools, answer = row.get("tools"), structured_answer(messages[-1], row.get("response_format"))
    return render_prompt(tokenizer, messages[:-1], tools), render_answer(
        tokenizer, messages[:-1], tools, answer
    )
