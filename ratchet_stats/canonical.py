"""Canonical JSON and SHA-256 digests: the bytes every Ratchet signature and Merkle leaf is computed over.

``canonical_json(obj)`` follows RFC 8785 (JSON Canonicalization Scheme, JCS) in structure:

- object members sorted by key, compared as UTF-16 code units (RFC 8785 §3.2.3), no insignificant whitespace,
  separators ``,`` and ``:``;
- strings as UTF-8 with only the escapes JSON requires: ``"``, ``\\``, ``\\b \\f \\n \\r \\t`` and ``\\u00xx``
  (lower-case hex) for other control characters (RFC 8785 §3.2.2.2);
- integers written as is (arbitrary precision, as Python holds them);
- floats must be finite; they are written in Python's shortest round-trip ``repr`` form. This APPROXIMATES
  RFC 8785 §3.2.2.3 (ECMAScript ``Number.prototype.toString``): the two agree on every float that is not integral
  and whose decimal exponent lies in [-7, 16), e.g. ``0.1``, ``1.5``, ``95.25``; they differ on integral floats
  (``1.0`` here, ``1`` in JCS) and on the exponent spelling (``1e-07`` here, ``1e-7`` in JCS). Producers that need
  byte equality with other JCS implementations should send integral values as ``int``.

Reference: RFC 8785, https://www.rfc-editor.org/rfc/rfc8785.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["canonical_json", "digest", "loads_strict", "sha256_file", "sha256_hex"]

_ENCODE = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=True
).encode
_ENCODE_ORDERED = json.JSONEncoder(
    sort_keys=False, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=True
).encode


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _check(obj: Any, path: str) -> bool:
    """Validate `obj` for canonical JSON; return True when some object key needs UTF-16 ordering.

    Code-point order (Python's ``sorted``) equals UTF-16 code-unit order unless a key holds a character above
    U+FFFF, so the fast path (``json`` with ``sort_keys``) is exact whenever this returns False.
    """
    if obj is None or isinstance(obj, str | bool | int):
        return False
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(
                f"canonical JSON: {path} is {obj!r}; only finite numbers can be signed or hashed"
            )
        return False
    if isinstance(obj, dict):
        needs_utf16 = False
        for key, value in obj.items():
            if not isinstance(key, str):
                raise ValueError(
                    f"canonical JSON: {path} has a {type(key).__name__} key {key!r}; object keys must be strings "
                    "(convert them with str() first)"
                )
            if not needs_utf16 and not key.isascii() and any(ord(ch) > 0xFFFF for ch in key):
                needs_utf16 = True
            needs_utf16 |= _check(value, f"{path}.{key}")
        return needs_utf16
    if isinstance(obj, list | tuple):
        needs_utf16 = False
        for i, value in enumerate(obj):
            needs_utf16 |= _check(value, f"{path}[{i}]")
        return needs_utf16
    raise TypeError(
        f"canonical JSON: {path} is a {type(obj).__name__}; only dict, list, tuple, str, int, float, bool and "
        "None can be canonicalised (convert it first, e.g. bytes to hex, datetime to ISO 8601 text)"
    )


def _utf16_ordered(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _utf16_ordered(obj[k]) for k in sorted(obj, key=_utf16_key)}
    if isinstance(obj, list | tuple):
        return [_utf16_ordered(v) for v in obj]
    return obj


def canonical_json(obj: Any) -> bytes:
    """The canonical JSON encoding of `obj` as UTF-8 bytes (RFC 8785 style; see the module docstring).

    Raises ``ValueError`` for NaN/Infinity, non-string object keys and strings that are not valid Unicode (lone
    surrogates), and ``TypeError`` for values JSON cannot represent.
    """
    text = _ENCODE_ORDERED(_utf16_ordered(obj)) if _check(obj, "$") else _ENCODE(obj)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"canonical JSON: a string holds a lone surrogate ({exc.reason}); fix the input text"
        ) from exc


def loads_strict(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """``json.loads`` that refuses what canonical JSON cannot carry: NaN and Infinity (not JSON, RFC 8259 §6), and
    with ``unique_keys`` an object that repeats a key (RFC 8785 §3.1 wants them unique). Raises ValueError."""
    return json.loads(
        text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates if unique_keys else None
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def sha256_hex(data: bytes) -> str:
    """Lower-case hex SHA-256 of `data` (FIPS 180-4)."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """Lower-case hex SHA-256 of a file's bytes, read 1 MiB at a time (model weights do not fit twice in memory)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def digest(obj: Any) -> str:
    """``sha256_hex(canonical_json(obj))``: the content address of a JSON value."""
    return sha256_hex(canonical_json(obj))
