"""What the demo teacher says, and the numbers around it: token pieces, log-probabilities, usage.

Pure functions, cheap enough for the request path (a few regular expressions per request).

- Tokens are whitespace/punctuation pieces: a word with its leading spaces, or one punctuation mark
  (``\\s*\\w+|\\s*[^\\w\\s]|\\s+``); their concatenation is the text.
- Usage is counted as a real OpenAI-style teacher bills it, with the same counter the gateway uses for a
  student-served prompt (``ratchet_core.pricing``: ``litellm.token_counter``, tiktoken): the prompt's messages,
  chat framing, tools and response_format; the completion's text; plus the configured reasoning tokens in
  completion_tokens (as reasoning models bill them). So the demo's receipts price the student exactly as the
  teacher bills the same requests. ``count_tokens`` (~4 characters a token) is only the max_tokens cut.
- Requests of no built-in task get an answer inside their own contract (:func:`contract_reply`): a call to a
  declared tool with schema-valid arguments, or a JSON instance of the ``json_schema``
  (``ratchet_gateway.demo_teacher.instances``). So do requests of a built-in task whose declared tools or schema
  are not the task's own (:func:`answer`): like a real model, the demo teacher never calls a function the request
  did not declare, nor answers a schema the request did not ask for.
- Log-probabilities are deterministic in (text, position): the chosen token gets p in [0.74, 0.999], the
  alternatives share what is left, so a top-k list is a valid sub-distribution.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ratchet_core import pricing
from ratchet_core.contract import check_answer
from ratchet_core.workloads import DESCRIPTIONS, detect_task, solve
from ratchet_core.workloads.base import compact_json, last_user_text, tool_call_id
from ratchet_core.workloads.tickets import LABELS

from .instances import instance_for

_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")


def pieces(text: str) -> list[str]:
    """Split text into token pieces whose concatenation is `text`."""
    return _PIECE.findall(text)


def count_tokens(chars: int) -> int:
    """~4 characters per token, at least 1 for any non-empty text."""
    return 0 if chars <= 0 else max(1, math.ceil(chars / 4))


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    return model if isinstance(model, str) and model else "demo-teacher"


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """Usage of a request, as the teacher's tokenizer counts it (``ratchet_core.pricing.prompt_tokens`` for the
    requested model: messages with their framing, tools, response_format)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    rf = body.get("response_format") if isinstance(body.get("response_format"), Mapping) else None
    return pricing.prompt_tokens(_model(body), messages, tools, rf)


def completion_tokens(body: Mapping[str, Any], text: str) -> int:
    """Usage of a generated text (without reasoning tokens), as the teacher's tokenizer counts it."""
    return pricing.text_tokens(_model(body), text)


def unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from its arguments (SHA-256)."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _alternatives(tok: str) -> list[str]:
    core = tok.strip()
    lead = tok[: len(tok) - len(tok.lstrip())]
    alts = [lead + core.upper(), lead + core + "s", " the", ",", " a", "\n"]
    return [a for a in dict.fromkeys(alts) if a != tok]


def token_logprobs(text: str, top_logprobs: int = 0, salt: str = "") -> list[dict]:
    """OpenAI `logprobs.content` entries for `text` (token, logprob, bytes, top_logprobs)."""
    out = []
    for i, tok in enumerate(pieces(text)):
        u = unit(salt, text, i)
        p = 0.999 - 0.259 * u**3
        lp = math.log(p)
        top = []
        if top_logprobs > 0:
            top.append({"token": tok, "logprob": lp, "bytes": list(tok.encode())})
            rest, share = 1.0 - p, 0.6
            for alt in _alternatives(tok)[: top_logprobs - 1]:
                top.append({"token": alt, "logprob": math.log(rest * share), "bytes": list(alt.encode())})
                share *= 0.5
        out.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": top})
    return out


def generic_reply(messages: Sequence[Mapping[str, Any]], json_mode: bool) -> str:
    """A short deterministic answer to a request of no built-in task."""
    text = last_user_text(messages)
    words = len(text.split())
    tag = hashlib.sha256(text.encode()).hexdigest()[:8]
    reply = f"Demo teacher reply {tag}: I read your message ({words} words) and have no specific answer."
    return compact_json({"answer": reply}) if json_mode else reply


def _wrongify(task: str, message: dict) -> dict:
    """A deliberately wrong answer of the same shape (for tests of everything downstream of the teacher)."""
    message = dict(message)
    comparator = DESCRIPTIONS[task].comparator if task in DESCRIPTIONS else "label"
    if comparator == "label":
        content = message.get("content") or ""
        if content in LABELS:
            message["content"] = LABELS[(LABELS.index(content) + 1) % len(LABELS)]
        else:
            message["content"] = content + " (wrong)"
    elif comparator == "json":
        obj = orjson.loads(message["content"])
        obj["amount"] = round((obj.get("amount") or 0) + 1.0, 2)
        message["content"] = compact_json(obj)
    else:
        calls = []
        for call in message["tool_calls"]:
            args = orjson.loads(call["function"]["arguments"])
            args["order_id"] = "Z-00000"
            calls.append({**call, "function": {**call["function"], "arguments": compact_json(args)}})
        message["tool_calls"] = calls
    return message


