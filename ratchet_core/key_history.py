"""The signed history of the keys gateways trust: replay, changes, the published listing.

(Rotating a key also re-signs the current manifest: ``ratchet_assets.release.key_rotation``.)

The control DB's table ``trusted_keys`` is the signed history of the keys gateways trust: one change per row
(``add`` or ``retire`` a key, by whom, why), each a DSSE-signed in-toto statement (:data:`KEY_CHANGE_PREDICATE`)
signed by a key trusted *before* that change (ARCHITECTURE.md, "Evidence formats"), so anyone can replay the
history offline. :func:`trusted_keys` replays it:

- from configured roots (a gateway's ``signing.pub``, ``ratchet_core.keys.root_public_keys``): start with the
  roots, apply each change signed by a key trusted at that point, skip the rest (a forged row never widens trust);
- from the database itself (``roots=None``, the publisher's view): the first row, a key adding itself, is the
  anchor; the same rule after it.

Publishing a manifest with a key outside the trusted set fails before anything is written
(:func:`require_trusted`); documents signed earlier (receipts, certificates, BOMs) verify with every key the
history ever trusted (:func:`keys_ever_trusted`). Which key signs is ``ratchet_core.keys`` (key resolution).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ratchet_core.control_db import ensure_schema
from ratchet_core.control_db import trusted_keys as trusted_keys_table
from ratchet_core.keys import KeyTrustError, as_key_list
from ratchet_stats.keys import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
    key_id,
    load_public_key,
    public_key_b64,
    public_key_pem,
)

KEY_CHANGE_PREDICATE = "https://ratchet.dev/key-change/v1"
ACTIONS = ("add", "retire")


@dataclass(frozen=True)
class KeyChange:
    """One row of the history, as stored (``verified`` says whether the replay applied it)."""

    sequence: int
    action: str
    key_id: str
    public_key: str
    signed_by: str
    actor: str
    reason: str
    at: str
    digest: str
    verified: bool = False
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class KeyState:
    """The result of replaying the history: keys trusted now, every key ever trusted, and each row's verdict."""

    trusted: dict[str, Ed25519PublicKey]
    ever: dict[str, Ed25519PublicKey]
    changes: list[KeyChange]

    @property
    def top(self) -> int:
        return self.changes[-1].sequence if self.changes else 0

    @property
    def last_digest(self) -> str:
        return self.changes[-1].digest if self.changes else ""


def _rows(conn: Connection) -> list[Any]:
    try:
        return conn.execute(sa.select(trusted_keys_table).order_by(trusted_keys_table.c.sequence)).all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError):
        if sa.inspect(conn).has_table(trusted_keys_table.name):
            raise
        return []  # a control DB from before trusted keys, not yet migrated: no history


def _replay(rows: list[Any], roots: list[Ed25519PublicKey] | None) -> KeyState:
    from ratchet_stats.dsse import VerificationError, parse_statement, verify_envelope_detailed

    trusted = {key_id(k): k for k in (roots or [])}
    ever = dict(trusted)
    changes: list[KeyChange] = []
    for index, row in enumerate(rows):
        fields = {
            c: getattr(row, c) for c in KeyChange.__dataclass_fields__ if c not in ("verified", "error")
        }
        signers = dict(trusted)
        try:
            subject_key = load_public_key(row.public_key)
            if roots is None and index == 0 and row.action == "add":
                signers[key_id(subject_key)] = subject_key  # the anchor: the first key adds itself
            verified = verify_envelope_detailed(json.loads(row.envelope), list(signers.values()))
            predicate = parse_statement(verified.payload, KEY_CHANGE_PREDICATE)["predicate"]
            previous = rows[index - 1].digest if index else ""
            problem = _predicate_problem(predicate, row, subject_key, verified.keyid, previous)
            if problem:
                raise ValueError(problem)
        except (VerificationError, ValueError, TypeError, KeyError) as exc:
            changes.append(KeyChange(**fields, verified=False, error=str(exc)))
            continue
        kid = predicate["key_id"]
        if predicate["action"] == "add":
            trusted[kid] = subject_key
            ever[kid] = subject_key
        else:
            trusted.pop(kid, None)
        changes.append(KeyChange(**fields, verified=True))
    return KeyState(trusted=trusted, ever=ever, changes=changes)


def _predicate_problem(
    predicate: dict[str, Any], row: Any, subject_key: Ed25519PublicKey, signer: str, previous_digest: str
) -> str:
    expected = {
        "previous_digest": previous_digest,
        "sequence": row.sequence,
        "action": row.action,
        "key_id": row.key_id,
        "public_key": row.public_key,
        "actor": row.actor,
        "reason": row.reason,
        "at": row.at,
    }
    for name, value in expected.items():
        if predicate.get(name) != value:
            return (
                f"row {row.sequence}: the signed {name} differs from the stored one (row changed or removed)"
            )
    if predicate["action"] not in ACTIONS:
        return f"row {row.sequence}: unknown action {predicate['action']!r}"
    if key_id(subject_key) != predicate["key_id"]:
        return f"row {row.sequence}: key_id is not the id of the public key"
    if signer != row.signed_by:
        return f"row {row.sequence}: signed by {signer[:16]}…, the row says {str(row.signed_by)[:16]}…"
    return ""


