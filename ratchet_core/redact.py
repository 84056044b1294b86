"""PII redaction: replace personal data and secrets with stable placeholders before anything is stored.

What is found (each candidate is validated, so ordinary numbers survive):

- secrets: ``Bearer <token>``, provider keys (``sk-…``, ``sk-ant-…``, ``pk_/rk_…``, ``AKIA…``, ``ghp_…``,
  ``xox?-…``), JWTs, and long opaque tokens (>= 32 chars of hex or base64url that mix letters and digits);
- emails (RFC 5322 "dot-atom" subset);
- IBANs, ISO 13616: country code + 2 check digits + BBAN, kept only when ``int(rearranged) mod 97 == 1``;
- payment card numbers: 13-19 digits (spaces/dashes allowed), kept only when the Luhn checksum is 0
  (ISO/IEC 7812-1 annex B);
- IPv4 and IPv6 addresses (validated with :mod:`ipaddress`);
- phone numbers: ``+`` international numbers of 8-15 digits (ITU-T E.164), North-American
  ``(555) 123-4567`` / ``555-123-4567`` and trunk-prefixed national numbers ``020 7946 0958``.
  A bare run of digits without ``+`` is not treated as a phone number (it is usually an order or ticket id).

Placeholder: ``<KIND_h>`` where ``h`` = first 8 hex chars of HMAC-SHA256(key, KIND ":" normalised value).
The same value always maps to the same placeholder (normalised: emails lower-cased, digits only for cards and
phones, IBANs upper-case without spaces, IPs in canonical form), so redacted training rows stay consistent
(the same customer email in a question and in an answer gets one placeholder) and example keys
(``ratchet_core.example_key``) are reproducible across replicas. The default key is a public domain separator,
not a secret: the placeholder pseudonymises the stored text; it is not meant to resist guessing a short value.
Pass ``key=`` for a deployment-secret key (then every party that computes example keys must use it too).

The gateway calls these functions when ``RATCHET_REDACT_PII`` is on (the default); they always redact.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable
from typing import Any

DEFAULT_KEY = b"ratchet-redact-v1"

# Keys of OpenAI message objects whose values are structure, not user text (ids must keep linking).
STRUCTURAL_KEYS = frozenset({"role", "type", "id", "tool_call_id", "name", "finish_reason", "index"})


def placeholder(kind: str, normalised: str, key: bytes = DEFAULT_KEY) -> str:
    """``<KIND_xxxxxxxx>``: 8 hex chars of HMAC-SHA256(key, kind ':' normalised)."""
    mac = hmac.new(key, f"{kind}:{normalised}".encode(), hashlib.sha256).hexdigest()[:8]
    return f"<{kind}_{mac}>"


# Validators --------------------------------------------------------------------------------------------------
def luhn_ok(digits: str) -> bool:
    """Luhn mod-10: double every second digit from the right, sum digit sums; valid when the sum % 10 == 0."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    """ISO 13616 / ISO 7064 mod 97-10: move the first 4 chars to the end, letters -> 10..35, value % 97 == 1."""
    s = iban.replace(" ", "").upper()
    if not (15 <= len(s) <= 34) or not s[:2].isalpha() or not s[2:4].isdigit() or not s.isalnum():
        return False
    rearranged = s[4:] + s[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


# Patterns, in the order they are applied (secrets first so a key containing digits is not half-eaten). -------
_BEARER = re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/=-]{8,})")
_PROVIDER_KEY = re.compile(
    r"\b(?:sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_-]{16,}|[pr]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9-]{10,})"
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_LONG_TOKEN = re.compile(r"(?<![A-Za-z0-9_+/=-])[A-Za-z0-9_+/-]{32,}={0,2}(?![A-Za-z0-9_+/=-])")
_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}"
)
_IBAN = re.compile(r"(?i)\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_IPV6 = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])"
)
_IPV4 = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w.]|\.\d)"
)
_PHONE_INTL = re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?![\w])")
_PHONE_NANP = re.compile(r"(?<![\w(])(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\w)")
_PHONE_TRUNK = re.compile(r"(?<![\w])0\d{1,4}[ -]\d{3,4}[ -]\d{3,5}(?!\w)")


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _mixed(s: str) -> bool:
    return any(c.isdigit() for c in s) and any(c.isalpha() for c in s)


def _rules(key: bytes) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str | None]]]:
    def secret(m: re.Match[str]) -> str:
        return placeholder("SECRET", m.group(0), key)

    def bearer(m: re.Match[str]) -> str:
        return m.group(1) + placeholder("SECRET", m.group(2), key)

    def long_token(m: re.Match[str]) -> str | None:
        s = m.group(0)
        return placeholder("SECRET", s, key) if _mixed(s) else None

    def email(m: re.Match[str]) -> str:
        return placeholder("EMAIL", m.group(0).lower(), key)

    def iban(m: re.Match[str]) -> str | None:
        s = m.group(0).replace(" ", "").upper()
        return placeholder("IBAN", s, key) if iban_ok(s) else None

    def card(m: re.Match[str]) -> str | None:
        d = _digits(m.group(0))
        return placeholder("CARD", d, key) if 13 <= len(d) <= 19 and luhn_ok(d) else None

    def ipv6(m: re.Match[str]) -> str | None:
        s = m.group(0)
        if not any(c.isalnum() for c in s):
            return None
        try:
            return placeholder("IP", ipaddress.IPv6Address(s).compressed, key)
        except ValueError:
            return None

    def ipv4(m: re.Match[str]) -> str:
        return placeholder("IP", str(ipaddress.IPv4Address(m.group(0))), key)

    def phone_intl(m: re.Match[str]) -> str | None:
        d = _digits(m.group(0))
        return placeholder("PHONE", "+" + d, key) if 8 <= len(d) <= 15 else None

    def phone(m: re.Match[str]) -> str | None:
        d = _digits(m.group(0))
        return placeholder("PHONE", d, key) if 9 <= len(d) <= 15 else None

    return [
        (_BEARER, bearer),
        (_PROVIDER_KEY, secret),
        (_JWT, secret),
        (_EMAIL, email),
        (_LONG_TOKEN, long_token),
        (_IBAN, iban),
        (_CARD, card),
        (_IPV6, ipv6),
        (_IPV4, ipv4),
        (_PHONE_INTL, phone_intl),
        (_PHONE_NANP, phone),
        (_PHONE_TRUNK, phone),
    ]


_DEFAULT_RULES = _rules(DEFAULT_KEY)
_DIGITS = str.maketrans("", "", "0123456789")
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_+/-]{32}")
_KEY_HINTS = ("sk-", "k_live_", "k_test_", "AKIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "xox")


def _gates(s: str) -> tuple[bool, ...]:
    """Cheap C-speed pre-checks, one per rule in _rules order: a rule whose gate is False cannot match, so its
    regex is skipped (a plain sentence costs a few microseconds instead of a dozen regex scans)."""
    digits = len(s) - len(s.translate(_DIGITS))
    colons = s.count(":")
    long_run = len(s) >= 32 and any(len(w) >= 32 for w in s.split()) and _TOKEN_RUN.search(s) is not None
    return (
        "bearer" in s.lower(),  # bearer
        any(h in s for h in _KEY_HINTS),  # provider keys
        "eyJ" in s,  # JWT
        "@" in s,  # email
        long_run,  # long opaque tokens
        digits >= 4 and len(s) >= 15,  # IBAN
        digits >= 13,  # card
        colons >= 2,  # IPv6
        digits >= 4 and s.count(".") >= 3,  # IPv4
        "+" in s and digits >= 8,  # international phone
        digits >= 10,  # NANP phone
        digits >= 9,  # trunk-prefixed phone
    )


def redact_text(s: str, key: bytes = DEFAULT_KEY) -> str:
    """Return ``s`` with every email, phone, card, IBAN, IP address and key-like string replaced by a placeholder."""
    if not s or len(s) < 6:
        return s
    rules = _DEFAULT_RULES if key == DEFAULT_KEY else _rules(key)
    for (pattern, fn), gate in zip(rules, _gates(s), strict=True):
        if not gate:
            continue

        def sub(m: re.Match[str], fn: Callable[[re.Match[str]], str | None] = fn) -> str:
            out = fn(m)
            return m.group(0) if out is None else out

        s = pattern.sub(sub, s)
    return s


def redact_value(value: Any, key: bytes = DEFAULT_KEY) -> Any:
    """Redact every string inside a JSON-like value (dict keys and STRUCTURAL_KEYS values are kept)."""
    if isinstance(value, str):
        return redact_text(value, key)
    if isinstance(value, dict):
        return {
            k: (v if k in STRUCTURAL_KEYS and isinstance(v, str | int) else redact_value(v, key))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v, key) for v in value]
    return value


def redact_messages(messages: list[dict[str, Any]], key: bytes = DEFAULT_KEY) -> list[dict[str, Any]]:
    """A redacted copy of OpenAI chat messages: text content, content parts and tool-call arguments.

    Roles, ids, tool names and other structural fields are kept so the conversation still parses.
    The input is not modified.
    """
    return [redact_value(m, key) for m in messages]


# Reversible redaction (the gateway's student calls) ------------------------------------------------------------
_PLACEHOLDER = re.compile(r"<(?:SECRET|EMAIL|IBAN|CARD|IP|PHONE)_[0-9a-f]{8}>")


def _redact_text_recording(s: str, key: bytes, mapping: dict[str, str]) -> str:
    """:func:`redact_text`, same rules in the same order (so the same output), recording placeholder -> original.

    The first original seen for a placeholder is kept (``Bob@X.com`` and ``bob@x.com`` share one placeholder).
    """
    if not s or len(s) < 6:
        return s
    rules = _DEFAULT_RULES if key == DEFAULT_KEY else _rules(key)
    for (pattern, fn), gate in zip(rules, _gates(s), strict=True):
        if not gate:
            continue

        def sub(
            m: re.Match[str],
            fn: Callable[[re.Match[str]], str | None] = fn,
            bearer: bool = pattern is _BEARER,
        ) -> str:
            out = fn(m)
            if out is None:
                return m.group(0)
            ph, orig = (out[len(m.group(1)) :], m.group(2)) if bearer else (out, m.group(0))
            # a later rule's match may span an earlier placeholder: record the text the client really sent
            mapping.setdefault(ph, restore_text(orig, mapping))
            return out

        s = pattern.sub(sub, s)
    return s


def _redact_value_recording(value: Any, key: bytes, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _redact_text_recording(value, key, mapping)
    if isinstance(value, dict):
        return {
            k: (
                v
                if k in STRUCTURAL_KEYS and isinstance(v, str | int)
                else _redact_value_recording(v, key, mapping)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact_value_recording(v, key, mapping) for v in value]
    return value


def redact_value_with_mapping(value: Any, key: bytes = DEFAULT_KEY) -> tuple[Any, dict[str, str]]:
    """``(redact_value(value, key), {placeholder: original text})``.

    The redacted value is exactly :func:`redact_value`'s (same rules, same placeholders); the mapping holds every
    placeholder this value produced, so ``restore_text`` can put the client's own text back into an answer given
    by a model that only saw placeholders.
    """
    mapping: dict[str, str] = {}
    return _redact_value_recording(value, key, mapping), mapping


def restore_text(s: str, mapping: dict[str, str]) -> str:
    """``s`` with every placeholder that is a key of `mapping` replaced by its value, in one left-to-right pass
    (a restored value is never rescanned); placeholders not in `mapping` are left as they are."""
    if not mapping or not s or "<" not in s:
        return s
    return _PLACEHOLDER.sub(lambda m: mapping.get(m.group(0), m.group(0)), s)