def resolve_task(body: Mapping[str, Any], header_task: str | None) -> str | None:
    """The request's built-in task: metadata.ratchet_task, then X-Ratchet-Task, then the system prompt."""
    metadata = body.get("metadata")
    for task in (metadata.get("ratchet_task") if isinstance(metadata, Mapping) else None, header_task):
        if isinstance(task, str) and task in DESCRIPTIONS:
            return task
    return detect_task(body.get("messages") or [], body.get("tools"), body.get("response_format"))


def _declared_functions(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The function definitions of the request's ``tools`` (type ``function``), in order."""
    out = []
    for tool in body.get("tools") or []:
        fn = (
            tool.get("function")
            if isinstance(tool, Mapping) and tool.get("type", "function") == "function"
            else None
        )
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out.append(fn)
    return out


def _function_to_call(body: Mapping[str, Any], text: str) -> Mapping[str, Any] | None:
    """Which declared function to call, as a model honouring ``tool_choice`` would: none for ``none``; the named
    one; after a tool result, none unless a call is required; else the one the user's text names, else the
    first."""
    functions = _declared_functions(body)
    choice = body.get("tool_choice")
    if not functions or choice == "none":
        return None
    if isinstance(choice, Mapping):
        named = (
            (choice.get("function") or {}).get("name")
            if isinstance(choice.get("function"), Mapping)
            else None
        )
        return next((f for f in functions if f["name"] == named), None)
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], Mapping) else {}
    if last.get("role") == "tool" and choice != "required":
        return None
    lowered = text.lower()
    for fn in functions:
        if fn["name"].lower() in lowered or fn["name"].replace("_", " ").lower() in lowered:
            return fn
    return functions[0]


def contract_reply(body: Mapping[str, Any], salt: str = "") -> dict:
    """The answer to a request of no built-in task, inside the contract it declares: a call to a declared function
    with arguments valid for its parameters schema (``tool_choice`` honoured), else a JSON instance valid for a
    ``json_schema`` response format, else the generic reply (a JSON object for ``json_object``). Deterministic in
    the request (and `salt`, which gives another valid answer)."""
    messages = body.get("messages") or []
    text = last_user_text(messages)
    seed = hashlib.sha256(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS) + salt.encode()).hexdigest()
    fn = _function_to_call(body, text)
    if fn is not None:
        params = fn.get("parameters") if isinstance(fn.get("parameters"), Mapping) else {"type": "object"}
        args = instance_for(dict(params), seed)
        call = {
            "id": tool_call_id(seed, 0),
            "type": "function",
            "function": {
                "name": fn["name"],
                "arguments": compact_json(args if isinstance(args, dict) else {}),
            },
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    rf = body.get("response_format")
    kind = rf.get("type") if isinstance(rf, Mapping) else None
    spec = rf.get("json_schema") if kind == "json_schema" else None
    if isinstance(spec, Mapping) and isinstance(spec.get("schema"), Mapping | bool):
        content = compact_json(instance_for(spec["schema"], seed))
    else:
        reply = generic_reply(messages, False) + (" (wrong)" if salt else "")
        content = compact_json({"answer": reply}) if kind in ("json_object", "json_schema") else reply
    return {"role": "assistant", "content": content, "tool_calls": None}


def _declares_own_schema(body: Mapping[str, Any], task: str) -> bool:
    """Whether the request asks for `task`'s own ``json_schema`` (always true for a task without one)."""
    own = DESCRIPTIONS[task].response_format
    if not own or own.get("type") != "json_schema":
        return True
    rf = body.get("response_format")
    spec = rf.get("json_schema") if isinstance(rf, Mapping) and rf.get("type") == "json_schema" else None
    return isinstance(spec, Mapping) and spec.get("schema") == own["json_schema"].get("schema")


def answer(body: Mapping[str, Any], task: str | None, wrong: bool) -> dict:
    """The assistant message {role, content, tool_calls} the demo teacher returns for this request.

    A built-in task's own answer only inside the request's contract: its schema only when the request declares
    it, its tool call only to a function the request declares with arguments valid there, ``tool_choice``
    honoured (``ratchet_core.contract.check_answer``, the gateway's own guard); otherwise, as for any other
    request, :func:`contract_reply`. ``wrong`` gives a wrong answer of the same shape (another valid one outside
    the workloads)."""
    if task is not None and _declares_own_schema(body, task):
        msg = solve(task, body.get("messages") or [], body.get("tools"), body.get("response_format"))
        if check_answer(body, msg, "stop") is None:
            return _wrongify(task, msg) if wrong else msg
    return contract_reply(body, salt="wrong" if wrong else "")


def generated_text(message: Mapping[str, Any]) -> str:
    """The text a model produced for this message: its content, or its tool calls' names and arguments."""
    if message.get("tool_calls"):
        return "".join(c["function"]["name"] + c["function"]["arguments"] for c in message["tool_calls"])
    return message.get("content") or ""


__all__ = [
    "answer",
    "compact_json",
    "completion_tokens",
    "contract_reply",
    "count_tokens",
    "generated_text",
    "pieces",
    "prompt_tokens",
    "resolve_task",
    "token_logprobs",
    "tool_call_id",
    "unit",
]
