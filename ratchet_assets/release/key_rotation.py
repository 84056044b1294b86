"""Key rotation and retirement: change the trusted keys and keep the current release manifest signed.

A change of trusted keys is signed by a key that is trusted now (``ratchet_core.key_history``). Retiring the key
that signed the current manifest would leave gateways with no manifest they trust, so both operations publish the
current manifest again, signed by the key that stays, inside the same transaction (``ratchet admin keys
rotate|retire``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from ratchet_core import manifest as mf
from ratchet_core.key_history import KeyChange, append_change, check_change, key_state, trusted_keys
from ratchet_core.keys import KeyTrustError
from ratchet_stats.keys import Ed25519PrivateKey, Ed25519PublicKey, key_id


def _resign_current_manifest(conn: Connection, signer: Ed25519PrivateKey, actor: str, reason: str) -> Any:
    """Publish the current manifest again, signed by `signer` (before the key that signed it is retired).

    Without it, gateways that follow the history would find no manifest signed by a trusted key once the old key
    is retired, and fall back to the teacher everywhere. ``None`` when no manifest exists yet.
    """
    current, _ = mf.latest_verified(conn, trusted_keys(conn))
    if current is None:
        return None
    return mf.publish_in(conn, signer, lambda m: None, reason, actor)


def rotate(
    conn: Connection, old: Ed25519PrivateKey, new: Ed25519PrivateKey, actor: str, reason: str
) -> tuple[list[KeyChange], Any]:
    """In the caller's transaction: trust `new` (signed by `old`), re-sign the current manifest with `new`, retire
    `old` (signed by `new`). Returns the two changes and the re-signed manifest (or None when there is none)."""
    added = append_change(conn, old, "add", new.public_key(), actor, reason)
    manifest = _resign_current_manifest(conn, new, actor, f"key rotation: {reason}"[:500])
    retired = append_change(conn, new, "retire", old.public_key(), actor, reason, state=key_state(conn))
    return [added, retired], manifest


def retire(
    conn: Connection, signer: Ed25519PrivateKey, public_key: Ed25519PublicKey, actor: str, reason: str
) -> tuple[list[KeyChange], Any]:
    """In the caller's transaction: re-sign the current manifest with `signer`, then retire `public_key`.

    A key cannot retire itself here (the current manifest must be signed by a key that stays): use :func:`rotate`.
    """
    if key_id(signer) == key_id(public_key):
        raise KeyTrustError(
            "the signing key cannot retire itself (the current manifest must stay signed by a trusted key): "
            "sign with another trusted key, or use `ratchet admin keys rotate`"
        )
    check_change(key_state(conn), key_id(signer), "retire", key_id(public_key))
    manifest = _resign_current_manifest(conn, signer, actor, f"key retired: {reason}"[:500])
    retired = append_change(conn, signer, "retire", public_key, actor, reason, state=key_state(conn))
    return [retired], manifest