_CACHE: dict[tuple[Any, ...], KeyState] = {}


def key_state(conn_or_engine: Engine | Connection, roots: Any = None) -> KeyState:
    """Replay the history (module docstring); ``roots=None``: the database's own anchor, else those keys."""
    root_list = None if roots is None else [k for k in as_key_list(roots)]
    if isinstance(conn_or_engine, Connection):
        rows = _rows(conn_or_engine)
    else:
        with conn_or_engine.connect() as conn:
            rows = _rows(conn)
    # Replaying verifies one signature per row: gateways poll often, so reuse the result while no row changed (keyed
    # by every column of every row: an edited column must be replayed, and then it fails its signature check).
    cache_key = (
        None if root_list is None else tuple(sorted(key_id(k) for k in root_list)),
        hashlib.sha256(repr([tuple(r) for r in rows]).encode("utf-8")).digest(),
    )
    state = _CACHE.get(cache_key)
    if state is None:
        state = _replay(rows, root_list)
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[cache_key] = state
    # A copy: append_change updates the caller's state in place, never the cached one.
    return KeyState(trusted=dict(state.trusted), ever=dict(state.ever), changes=list(state.changes))


def trusted_keys(conn_or_engine: Engine | Connection, roots: Any = None) -> list[Ed25519PublicKey]:
    """The keys trusted now: ``roots`` (if given) carried through every verified change of the history."""
    return list(key_state(conn_or_engine, roots).trusted.values())


def keys_ever_trusted(conn_or_engine: Engine | Connection, roots: Any = None) -> list[Ed25519PublicKey]:
    """Every key the history ever trusted (plus ``roots``): what verifies documents signed before a rotation."""
    state = key_state(conn_or_engine, roots)
    ever = dict(state.ever)
    for k in as_key_list(roots):
        ever.setdefault(key_id(k), k)
    return list(ever.values())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def check_change(state: KeyState, signer_id: str, action: str, subject_id: str) -> None:
    """Raise :class:`KeyTrustError` unless `signer_id` may make this change now (rules in :func:`append_change`)."""
    if action not in ACTIONS:
        raise KeyTrustError(f"unknown key change {action!r}; use one of {', '.join(ACTIONS)}")
    anchor = not state.changes and action == "add" and signer_id == subject_id
    if signer_id not in state.trusted and not anchor:
        raise KeyTrustError(
            f"key {signer_id[:16]}… is not trusted here, so it cannot change the trusted keys; sign with a "
            "trusted key (`ratchet admin keys list`)"
        )
    if action == "add" and subject_id in state.trusted:
        raise KeyTrustError(f"key {subject_id[:16]}… is already trusted")
    if action == "retire":
        if subject_id not in state.trusted:
            raise KeyTrustError(f"key {subject_id[:16]}… is not trusted now; nothing to retire")
        if set(state.trusted) == {subject_id}:
            raise KeyTrustError(
                "that is the only trusted key: add (or `ratchet admin keys rotate` to) another one first"
            )


def append_change(
    conn: Connection,
    signer: Ed25519PrivateKey,
    action: str,
    public_key: Ed25519PublicKey,
    actor: str,
    reason: str,
    *,
    state: KeyState | None = None,
) -> KeyChange:
    """Sign and append one change inside the caller's transaction; the signer must be trusted now.

    The one exception is the anchor: on an empty history a key may add itself. Retiring the last trusted key is
    refused (nothing could sign afterwards).
    """
    from ratchet_stats.canonical import canonical_json, digest, sha256_hex
    from ratchet_stats.dsse import make_statement, sign_statement

    state = state or key_state(conn)
    signer_id, subject_id = key_id(signer), key_id(public_key)
    check_change(state, signer_id, action, subject_id)
    sequence = state.top + 1
    predicate = {
        "sequence": sequence,
        "previous_digest": state.last_digest,
        "action": action,
        "key_id": subject_id,
        "public_key": public_key_b64(public_key),
        "actor": actor,
        "reason": reason,
        "at": _now(),
    }
    subject = {"name": f"key-change/{sequence}", "digest": {"sha256": digest(predicate)}}
    envelope = sign_statement(make_statement(KEY_CHANGE_PREDICATE, predicate, [subject]), signer)
    text = canonical_json(envelope).decode("utf-8")
    row = {
        "sequence": sequence,
        "action": action,
        "key_id": subject_id,
        "public_key": predicate["public_key"],
        "signed_by": signer_id,
        "actor": actor,
        "reason": reason,
        "at": predicate["at"],
        "envelope": text,
        "digest": sha256_hex(text.encode("utf-8")),
    }
    conn.execute(trusted_keys_table.insert().values(**row))
    change = KeyChange(**{k: v for k, v in row.items() if k != "envelope"}, verified=True)
    # Keep the caller's view current for a second change in the same transaction.
    if action == "add":
        state.trusted[subject_id] = public_key
        state.ever[subject_id] = public_key
    else:
        state.trusted.pop(subject_id, None)
    state.changes.append(change)
    return change


