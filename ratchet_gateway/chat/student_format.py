"""What the gateway sends a student endpoint and how it reads the answer, so vLLM and Ratchet's student server serve
alike (ARCHITECTURE.md, "The path of a request").

- :func:`student_request`: the body as the client sent it (redacted), ``tools`` and ``response_format``
  included: vLLM renders the tools with the base's chat template and constrains decoding to the response
  format (structured outputs), as Ratchet's student server does. Two changes:

  - ``tools`` and ``response_format`` with their keys sorted: the request as the ledger stores it (canonical
    JSON), so as the night trains and evaluates on it. A template that writes a tool as JSON (``tool | tojson``:
    Qwen2.5's) writes its keys in the order it gets them, and structured decoding writes a JSON schema's
    properties in the order the schema lists them; the client's order would be a prompt, and an answer order,
    the adapter never saw (the trainer writes a json_schema answer with sorted keys too:
    ``ratchet_core.chat_format.training_pair``);
  - a ``tool_choice`` of ``required`` or a named function becomes ``auto``. vLLM decodes those two under a JSON
    grammar of its own (a list of ``{"name", "parameters"}`` objects, or the bare arguments) instead of the
    base's native tool-call format the adapter was trained to write; with ``auto`` the model writes its native
    format and the tool parser reads it. The contract guard still holds the answer to the client's own
    ``tool_choice`` (``ratchet_core.contract``);
  - ``temperature: 0`` and ``top_p: 1``, whatever the client sent: a version is certified on its greedy answers
    (the night's evaluation, Ratchet's student server), and vLLM samples unless told not to (at 1.0, or at the
    base's ``generation_config.json`` defaults without ``--generation-config vllm``), so what is served would not
    be what was certified. A client's sampling settings reach the teacher unchanged.
- :func:`read_tool_calls`: an answer whose tool calls came back as text (an endpoint without a tool parser:
  ``vllm serve`` without ``--enable-auto-tool-choice --tool-call-parser hermes``) has them read from the text as
  vLLM's hermes parser would (``ratchet_core.tool_calls``), so the guard and the comparator see the same message
  from either endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ratchet_core.tool_calls import read_text_calls


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def student_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body to send the student (module docstring)."""
    out = dict(body)
    if isinstance(body.get("response_format"), Mapping):
        out["response_format"] = _sorted_keys(body["response_format"])
    if isinstance(body.get("tools"), list):
        out["tools"] = _sorted_keys(body["tools"])
        choice = body.get("tool_choice")
        if choice == "required" or isinstance(choice, Mapping):
            out["tool_choice"] = "auto"
    out["temperature"] = 0
    out["top_p"] = 1
    return out


def read_tool_calls(body: Mapping[str, Any], resp: dict[str, Any]) -> None:
    """Read tool calls a student answered as text into each choice's message, in place (module docstring)."""
    if not body.get("tools") or body.get("tool_choice") == "none":
        return
    for choice in resp.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and read_text_calls(message) and choice.get("finish_reason") != "length":
            choice["finish_reason"] = "tool_calls"  # a cut answer stays cut for the guard
