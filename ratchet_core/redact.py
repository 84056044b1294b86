"""PII redaction: replace personal data and secrets with stable placeholders before anything is stored.

What is found (each candidate is validated, so ordinary numbers survive):

- secrets: ``Bearer <token>``, provider keys (``sk-…``, ``sk-ant-…``, ``pk_/rk_…``, ``AKIA…``, ``ghp_…``,
  ``xox?-…``), JWTs, and long opaque tokens (>= 32 chars of hex or base64url that mix letters and digits);
- emails (RFC 5322 "dot-atom" subset, within RFC 5321's limits: a local part of at most 64 octets, domain labels
  of at most 63), and internationalised ones (RFC 6531/6532: non-ASCII local parts and
  IDN domains, full-width ``＠``/``．`` too), normalised with NFKC and lower case;
- IBANs, ISO 13616: country code + 2 check digits + BBAN, kept only when ``int(rearranged) mod 97 == 1``;
- payment card numbers: 13-19 digits (spaces/dashes allowed), or groups of 4-6 then 2-6 digits joined by dots,
  NBSP, thin/figure/narrow spaces, Unicode dashes or full-width separators; full-width and other Unicode
  decimal digits count as digits; kept only when the Luhn checksum is 0 (ISO/IEC 7812-1 annex B);
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

A chat-completions body is redacted as a whole by :func:`redact_request`: messages (content, tool-call
arguments, the participant ``name``), tools and legacy functions (descriptions and parameter schemas),
``response_format`` (the JSON schema's descriptions, titles, enums, defaults, examples), ``user``, ``stop``,
``metadata`` values and any other parameter, with one placeholder -> original mapping for
:func:`restore_text`. Structure stays intact: roles, ids, function and schema names, JSON-schema keywords that
name properties or types (``required``, ``type``, ``pattern``, ``$ref``...), and dict keys.

The gateway calls these functions when ``RATCHET_REDACT_PII`` is on (the default); they always redact. Their cost
is linear in the text whatever a client sends (see the patterns), and a long text is matched with the GIL released
(the ``regex`` package), so the gateway redacts a large body in a worker thread without stalling its event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import unicodedata
from collections.abc import Callable
from typing import Any, NamedTuple

import regex

DEFAULT_KEY = b"ratchet-redact-v1"

# Keys of OpenAI message objects whose values are structure, not user text (ids must keep linking).
STRUCTURAL_KEYS = frozenset({"role", "type", "id", "tool_call_id", "name", "finish_reason", "index"})
# In a message (a dict with a ``role``) ``name`` is the participant's name, user text; elsewhere (a function in
# a tool call or a tool definition, a JSON schema) it names structure and is kept.
MESSAGE_STRUCTURAL_KEYS = STRUCTURAL_KEYS - {"name"}


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


def _compile(pattern: str) -> regex.Pattern[str]:
    """A rule's pattern, compiled by the ``regex`` package (``re``'s syntax and matches, version 0), which releases
    the GIL while it matches a long text (``concurrent=True``): a 4 MiB body redacted in a worker thread never
    holds the event loop."""
    return regex.compile(pattern, regex.V0)


# A text this long is matched with the GIL released (below, the GIL is held for microseconds anyway).
LONG_TEXT = 16 * 1024

# Patterns, in the order they are applied (secrets first so a key containing digits is not half-eaten). -------
# Every pattern does work linear in the text with a small constant, whatever the text (a client's 4 MiB body is
# scanned by all of them): an attempt starts only where a match could start and looks at a bounded window, or at a
# run of characters no other attempt shares, and no repeat can split the same characters several ways. The limits
# are the RFCs' own: an email local part is at most 64 octets and a domain label at most 63 (RFC 5321 §4.5.3.1.1,
# RFC 1035 §2.3.4), a domain at most 127 labels. ``tests/core/test_redact_cost.py`` counts each pattern's work on
# adversarial motifs.
_BEARER = _compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/=-]{8,})")
_PROVIDER_KEY = _compile(
    r"\b(?:sk-(?:ant-|proj-|svcacct-)?[A-Za-z0-9_-]{16,}|[pr]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9-]{10,})"
)
# A JWT starts where a run of its characters starts ("-eyJ-eyJ..." would otherwise be scanned from every "eyJ").
_JWT = _compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}")
_LONG_TOKEN = _compile(r"(?<![A-Za-z0-9_+/=-])[A-Za-z0-9_+/-]{32,}={0,2}(?![A-Za-z0-9_+/=-])")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = _compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@" + _LABEL + r"(?:\." + _LABEL + r"){0,125}"
    r"\.(?:(?i:xn--)[A-Za-z0-9-]{0,58}[A-Za-z0-9]|[A-Za-z]{2,63})"
)
# Internationalised addresses (RFC 6531): Unicode letters/digits in the local part and the domain labels,
# a Unicode or punycode TLD. Applied after _EMAIL and only to non-ASCII text, so ASCII addresses keep
# exactly the matches (and placeholders) they always had.
_ULABEL = r"[^\W_](?:[^\W_]|-){0,62}(?<!-)"
_EMAIL_UNICODE = _compile(
    r"(?<![\w.+-])[^\W_][\w.%+-]{0,63}[@\uff20]" + _ULABEL + r"(?:[.\uff0e]" + _ULABEL + r"){0,125}[.\uff0e]"
    r"(?:(?i:xn--)[A-Za-z0-9-]{1,59}|[^\W\d_]{2,63})"
)
_IBAN = _compile(r"(?i)\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = _compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
# Grouped card numbers with other separators: dot, NBSP, figure/thin/hair/narrow/ideographic spaces, Unicode
# hyphens and dashes, minus, full-width hyphen and dot, optionally with a space either side (" – ", " - "); the
# same separator throughout. Groups keep ordinary decimals (3.14159265358979) out; ASCII spaces/dashes are _CARD's.
_CARD_SEPARATORS = ".\u00a0\u2002-\u200a\u202f\u3000\u2010-\u2015\u2212\uff0d\uff0e"
_CARD_SEP = _compile(
    rf"(?<!\w)(?<!\d[.,])\d{{4,6}}(?P<sep> ?[{_CARD_SEPARATORS}] ?| - )\d{{2,6}}(?:(?P=sep)\d{{2,6}}){{1,3}}(?!\w)"
)
_IPV6 = _compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])"
)
_IPV4 = _compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w.]|\.\d)"
)
# A group's digits are taken whole (possessive): "+1" and forty digits would otherwise be split into six groups
# in every possible way before the attempt fails (thousands of steps per character).
_PHONE_INTL = _compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,5}+\)?){1,6}(?![\w])")
_PHONE_NANP = _compile(r"(?<![\w(])(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\w)")
_PHONE_TRUNK = _compile(r"(?<![\w])0\d{1,4}[ -]\d{3,4}[ -]\d{3,5}(?!\w)")


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _card_digits(s: str) -> str:
    """The decimal digits of `s` as ASCII (full-width and other Unicode decimal digits included)."""
    return "".join(str(unicodedata.decimal(ch)) if ch > "~" else ch for ch in s if ch.isdecimal())


def _mixed(s: str) -> bool:
    return any(c.isdigit() for c in s) and any(c.isalpha() for c in s)


def _rules(key: bytes) -> list[tuple[regex.Pattern[str], Callable[[regex.Match[str]], str | None]]]:
    def secret(m: regex.Match[str]) -> str:
        return placeholder("SECRET", m.group(0), key)

    def bearer(m: regex.Match[str]) -> str:
        return m.group(1) + placeholder("SECRET", m.group(2), key)

    def long_token(m: regex.Match[str]) -> str | None:
        s = m.group(0)
        return placeholder("SECRET", s, key) if _mixed(s) else None

    def email(m: regex.Match[str]) -> str:
        return placeholder("EMAIL", m.group(0).lower(), key)

    def email_unicode(m: regex.Match[str]) -> str:
        return placeholder("EMAIL", unicodedata.normalize("NFKC", m.group(0)).lower(), key)

    def iban(m: regex.Match[str]) -> str | None:
        s = m.group(0).replace(" ", "").upper()
        return placeholder("IBAN", s, key) if iban_ok(s) else None

    def card(m: regex.Match[str]) -> str | None:
        d = _card_digits(m.group(0))
        return placeholder("CARD", d, key) if 13 <= len(d) <= 19 and luhn_ok(d) else None

    def ipv6(m: regex.Match[str]) -> str | None:
        s = m.group(0)
        if not any(c.isalnum() for c in s):
            return None
        try:
            return placeholder("IP", ipaddress.IPv6Address(s).compressed, key)
        except ValueError:
            return None

    def ipv4(m: regex.Match[str]) -> str:
        return placeholder("IP", str(ipaddress.IPv4Address(m.group(0))), key)

    def phone_intl(m: regex.Match[str]) -> str | None:
        d = _digits(m.group(0))
        return placeholder("PHONE", "+" + d, key) if 8 <= len(d) <= 15 else None

    def phone(m: regex.Match[str]) -> str | None:
        d = _digits(m.group(0))
        return placeholder("PHONE", d, key) if 9 <= len(d) <= 15 else None

    return [
        (_BEARER, bearer),
        (_PROVIDER_KEY, secret),
        (_JWT, secret),
        (_EMAIL, email),
        (_EMAIL_UNICODE, email_unicode),
        (_LONG_TOKEN, long_token),
        (_IBAN, iban),
        (_CARD_SEP, card),  # before _CARD, so a dotted card is not half-eaten by a space-joined neighbour
        (_CARD, card),
        (_IPV6, ipv6),
        (_IPV4, ipv4),
        (_PHONE_INTL, phone_intl),
        (_PHONE_NANP, phone),
        (_PHONE_TRUNK, phone),
    ]


_DEFAULT_RULES = _rules(DEFAULT_KEY)
_TOKEN_RUN = _compile(r"[A-Za-z0-9_+/-]{32}")
_KEY_HINT = _compile(r"sk-|k_live_|k_test_|AKIA|gh[pousr]_|xox")
_BEARER_HINT = _compile(r"(?i)bearer")
_ASCII_DIGIT = _compile(r"[0-9]")
_DECIMAL = _compile(
    r"\d"
)  # any Unicode decimal digit (full-width ones included), as the card rules read them
_ENOUGH_DIGITS = 13  # the most digits any gate asks for


def _count(pattern: regex.Pattern[str], s: str, concurrent: bool) -> int:
    """Matches of `pattern` in `s`, counted up to _ENOUGH_DIGITS (the gates compare against nothing larger)."""
    n = 0
    for _ in pattern.finditer(s, concurrent=concurrent):
        n += 1
        if n >= _ENOUGH_DIGITS:
            break
    return n


def _gates(s: str, concurrent: bool) -> tuple[bool, ...]:
    """Cheap pre-checks, one per rule in _rules order: a rule whose gate is False cannot match, so its regex is
    skipped (a plain sentence costs a few microseconds instead of a dozen regex scans). Each is one pass in C
    (``str.count``, ``in``) or a search that releases the GIL on a long text."""
    digits = _count(_ASCII_DIGIT, s, concurrent)
    ascii_only = s.isascii()
    # full-width and other Unicode decimal digits count for cards (only non-ASCII text pays for the count)
    card_digits = digits if ascii_only else _count(_DECIMAL, s, concurrent)
    long_run = len(s) >= 32 and _TOKEN_RUN.search(s, concurrent=concurrent) is not None
    return (
        _BEARER_HINT.search(s, concurrent=concurrent) is not None,  # bearer
        _KEY_HINT.search(s, concurrent=concurrent) is not None,  # provider keys
        "eyJ" in s,  # JWT
        "@" in s,  # email
        not ascii_only and ("@" in s or "\uff20" in s),  # internationalised email
        long_run,  # long opaque tokens
        digits >= 4 and len(s) >= 15,  # IBAN
        card_digits >= 13 and (not ascii_only or "." in s or " - " in s),  # card with other separators
        card_digits >= 13,  # card
        s.count(":") >= 2,  # IPv6
        digits >= 4 and s.count(".") >= 3,  # IPv4
        "+" in s and digits >= 8,  # international phone
        digits >= 10,  # NANP phone
        digits >= 9,  # trunk-prefixed phone
    )


def _redact(s: str, key: bytes, mapping: dict[str, str] | None) -> str:
    """Every rule applied to `s` in order; with `mapping`, each placeholder made is recorded -> the client's text
    (the first original seen for a placeholder is kept: ``Bob@X.com`` and ``bob@x.com`` share one)."""
    if not s or len(s) < 6:
        return s
    concurrent = len(s) > LONG_TEXT
    rules = _DEFAULT_RULES if key == DEFAULT_KEY else _rules(key)
    for (pattern, fn), gate in zip(rules, _gates(s, concurrent), strict=True):
        if not gate:
            continue

        def sub(
            m: regex.Match[str],
            fn: Callable[[regex.Match[str]], str | None] = fn,
            bearer: bool = pattern is _BEARER,
        ) -> str:
            out = fn(m)
            if out is None:
                return m.group(0)
            if mapping is not None:
                ph, orig = (out[len(m.group(1)) :], m.group(2)) if bearer else (out, m.group(0))
                # a later rule's match may span an earlier placeholder: record the text the client really sent
                mapping.setdefault(ph, restore_text(orig, mapping))
            return out

        s = pattern.sub(sub, s, concurrent=concurrent)
    return s


def redact_text(s: str, key: bytes = DEFAULT_KEY) -> str:
    """Return ``s`` with every email, phone, card, IBAN, IP address and key-like string replaced by a placeholder."""
    return _redact(s, key, None)


def _walk(value: Any, text: Callable[[str], str]) -> Any:
    """`value` with `text` applied to every string inside it, except dict keys and the values of structural
    keys (:data:`STRUCTURAL_KEYS`; in a message, ``name`` is user text)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        keep = MESSAGE_STRUCTURAL_KEYS if "role" in value else STRUCTURAL_KEYS
        return {
            k: (v if k in keep and isinstance(v, str | int) else _walk(v, text)) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(v, text) for v in value]
    return value


