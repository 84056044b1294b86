"""The one rule for reasons: every change a person makes says why, in 3-500 characters, not blank.

Used by every ``ratchet admin`` command that changes something (releases, flags, pins, keys, erasures, effect
resolutions), by publishing a release manifest, and by the gateway's admin routes. The reason is kept stripped of
surrounding whitespace; it is signed into manifests and key changes and shown in the audit log.

Free text (a reason, an effect's summary or error: what a person or a client writes for a person to read) holds
no character that a terminal, a log line or a page would act on rather than show (:func:`check_text`): no control
character but tab and newline (so no ANSI escape that clears an operator's screen or recolours a line), no C1
control, and no bidi mark, embedding, override or isolate, nor a line or paragraph separator (so
``invoice\u202etxt.exe`` cannot read as something else). Everything else in Unicode is allowed.
"""

from __future__ import annotations

import re

REASON_MIN, REASON_MAX = 3, 500
EXAMPLE = '--reason "canary audits disagree on refunds"'


# what free text may not hold (module docstring): C0 controls but tab and newline, DEL and the C1 controls, the
# Arabic letter mark, LRM/RLM, line and paragraph separators, bidi embeddings/overrides (U+202A-E) and isolates
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


class ReasonError(ValueError):
    """The reason is missing, blank, too short or too long; the message says what is expected."""


class TextError(ValueError):
    """Free text holding a character a terminal, log line or page would act on (module docstring)."""


def check_text(text: str, what: str = "text") -> str:
    """`text` unchanged when it holds no unshowable character (module docstring), else :class:`TextError` naming
    the first one by its code point (never echoing it)."""
    found = _UNSHOWABLE.search(text)
    if found is not None:
        raise TextError(
            f"{what} holds U+{ord(found.group()):04X} at character {found.start()}: free text may not hold control "
            "characters (tab and newline excepted), bidi marks or overrides, or line separators"
        )
    return text


def check_reason(reason: object) -> str:
    """Return the stripped reason, or raise :class:`ReasonError` (3-500 characters, not blank)."""
    if not isinstance(reason, str):
        raise ReasonError(
            f"a reason of {REASON_MIN}-{REASON_MAX} characters is required; say why, e.g. {EXAMPLE}"
        )
    text = reason.strip()
    try:
        check_text(text, "the reason")
    except TextError as exc:
        raise ReasonError(str(exc)) from None
    if not REASON_MIN <= len(text) <= REASON_MAX:
        raise ReasonError(
            f"a reason of {REASON_MIN}-{REASON_MAX} characters is required (got {len(text)}); say why, "
            f"e.g. {EXAMPLE}"
        )
    return text
