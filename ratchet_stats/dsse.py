"""DSSE envelopes signed with Ed25519, carrying in-toto Statements: the shape of every signed Ratchet document.

Signing (DSSE v1.0 protocol)::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body     (LEN = byte length, ASCII decimal)
    sig             = Ed25519-Sign(key, PAE(payloadType, payload))
    envelope        = {"payloadType": type, "payload": base64(payload),
                       "signatures": [{"keyid": key_id(public key), "sig": base64(sig)}]}

Verification fails closed and in this order, each failure naming its check (``VerificationError.check``):
``envelope`` (shape, JSON, canonical standard base64) -> ``payload-type`` (allowed type) -> ``keyid`` (some
signature names a trusted key) -> ``signature`` (Ed25519 over PAE) -> only then is the payload handed out, and
``verify_statement`` parses it: ``payload`` (UTF-8 JSON object) -> ``statement-type`` -> ``subject`` ->
``predicate-type`` -> ``predicate``.

References: DSSE protocol https://github.com/secure-systems-lab/dsse/blob/master/protocol.md; envelope
https://github.com/secure-systems-lab/dsse/blob/master/envelope.md; in-toto Statement v1
https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md; Ed25519 RFC 8032.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ratchet_stats.canonical import canonical_json, loads_strict
from ratchet_stats.evidence import EvidenceError
from ratchet_stats.keys import key_id, load_public_key

__all__ = [
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "VerificationError",
    "VerifiedEnvelope",
    "make_statement",
    "pae",
    "parse_statement",
    "sign_envelope",
    "sign_statement",
    "verify_envelope",
    "verify_envelope_detailed",
    "verify_statement",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"

_B64 = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
_HEX = re.compile(r"^[0-9a-f]+$")


class VerificationError(EvidenceError):
    """A signed document failed verification; ``check`` names the check that failed."""


@dataclass(frozen=True)
class VerifiedEnvelope:
    """What a successful :func:`verify_envelope_detailed` vouches for."""

    payload: bytes
    payload_type: str
    keyid: str


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE Pre-Authentication Encoding: ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def make_statement(
    predicate_type: str, predicate: Mapping[str, Any], subjects: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """An in-toto Statement v1: ``{"_type", "subject", "predicateType", "predicate"}``.

    `subjects` are ``{"name": str, "digest": {"sha256": hex}}`` (other digest algorithms may sit beside sha256).
    """
    if not isinstance(predicate_type, str) or not predicate_type:
        raise ValueError("predicate_type must be a non-empty URI string")
    if not isinstance(predicate, Mapping):
        raise ValueError("predicate must be a JSON object (dict)")
    problem = _subject_problem(subjects)
    if problem:
        raise ValueError(f"subjects: {problem}")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": s["name"], "digest": dict(s["digest"])} for s in subjects],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def sign_envelope(
    payload: bytes,
    private_keys: Ed25519PrivateKey | Iterable[Ed25519PrivateKey],
    payload_type: str = PAYLOAD_TYPE,
) -> dict[str, Any]:
    """A DSSE envelope over raw `payload` bytes, with one signature per private key."""
    keys = [private_keys] if isinstance(private_keys, Ed25519PrivateKey) else list(private_keys)
    if not keys or not all(isinstance(k, Ed25519PrivateKey) for k in keys):
        raise TypeError("sign with one or more Ed25519 private keys (ratchet_stats.keys.load_private_key)")
    message = pae(payload_type, payload)
    return {
        "payloadType": payload_type,
        "payload": _b64(payload),
        "signatures": [{"keyid": key_id(k), "sig": _b64(k.sign(message))} for k in keys],
    }


def sign_statement(
    statement: Mapping[str, Any], private_key: Ed25519PrivateKey | Iterable[Ed25519PrivateKey]
) -> dict[str, Any]:
    """Sign an in-toto Statement: the payload is ``canonical_json(statement)``, type :data:`PAYLOAD_TYPE`."""
    return sign_envelope(canonical_json(dict(statement)), private_key, PAYLOAD_TYPE)


def _decode_b64(value: str, check: str, what: str) -> bytes:
    # Canonical padded standard base64 only: a lenient decoder maps several strings to the same bytes, which
    # would let an envelope change without its signature noticing.
    if not _B64.match(value):
        raise VerificationError(check, f"{what} is not canonical standard base64 (RFC 4648 §4, padded)")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise VerificationError(check, f"{what} is not valid base64") from None
    if _b64(raw) != value:
        raise VerificationError(check, f"{what} is not canonical base64 (non-zero padding bits)")
    return raw


def _parse_envelope(envelope: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    if isinstance(envelope, bytes | bytearray | memoryview):
        try:
            envelope = bytes(envelope).decode("utf-8")
        except UnicodeDecodeError:
            raise VerificationError("envelope", "the envelope is not UTF-8 text") from None
    if isinstance(envelope, str):
        try:
            envelope = json.loads(envelope)
        except ValueError as exc:
            raise VerificationError("envelope", f"the envelope is not JSON ({exc.args[0]})") from None
    if not isinstance(envelope, Mapping):
        raise VerificationError(
            "envelope", "the envelope must be a JSON object with payloadType, payload, signatures"
        )
    for field in ("payloadType", "payload"):
        if not isinstance(envelope.get(field), str):
            raise VerificationError("envelope", f"the envelope has no string field {field!r}")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise VerificationError("envelope", "the envelope has no signatures (a non-empty list is required)")
    for i, sig in enumerate(signatures):
        if not isinstance(sig, Mapping) or not isinstance(sig.get("sig"), str):
            raise VerificationError("envelope", f"signatures[{i}] has no string field 'sig'")
        if "keyid" in sig and not isinstance(sig["keyid"], str):
            raise VerificationError("envelope", f"signatures[{i}].keyid is not a string")
    return envelope


def _public_keys(public_keys: Any) -> list[Ed25519PublicKey]:
    items = public_keys if isinstance(public_keys, list | tuple) else [public_keys]
    keys: list[Ed25519PublicKey] = []
    for item in items:
        if isinstance(item, Ed25519PublicKey):
            keys.append(item)
        elif isinstance(item, str | bytes):
            keys.append(load_public_key(item))
        elif isinstance(item, Ed25519PrivateKey):
            raise TypeError(
                "verify with public keys; pass private_key.public_key() instead of the private key"
            )
        else:
            raise TypeError(
                f"public key: expected Ed25519PublicKey, PEM or base64 text, got {type(item).__name__}"
            )
    if not keys:
        raise VerificationError("keyid", "no trusted public key was given; pass the signer's public key")
    return keys


def verify_envelope_detailed(
    envelope: Mapping[str, Any] | str | bytes,
    public_keys: Any,
    payload_types: Sequence[str] = (PAYLOAD_TYPE,),
) -> VerifiedEnvelope:
    """Verify a DSSE envelope (see the module docstring for the order); return payload, type and signer key id.

    A signature counts only if its ``keyid`` names one of `public_keys` and it verifies over PAE under that key.
    """
    trusted = {key_id(k): k for k in _public_keys(public_keys)}
    env = _parse_envelope(envelope)
    payload_type = env["payloadType"]
    payload = _decode_b64(env["payload"], "envelope", "payload")
    if payload_type not in payload_types:
        raise VerificationError(
            "payload-type", f"payloadType is {payload_type!r}; expected one of {', '.join(payload_types)}"
        )
    matching = [(s.get("keyid", ""), s["sig"]) for s in env["signatures"] if s.get("keyid", "") in trusted]
    if not matching:
        seen = ", ".join(str(s.get("keyid", ""))[:16] or "(none)" for s in env["signatures"])
        wanted = ", ".join(k[:16] for k in trusted)
        raise VerificationError(
            "keyid",
            f"no signature is by a trusted key (signed by {seen}…; trusted {wanted}…); "
            "verify with the signer's public key",
        )
    message = pae(payload_type, payload)
    for kid, sig_b64 in matching:
        try:
            sig = _decode_b64(sig_b64, "signature", "sig")
            trusted[kid].verify(sig, message)
        except (InvalidSignature, VerificationError):
            continue
        return VerifiedEnvelope(payload=payload, payload_type=payload_type, keyid=kid)
    raise VerificationError(
        "signature",
        "the Ed25519 signature does not verify: the document was changed after signing, or signed by another key",
    )


def verify_envelope(
    envelope: Mapping[str, Any] | str | bytes,
    public_keys: Any,
    payload_types: Sequence[str] = (PAYLOAD_TYPE,),
) -> bytes:
    """Verify a DSSE envelope and return its payload bytes; raise :class:`VerificationError` naming the check."""
    return verify_envelope_detailed(envelope, public_keys, payload_types).payload


def _subject_problem(subjects: Any) -> str | None:
    if not isinstance(subjects, list | tuple) or not subjects:
        return "subject must be a non-empty list"
    for i, s in enumerate(subjects):
        if not isinstance(s, Mapping) or not isinstance(s.get("name"), str):
            return f"subject[{i}] has no string 'name'"
        dig = s.get("digest")
        if not isinstance(dig, Mapping) or not dig:
            return f"subject[{i}] has no 'digest' object"
        sha = dig.get("sha256")
        if sha is not None and not (isinstance(sha, str) and len(sha) == 64 and _HEX.match(sha)):
            return f"subject[{i}].digest.sha256 is not 64 lower-case hex characters"
        if not all(isinstance(v, str) for v in dig.values()):
            return f"subject[{i}].digest values must be strings"
    return None


def parse_statement(payload: bytes, predicate_type: str | None = None) -> dict[str, Any]:
    """Parse VERIFIED payload bytes as an in-toto Statement v1; raise :class:`VerificationError` naming the check."""
    try:
        statement = loads_strict(payload.decode("utf-8"), unique_keys=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerificationError("payload", f"the signed payload is not UTF-8 JSON ({exc})") from None
    if not isinstance(statement, dict):
        raise VerificationError("payload", "the signed payload is not a JSON object")
    if statement.get("_type") != STATEMENT_TYPE:
        raise VerificationError(
            "statement-type", f"_type is {statement.get('_type')!r}; expected {STATEMENT_TYPE}"
        )
    problem = _subject_problem(statement.get("subject"))
    if problem:
        raise VerificationError("subject", problem)
    got = statement.get("predicateType")
    if not isinstance(got, str) or (predicate_type is not None and got != predicate_type):
        expected = predicate_type or "a URI string"
        raise VerificationError(
            "predicate-type",
            f"predicateType is {got!r}; expected {expected} (is this the right kind of document?)",
        )
    if not isinstance(statement.get("predicate"), dict):
        raise VerificationError("predicate", "predicate is missing or not a JSON object")
    return statement


def verify_statement(
    envelope: Mapping[str, Any] | str | bytes,
    public_keys: Any,
    predicate_type: str | None = None,
) -> dict[str, Any]:
    """Verify the envelope's signature, THEN parse its payload as an in-toto Statement v1 and return it.

    With `predicate_type`, the statement's ``predicateType`` must equal it (check ``predicate-type``).
    """
    payload = verify_envelope(envelope, public_keys, (PAYLOAD_TYPE,))
    return parse_statement(payload, predicate_type)