def redact_value(value: Any, key: bytes = DEFAULT_KEY) -> Any:
    """Redact every string inside a JSON-like value (dict keys and STRUCTURAL_KEYS values are kept)."""
    return _walk(value, lambda s: redact_text(s, key))


def redact_messages(messages: list[dict[str, Any]], key: bytes = DEFAULT_KEY) -> list[dict[str, Any]]:
    """A redacted copy of OpenAI chat messages: text content, content parts and tool-call arguments.

    Roles, ids, tool names and other structural fields are kept so the conversation still parses.
    The input is not modified.
    """
    return [redact_value(m, key) for m in messages]


# Reversible redaction (the gateway's student calls) ------------------------------------------------------------
_PLACEHOLDER = _compile(r"<(?:SECRET|EMAIL|IBAN|CARD|IP|PHONE)_[0-9a-f]{8}>")


def _redact_text_recording(s: str, key: bytes, mapping: dict[str, str]) -> str:
    """:func:`redact_text`, same rules in the same order (so the same output), recording placeholder -> original."""
    return _redact(s, key, mapping)


def redact_value_with_mapping(value: Any, key: bytes = DEFAULT_KEY) -> tuple[Any, dict[str, str]]:
    """``(redact_value(value, key), {placeholder: original text})``.

    The redacted value is exactly :func:`redact_value`'s (same rules, same placeholders); the mapping holds every
    placeholder this value produced, so ``restore_text`` can put the client's own text back into an answer given
    by a model that only saw placeholders.
    """
    mapping: dict[str, str] = {}
    return _walk(value, lambda s: _redact_text_recording(s, key, mapping)), mapping


