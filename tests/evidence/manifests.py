"""Signed release manifests stored as given, for tests: no change function, no chain or key-history checks.

    from tests.evidence.manifests import insert_raw_row, write_signed_manifest
    write_signed_manifest(engine, key, tasks={"tickets": {"stage": "live", "version": "v1"}})
    insert_raw_row(engine, 7, "not a signed envelope")          # a forged or unsigned row

Publishing goes through ``ratchet_core.manifest.publish`` (trusted keys, the hash chain); these write rows a test
needs to exist, or needs to be wrong. The fixtures `key` and `engine` (a new signing key, a control DB with no
tables yet) are re-exported by tests/release/conftest.py and tests/core/test_manifest.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ratchet_core.control_db import ensure_schema, make_engine, release_manifests
from ratchet_core.manifest import Flags, Manifest, TaskRelease, sign_manifest
from ratchet_stats.keys import generate_private_key


@pytest.fixture
def key():
    return generate_private_key()


@pytest.fixture
def engine(tmp_path):
    """A control DB with no tables yet: the first publish creates them."""
    return make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def write_signed_manifest(
    engine: Engine,
    private_key: Any,
    manifest: Manifest | None = None,
    *,
    tasks: dict[str, TaskRelease | dict[str, Any]] | None = None,
    flags: Flags | dict[str, Any] | None = None,
    pins: Sequence[str] | None = None,
    sequence: int | None = None,
    reason: str = "test manifest",
    actor: str = "test",
) -> Manifest:
    """Sign and store a manifest as given (tests and fixtures): no change function, no chain checks.

    Either pass a whole `manifest` or its parts (`tasks`, `flags`, `pins`). `sequence` defaults to the next free
    one; ``previous_digest`` is the digest of the row just below it when there is one.
    """
    ensure_schema(engine)
    if manifest is None:
        manifest = Manifest(
            tasks={
                k: TaskRelease.model_validate(v) if isinstance(v, dict) else v
                for k, v in (tasks or {}).items()
            },
            flags=Flags.model_validate(flags) if isinstance(flags, dict) else (flags or Flags()),
            pins=list(pins or []),
        )
    with engine.begin() as conn:
        if sequence is None:
            top = conn.execute(sa.select(sa.func.max(release_manifests.c.sequence))).scalar()
            sequence = int(top or 0) + 1
        below = conn.execute(
            sa.select(release_manifests.c.digest).where(release_manifests.c.sequence == sequence - 1)
        ).scalar()
        manifest = manifest.model_copy(
            update={
                "sequence": sequence,
                "issued_at": manifest.issued_at or _now(),
                "previous_digest": below or "",
                "reason": manifest.reason or reason,
                "actor": manifest.actor or actor,
            }
        )
        envelope_text, digest_hex = sign_manifest(manifest, private_key)
        conn.execute(
            release_manifests.insert().values(
                sequence=sequence, envelope=envelope_text, digest=digest_hex, created_at=manifest.issued_at
            )
        )
    return manifest


def insert_raw_row(engine: Engine, sequence: int, envelope_text: str, digest_hex: str = "") -> None:
    """Store a row without signing anything (tests of forged/unsigned rows)."""
    ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(
            release_manifests.insert().values(
                sequence=sequence, envelope=envelope_text, digest=digest_hex, created_at=_now()
            )
        )
