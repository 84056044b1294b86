"""The one name rule: what a task, client, version, request id or day may look like, everywhere.

Names travel into paths (``adapters/<version>``), headers, log lines, the audit log and signed documents, so a
name is checked once, by the same rule, wherever it enters: a gateway route or header, a CLI option, a row read
back, a document about to be signed. Every rule is a ``fullmatch`` (the same as a pattern anchored with ``\\A``
and ``\\Z``): a trailing newline (``%0a`` in a URL) fails, as ``re.match`` with ``$`` would have let it pass.

| kind | rule |
|---|---|
| task | 1-64 of ``A-Z a-z 0-9 . _ -``, starting with a letter or digit |
| client | 1-64 of ``A-Z a-z 0-9 . _ -``, starting with a letter or digit |
| version | 1-128 of ``A-Z a-z 0-9 . _ -``, starting with a letter or digit, no ``..`` |
| request id | 1-128 of ``A-Z a-z 0-9 . _ -`` |
| episode | 1-128 of ``A-Z a-z 0-9 . _ -`` (an id a client sets on its requests, ``metadata.ratchet_episode``) |
| feedback id | 1-128 of ``A-Z a-z 0-9 . _ -`` (a client's own id of one feedback item) |
| metric | 1-64 of ``A-Z a-z 0-9 . _ -``, starting with a letter (a feedback metric a task's policy declares) |
| day | ``YYYY-MM-DD``, a real calendar day |
| replica | 1-64 of ``A-Z a-z 0-9 . _ -``, starting with a letter or digit (a gateway replica's name) |
| actor | 1-128 of ``A-Z a-z 0-9 . _ - @ +``, starting with a letter or digit (who made an admin change) |
| effect type | 1-64 characters: a name of ``A-Z a-z 0-9 . _ -`` starting with a letter or digit, or two joined by one
``/`` (a client's ``<client>/<name>``) |
| effect key | 1-512 printable ASCII characters, ``!`` to ``~`` (no space, control or bidi character; ``/``, ``:`` and
``|`` are allowed: keys are built from URLs and digests) |

None of them but the effect key allows a character a path, a header, a log line or an HTML page could misread (no ``/``, ``\\``,
whitespace, control characters, ``<``, quotes), and none starts with ``.`` or ``-`` (never a hidden file or an
option). Errors are :class:`NameRuleError` (a ``ValueError``) with a message that says the rule and shows at most
a short escaped prefix of the value.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Literal

NameKind = Literal[
    "task",
    "client",
    "version",
    "request id",
    "episode",
    "feedback id",
    "metric",
    "day",
    "replica",
    "actor",
    "effect type",
    "effect key",
]

TASK_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
CLIENT_NAME_PATTERN = TASK_NAME_PATTERN
VERSION_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
REQUEST_ID_PATTERN = r"[A-Za-z0-9._-]{1,128}"
DAY_PATTERN = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
ACTOR_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}"
METRIC_NAME_PATTERN = r"[A-Za-z][A-Za-z0-9._-]{0,63}"
MAX_TASK_NAME_LENGTH = 64
EFFECT_TYPE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?"
MAX_EFFECT_TYPE_LENGTH = 64  # the control DB's effect_type column
EFFECT_KEY_PATTERN = r"[!-~]{1,512}"

_RULES: dict[str, tuple[re.Pattern[str], str]] = {
    "task": (
        re.compile(TASK_NAME_PATTERN),
        "a task name is 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
    ),
    "client": (
        re.compile(CLIENT_NAME_PATTERN),
        "a client name is 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
    ),
    "version": (
        re.compile(VERSION_PATTERN),
        "a version is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit, "
        "without '..'",
    ),
    "request id": (
        re.compile(REQUEST_ID_PATTERN),
        "a request id is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-'",
    ),
    "episode": (
        re.compile(REQUEST_ID_PATTERN),
        "an episode id is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-'",
    ),
    "feedback id": (
        re.compile(REQUEST_ID_PATTERN),
        "a feedback id is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-'",
    ),
    "metric": (
        re.compile(METRIC_NAME_PATTERN),
        "a metric name is 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter",
    ),
    "day": (re.compile(DAY_PATTERN), "a day is a calendar date written YYYY-MM-DD"),
    "replica": (
        re.compile(TASK_NAME_PATTERN),
        "a replica id is 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
    ),
    "actor": (
        re.compile(ACTOR_PATTERN),
        "an actor is 1-128 characters of A-Z, a-z, 0-9, '.', '_', '-', '@' and '+', starting with a letter or digit",
    ),
    "effect type": (
        re.compile(EFFECT_TYPE_PATTERN),
        "an effect type is 1-64 characters: a name of A-Z, a-z, 0-9, '.', '_' and '-' starting with a letter or "
        "digit, or two such names joined by one '/' (<client>/<name>)",
    ),
    "effect key": (
        re.compile(EFFECT_KEY_PATTERN),
        "an effect key is 1-512 printable ASCII characters ('!' to '~': no space, control or bidi character)",
    ),
}


class NameRuleError(ValueError):
    """A name that breaks its rule; `kind` is which rule, `message` what to send instead."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def shown(value: Any, limit: int = 24) -> str:
    """A short escaped preview of a value for an error message (never the whole of a 100 KB value)."""
    text = value if isinstance(value, str) else repr(value)
    more = f"... ({len(text)} characters)" if len(text) > limit else ""
    return ascii(text[:limit]) + more


def is_valid(kind: NameKind, value: Any) -> bool:
    """Whether `value` is a valid name of `kind` (see the module's table)."""
    if not isinstance(value, str):
        return False
    pattern, _ = _RULES[kind]
    if pattern.fullmatch(value) is None:
        return False
    if kind == "version":
        return ".." not in value
    if kind == "effect type":
        return len(value) <= MAX_EFFECT_TYPE_LENGTH
    if kind == "day":
        try:
            _dt.date.fromisoformat(value)
        except ValueError:
            return False
    return True


def check(kind: NameKind, value: Any, source: str | None = None) -> str:
    """`value` when it is a valid name of `kind`, else :class:`NameRuleError` naming `source` (the option, field
    or header it came from) and the rule."""
    if is_valid(kind, value):
        return value
    _, rule = _RULES[kind]
    where = f"{source} " if source else ""
    raise NameRuleError(kind, f"{where}{shown(value)} is not a valid {kind}: {rule}")


def rule(kind: NameKind) -> str:
    """The rule for `kind`, in words (for help texts and OpenAPI descriptions)."""
    return _RULES[kind][1]