def require_trusted(conn: Connection, private_key: Ed25519PrivateKey, actor: str) -> KeyState:
    """Check, inside a publisher's transaction, that `private_key` is trusted; return the replayed state.

    On an empty history (a new control DB, or one from before trusted keys) the publisher's key becomes the anchor,
    unless manifests are stored and none verifies under it (another key signs this database's releases). Raises
    :class:`KeyTrustError` naming the key and what to do.
    """
    state = key_state(conn)
    kid = key_id(private_key)
    if not state.changes:
        if not _signed_any_manifest(conn, private_key):
            raise KeyTrustError(
                f"signing key {kid[:16]}… signed none of the release manifests stored here, so gateways do not "
                "trust it; sign with the key that published them (see `ratchet admin keys list`)"
            )
        append_change(
            conn, private_key, "add", private_key.public_key(), actor, "first key to sign here", state=state
        )
        return state
    if kid not in state.trusted:
        trusted = ", ".join(k[:16] + "…" for k in state.trusted) or "none"
        raise KeyTrustError(
            f"signing key {kid[:16]}… is not trusted by the gateways (trusted: {trusted}); nothing was "
            "published. Sign with a trusted key, or trust this one with `ratchet admin keys add` / "
            "`ratchet admin keys rotate` (see `ratchet admin keys list`)"
        )
    return state


def _signed_any_manifest(conn: Connection, private_key: Ed25519PrivateKey) -> bool:
    from ratchet_core.control_db import release_manifests
    from ratchet_stats.dsse import VerificationError, verify_envelope_detailed

    envelopes = conn.execute(sa.select(release_manifests.c.envelope)).scalars().all()
    if not envelopes:
        return True  # nothing published yet: the first publisher's key is the anchor
    public = private_key.public_key()
    for text in envelopes:
        try:
            verify_envelope_detailed(json.loads(text), [public])
            return True
        except (VerificationError, ValueError, TypeError):
            continue
    return False


def ensure_anchor(engine: Engine, private_key: Ed25519PrivateKey, actor: str) -> KeyState:
    """Record `private_key` as the first trusted key when the history is empty (``ratchet init``); else no-op."""
    ensure_schema(engine)
    with engine.begin() as conn:
        state = key_state(conn)
        if not state.changes and _signed_any_manifest(conn, private_key):
            append_change(
                conn,
                private_key,
                "add",
                private_key.public_key(),
                actor,
                "ratchet init: first key",
                state=state,
            )
        return state


def signed_history(conn_or_engine: Engine | Connection) -> list[dict[str, Any]]:
    """Every key change with its DSSE envelope, oldest first (for exports: each verifies offline with the key that
    was trusted before it, ``ratchet_stats.dsse.verify_statement`` with :data:`KEY_CHANGE_PREDICATE`)."""
    if isinstance(conn_or_engine, Connection):
        rows = _rows(conn_or_engine)
    else:
        with conn_or_engine.connect() as conn:
            rows = _rows(conn)
    verdicts = {c.sequence: c for c in key_state(conn_or_engine).changes}
    return [
        {**verdicts[row.sequence].to_dict(), "envelope": json.loads(row.envelope)}
        for row in rows
        if row.sequence in verdicts
    ]


def public_key_listing(conn_or_engine: Engine | Connection, roots: Any) -> dict[str, Any]:
    """What a gateway publishes at ``/ratchet/public-key``: the keys trusted now (``roots`` carried through the
    history) under ``keys``, and keys trusted once and retired since under ``retired_keys`` (old evidence)."""
    state = key_state(conn_or_engine, as_key_list(roots))
    ever = dict(state.ever)
    for k in as_key_list(roots):
        ever.setdefault(key_id(k), k)

    def entry(k: Ed25519PublicKey) -> dict[str, str]:
        return {"key_id": key_id(k), "pem": public_key_pem(k)}

    return {
        "keys": [entry(k) for k in state.trusted.values()],
        "retired_keys": [entry(k) for kid, k in ever.items() if kid not in state.trusted],
    }


def keyring_text(keys: list[Ed25519PublicKey], changes: list[KeyChange]) -> str:
    """Every key as a PEM block with comment lines (added/retired, by whom): a ``--key-file`` for verifiers."""
    lines = ["# Ratchet keyring: every key the trusted-key history ever trusted (ratchet admin keys list)."]
    for k in keys:
        kid = key_id(k)
        for c in changes:
            if c.key_id == kid and c.verified:
                lines.append(f"# {c.action} {kid} at {c.at} by {c.actor}: {c.reason}")
        lines.append(public_key_pem(k).strip())
    return "\n".join(lines) + "\n"