# Whole request bodies ---------------------------------------------------------------------------------------
# JSON Schema keywords (2020-12 and drafts 4-7) whose string values name structure: types, formats, property
# names, references. Kept, so the schema still means what it meant.
_SCHEMA_KEEP = frozenset(
    [
        "type",
        "format",
        "pattern",
        "required",
        "dependentRequired",
        "$ref",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "contentEncoding",
        "contentMediaType",
    ]
)
# Keywords whose values are maps of name -> subschema, and keywords whose values are subschemas (or lists of them).
_SCHEMA_MAPS = frozenset(["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"])
_SCHEMA_SUBS = frozenset(
    [
        "items",
        "additionalItems",
        "prefixItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "anyOf",
        "allOf",
        "oneOf",
    ]
)
# The metadata entry that names the Ratchet task: validated by ratchet_gateway.input_rules, never user text.
TASK_METADATA_KEY = "ratchet_task"


def _schema(value: Any, text: Callable[[str], str]) -> Any:
    """A JSON schema with `text` applied to its human text (``description``, ``title``, ``enum``, ``const``,
    ``default``, ``examples``, ``$comment``, unknown keywords) and its structure kept."""
    if isinstance(value, list):  # a list of subschemas (anyOf, prefixItems, draft-4 tuple items)
        return [_schema(v, text) for v in value]
    if not isinstance(value, dict):  # boolean schema
        return value
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k in _SCHEMA_KEEP:
            out[k] = v
        elif k in _SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: _schema(sub, text) for name, sub in v.items()}
        elif k in _SCHEMA_SUBS or (k == "dependencies" and isinstance(v, dict)):
            out[k] = (
                {n: (d if isinstance(d, list) else _schema(d, text)) for n, d in v.items()}
                if k == "dependencies"
                else _schema(v, text)
            )
        else:
            out[k] = _walk(v, text)
    return out


