"""Input rules: what a client request must look like before the gateway does anything with it (else a 400).

- **Task names** are 1-64 characters of ``A-Z a-z 0-9 . _ -`` starting with a letter or digit
  (``ratchet_core.names.TASK_NAME_PATTERN``; so no ``..``, no control characters, nothing a path, a header or
  a log line could misread). A task comes from ``metadata.ratchet_task``, else the ``X-Ratchet-Task`` header,
  else ``default`` (an empty value counts as absent). The header is decoded as UTF-8, never Latin-1
  (:func:`task_from_header`).
- **Nesting depth**: no JSON array/object nested deeper than :data:`MAX_NESTING_DEPTH` (64; real chat bodies
  use about 10). Checked on the raw bytes before parsing (:func:`json_too_deep`) or on a parsed value
  (:func:`value_too_deep`), both iteratively, so a hostile body costs a bounded loop and never a
  ``RecursionError`` in a later recursive step (redaction, validation, canonical JSON).
- **Size in values**: a body larger than 64 KiB holds at most :data:`MAX_JSON_VALUES` (100,000) JSON values
  (array elements and object members; a 4 MiB conversation of real messages holds a few thousand). Every step
  after parsing (validation, redaction, the ledger row, freeing the body) costs per value, so a 4 MiB flood of
  ``[]`` or ``0`` is a 400, not a second of the gateway's time.
- **Strict types** for the fields the gateway reads: ``max_tokens: true``, ``stream: "yes"``, ``seed: false``,
  ``temperature: "0.5"`` are rejected, as OpenAI rejects them. :data:`StrictBool`, :data:`StrictInt`,
  :data:`Number`, :data:`StrictStr` are pydantic types for the request models; ints stay valid numbers.

Errors are :class:`InputRuleError` (a ``ValueError``) with the OpenAI ``param`` and a message that says what to
send instead; the gateway turns them into ``400 invalid_request_error``. Messages never echo more than a short,
escaped prefix of the offending value.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Strict, StringConstraints

from ratchet_core import json_pieces
from ratchet_core.names import TASK_NAME_PATTERN, is_valid, rule, shown

DEFAULT_TASK = "default"
TASK_HEADER = "x-ratchet-task"
MAX_NESTING_DEPTH = 64
MAX_JSON_VALUES = 100_000

_TASK_RULE = rule("task")


class InputRuleError(ValueError):
    """A request that breaks an input rule: `message` says what to send instead; `param` is the field."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


# Task names ---------------------------------------------------------------------------------------------------
def validate_task_name(name: Any, source: str = "metadata.ratchet_task") -> str:
    """`name` if it is a valid task name, else InputRuleError naming `source`."""
    if not isinstance(name, str):
        raise InputRuleError(f"{source} must be a string: {_TASK_RULE}", source, "invalid_task")
    if not is_valid("task", name):
        raise InputRuleError(
            f"{source} {shown(name)} is not a valid task name: {_TASK_RULE}. Rename the task and retry.",
            source,
            "invalid_task",
        )
    return name


def task_from_header(value: str | bytes | None) -> str | None:
    """The ``X-Ratchet-Task`` header as a task name (None when absent or empty).

    HTTP frameworks (Starlette) hand header values over decoded as Latin-1; the bytes are recovered and decoded
    as strict UTF-8, so a UTF-8 name is read as the client wrote it (and rejected by the charset) instead of
    becoming a second, mis-decoded task.
    """
    if value is None:
        return None
    raw = value if isinstance(value, bytes) else value.encode("latin-1", errors="strict")
    if not raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputRuleError(
            f"X-Ratchet-Task is not UTF-8 text: {_TASK_RULE}", "X-Ratchet-Task", "invalid_task"
        ) from None
    return validate_task_name(text, "X-Ratchet-Task")


def resolve_task(metadata: Any, header: str | bytes | None) -> str:
    """The request's task: ``metadata.ratchet_task``, else the ``X-Ratchet-Task`` header, else ``default``;
    whichever is used must be a valid task name (a missing or empty value falls through to the next)."""
    if isinstance(metadata, dict):
        given = metadata.get("ratchet_task")
        if given is not None and given != "":
            return validate_task_name(given, "metadata.ratchet_task")
    return task_from_header(header) or DEFAULT_TASK


# Nesting depth ------------------------------------------------------------------------------------------------
def json_too_deep(raw: bytes, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether the JSON text `raw` nests arrays/objects more than `limit` deep (checked before parsing).

    Linear in ``len(raw)``: an ordinary body (at most `limit` opening brackets) costs two ``bytes.count`` calls;
    any other is scanned by ``json_pieces.structure`` (NumPy, a block at a time, brackets inside strings are text:
    a quote counts only after an even run of backslashes, RFC 8259 §7). A regex that skipped strings was quadratic
    on an unterminated string full of ``\\"`` (40 KB held the event loop for seconds). Malformed JSON is left to
    the parser: the answer is only about depth.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    return json_pieces.max_depth(raw) > limit


def value_too_deep(value: Any, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether a parsed JSON value nests lists/dicts more than `limit` deep (iterative; a top-level container
    is depth 1, as in :func:`json_too_deep`)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return False


def check_nesting(raw: bytes, limit: int = MAX_NESTING_DEPTH) -> None:
    """InputRuleError when the body nests deeper than `limit` (call before parsing it)."""
    if json_too_deep(raw, limit):
        raise nesting_error(limit)


def nesting_error(limit: int = MAX_NESTING_DEPTH) -> InputRuleError:
    """The 400 of a body nested deeper than `limit`."""
    return InputRuleError(
        f"the request body nests arrays/objects more than {limit} levels deep; flatten it and retry",
        None,
        "nesting_too_deep",
    )


# Strict field types (pydantic) ----------------------------------------------------------------------------------
StrictBool = Annotated[bool, Strict()]  # true/false only: not "yes", 1, "true"
StrictInt = Annotated[int, Strict()]  # not true/false, 5.0 or "5"
Number = Annotated[float, Strict()]  # an int or a float: not true/false or "0.5"
StrictStr = Annotated[str, Strict()]
TaskName = Annotated[str, Strict(), StringConstraints(pattern=f"^{TASK_NAME_PATTERN}$")]
