"""The one rule for reasons: every change a person makes says why, in 3-500 characters, not blank.

Used by every ``ratchet admin`` command that changes something (releases, flags, pins, keys, erasures, effect
resolutions), by publishing a release manifest, and by the gateway's admin routes. The reason is kept stripped of
surrounding whitespace; it is signed into manifests and key changes and shown in the audit log.
"""

from __future__ import annotations

REASON_MIN, REASON_MAX = 3, 500
EXAMPLE = '--reason "canary audits disagree on refunds"'


class ReasonError(ValueError):
    """The reason is missing, blank, too short or too long; the message says what is expected."""


def check_reason(reason: object) -> str:
    """Return the stripped reason, or raise :class:`ReasonError` (3-500 characters, not blank)."""
    if not isinstance(reason, str):
        raise ReasonError(
            f"a reason of {REASON_MIN}-{REASON_MAX} characters is required; say why, e.g. {EXAMPLE}"
        )
    text = reason.strip()
    if not REASON_MIN <= len(text) <= REASON_MAX:
        raise ReasonError(
            f"a reason of {REASON_MIN}-{REASON_MAX} characters is required (got {len(text)}); say why, "
            f"e.g. {EXAMPLE}"
        )
    return text