def _with_schema(value: Any, schema_key: str, text: Callable[[str], str]) -> Any:
    """A function definition (``parameters``) or a response format's ``json_schema`` (``schema``): names kept,
    descriptions redacted, the schema through :func:`_schema`."""
    if not isinstance(value, dict):
        return _walk(value, text)
    return {
        k: (
            _schema(v, text)
            if k == schema_key
            else v
            if k in STRUCTURAL_KEYS and isinstance(v, str | int)
            else _walk(v, text)
        )
        for k, v in value.items()
    }


def _tool(value: Any, text: Callable[[str], str]) -> Any:
    if not isinstance(value, dict):
        return _walk(value, text)
    return {
        k: (
            _with_schema(v, "parameters", text)
            if k == "function"
            else v
            if k in STRUCTURAL_KEYS and isinstance(v, str | int)
            else _walk(v, text)
        )
        for k, v in value.items()
    }


def _response_format(value: Any, text: Callable[[str], str]) -> Any:
    if not isinstance(value, dict):
        return _walk(value, text)
    return {
        k: (
            _with_schema(v, "schema", text)
            if k == "json_schema"
            else v
            if k == "type" and isinstance(v, str)
            else _walk(v, text)
        )
        for k, v in value.items()
    }


def _metadata(value: Any, text: Callable[[str], str]) -> Any:
    if not isinstance(value, dict):
        return _walk(value, text)
    return {
        k: (v if k == TASK_METADATA_KEY and isinstance(v, str) else _walk(v, text)) for k, v in value.items()
    }


