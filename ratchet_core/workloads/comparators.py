"""Is an answer right? One comparator per kind of task, applied to assistant messages.

- ``label``: the contents are equal after stripping surrounding whitespace.
- ``json``: both contents parse as JSON and are equal as canonical JSON (RFC 8785: numbers are IEEE doubles, so
  ``20`` equals ``20.0``; ``true`` never equals ``1``; key order is irrelevant). Unparsable or non-finite
  (NaN/Infinity) content is wrong.
- ``tool_call``: the same number of tool calls, with the same function names and canonical-JSON-equal arguments,
  in order (call ids are ignored). When the expected message has no tool calls the contents are compared as labels.

Tasks Ratchet does not know (free text) are compared as exact text (``label``).

Custom comparators: ``register_comparator("sentiment_loose", fn)`` makes ``custom:sentiment_loose`` a comparator a
task policy (``ratchet_core.task_policy``, ``ratchet admin task set NAME --comparator custom:sentiment_loose``) can
name; ``fn(expected_message, got_message) -> bool``. Register it in a module every process that judges answers
imports (the gateway and the night's code location).
A policy naming a comparator that is not registered in a process is an error there, never a silent fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ratchet_stats.canonical import loads_strict

from .base import COMPARATORS


class _NotCanonical(ValueError):
    pass


def parse_json(text: Any) -> Any:
    """Parse strict JSON text (no NaN/Infinity); raises ValueError when it is not JSON."""
    if not isinstance(text, str | bytes | bytearray):
        raise _NotCanonical("not text")
    return loads_strict(text)


def canonical_form(value: Any) -> Any:
    """A hashable value equal for two JSON values exactly when their canonical JSON (RFC 8785) is equal."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        f = float(value)
        if not math.isfinite(f):
            raise _NotCanonical("non-finite number")
        return ("num", f)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, Mapping):
        return ("obj", tuple(sorted((str(k), canonical_form(v)) for k, v in value.items())))
    if isinstance(value, Sequence):
        return ("arr", tuple(canonical_form(v) for v in value))
    raise _NotCanonical(f"{type(value).__name__} is not a JSON value")


def json_equal(a: Any, b: Any) -> bool:
    """Canonical-JSON equality of two parsed values; False if either is not a finite JSON value."""
    try:
        return canonical_form(a) == canonical_form(b)
    except _NotCanonical:
        return False


def _content(msg: Mapping[str, Any] | None) -> str:
    c = (msg or {}).get("content")
    return c if isinstance(c, str) else ""


def _calls(msg: Mapping[str, Any] | None) -> list:
    return list((msg or {}).get("tool_calls") or [])


def _call_parts(call: Any) -> tuple[str, Any]:
    fn = (call.get("function") or {}) if isinstance(call, Mapping) else {}
    args = fn.get("arguments")
    return str(fn.get("name") or ""), args


def label_equal(expected: Mapping[str, Any], got: Mapping[str, Any] | None) -> bool:
    return _content(expected).strip() == _content(got).strip() and not _calls(got)


def json_content_equal(expected: Mapping[str, Any], got: Mapping[str, Any] | None) -> bool:
    try:
        return json_equal(parse_json(_content(expected)), parse_json(_content(got)))
    except ValueError:
        return False


def tool_calls_equal(expected: Mapping[str, Any], got: Mapping[str, Any] | None) -> bool:
    want, have = _calls(expected), _calls(got)
    if not want:
        return label_equal(expected, got)
    if len(want) != len(have):
        return False
    for w, h in zip(want, have, strict=True):
        (wn, wa), (hn, ha) = _call_parts(w), _call_parts(h)
        if wn != hn:
            return False
        try:
            wa = parse_json(wa) if isinstance(wa, str) else wa
            ha = parse_json(ha) if isinstance(ha, str) else ha
        except ValueError:
            return False
        if not json_equal(wa, ha):
            return False
    return True


_BY_COMPARATOR = {"label": label_equal, "json": json_content_equal, "tool_call": tool_calls_equal}
assert set(_BY_COMPARATOR) == set(COMPARATORS)


Comparator = Callable[[Mapping[str, Any], "Mapping[str, Any] | None"], bool]
CUSTOM: dict[str, Comparator] = {}


class UnknownComparator(KeyError):
    """A policy names ``custom:<name>`` but no comparator of that name is registered in this process."""


def register_comparator(name: str, fn: Comparator) -> str:
    """Register ``fn`` as ``custom:<name>``; returns that comparator name."""
    name = name.removeprefix("custom:")
    if not name or name in _BY_COMPARATOR:
        raise ValueError(f"custom comparator name {name!r} is empty or shadows a built-in one")
    CUSTOM[name] = fn
    return f"custom:{name}"


def comparator_fn(comparator: str) -> Comparator:
    """The function of a comparator name (``label`` | ``json`` | ``tool_call`` | ``custom:<name>``)."""
    if comparator in _BY_COMPARATOR:
        return _BY_COMPARATOR[comparator]
    fn = CUSTOM.get(comparator.removeprefix("custom:")) if comparator.startswith("custom:") else None
    if fn is None:
        raise UnknownComparator(
            f"comparator {comparator!r} is not registered here: register it with "
            "ratchet_core.workloads.comparators.register_comparator in a module this process imports"
        )
    return fn