def _each(fn: Callable[[Any, Callable[[str], str]], Any]) -> Callable[[Any, Callable[[str], str]], Any]:
    def each(value: Any, text: Callable[[str], str]) -> Any:
        return [fn(v, text) for v in value] if isinstance(value, list) else _walk(value, text)

    return each


_REQUEST_FIELDS: dict[str, Callable[[Any, Callable[[str], str]], Any]] = {
    "model": lambda v, text: v,  # routing needs it as sent (stored raw in model_requested)
    "messages": _walk,
    "tools": _each(_tool),
    "functions": _each(lambda f, text: _with_schema(f, "parameters", text)),  # legacy function calling
    "response_format": _response_format,
    "metadata": _metadata,
}


class RedactedRequest(NamedTuple):
    """A redacted chat-completions body and the placeholder -> client text mapping of everything redacted."""

    body: dict[str, Any]
    mapping: dict[str, str]


def redact_request(body: dict[str, Any], key: bytes = DEFAULT_KEY) -> RedactedRequest:
    """Redact a whole OpenAI chat-completions request body with one mapping.

    Every field is covered: messages exactly as :func:`redact_value` does them (so stored messages and example
    keys are unchanged) plus the participant ``name``; tools and legacy ``functions`` keep their names and JSON
    schema structure, their descriptions (and schema descriptions, titles, enums, defaults, examples) are
    redacted; ``response_format`` likewise; ``metadata`` values except ``ratchet_task``; ``user``, ``stop`` and
    any other parameter as plain values. ``model`` is kept. The input is not modified.

    ``restore_text(answer, result.mapping)`` puts the client's values back into an answer from a model that saw
    ``result.body``. Which fields the ledger stores, and how, stays the caller's choice: take them from
    ``result.body``.
    """
    mapping: dict[str, str] = {}

    def text(s: str) -> str:
        return _redact_text_recording(s, key, mapping)

    out = {k: _REQUEST_FIELDS.get(k, _walk)(v, text) for k, v in body.items()}
    return RedactedRequest(out, mapping)


def restore_text(s: str, mapping: dict[str, str]) -> str:
    """``s`` with every placeholder that is a key of `mapping` replaced by its value, in one left-to-right pass
    (a restored value is never rescanned); placeholders not in `mapping` are left as they are."""
    if not mapping or not s or "<" not in s:
        return s
    return _PLACEHOLDER.sub(lambda m: mapping.get(m.group(0), m.group(0)), s)
