"""The control DB's one schema: every table in one MetaData, created and migrated by ensure_schema."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
import sqlalchemy as sa

from ratchet_core import control_db as cdb

TABLES = {
    "release_manifests",
    "release_manifest_lock",
    "trusted_keys",
    "versions",
    "release_audit_log",
    "release_state",
    "failed_nights",
    "effects",
    "effect_policies",
    "effect_approvals",
    "effect_spend",
    "erasures",
    "erasure_log",
    "erasure_scopes",
    "erasure_applied",
    "gateway_safety_events",
    "client_limits",
    "client_spend",
    "gateway_replicas",
    "feedback",
    "sealed_requests",
    "sealed_segments",
    "version_certificates",
    "ratchet_schema",
}


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'control.db').as_posix()}"


def test_every_table_is_in_the_one_metadata_and_the_modules_use_those_objects() -> None:
    from ratchet_assets import effects
    from ratchet_assets.night import erasures
    from ratchet_assets.release import registry
    from ratchet_core import manifest
    from ratchet_gateway import safety

    assert set(cdb.metadata.tables) == TABLES
    assert manifest.release_manifests is cdb.release_manifests
    assert registry.versions is cdb.versions and registry.audit_log is cdb.release_audit_log
    assert effects.effects_table is cdb.effects
    assert erasures.erasures_table is cdb.erasures
    assert safety.gateway_safety_events is cdb.gateway_safety_events
    for module in (effects, erasures, registry, manifest, safety):
        assert not hasattr(module, "metadata"), f"{module.__name__} has its own MetaData"


def test_ensure_schema_creates_everything_once_and_records_the_version(tmp_path) -> None:
    engine = cdb.make_engine(_url(tmp_path))
    cdb.ensure_schema(engine)
    cdb.ensure_schema(engine)  # idempotent
    inspector = sa.inspect(engine)
    assert set(inspector.get_table_names()) >= TABLES
    with engine.connect() as conn:
        assert conn.execute(sa.select(cdb.ratchet_schema.c.version)).scalar_one() == cdb.SCHEMA_VERSION
        assert conn.execute(sa.select(sa.func.count()).select_from(cdb.release_manifest_lock)).scalar() == 1


def test_a_database_from_before_schema_versions_is_migrated_and_keeps_its_rows(tmp_path) -> None:
    # Version 1 had the tables (created module by module) and no version row and no trusted_keys.
    engine = cdb.make_engine(_url(tmp_path))
    old = [t for name, t in cdb.metadata.tables.items() if name not in ("trusted_keys", "ratchet_schema")]
    cdb.metadata.create_all(engine, tables=old)
    with engine.begin() as conn:
        conn.execute(
            cdb.erasures.insert().values(example_key="k1", reason="user asked", at="2026-01-01T00:00:00")
        )
    cdb.ensure_schema(engine)
    assert "trusted_keys" in sa.inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.execute(sa.select(cdb.erasures.c.example_key)).scalars().all() == ["k1"]
        assert conn.execute(sa.select(cdb.ratchet_schema.c.version)).scalar_one() == cdb.SCHEMA_VERSION


@pytest.mark.parametrize(
    "missing",
    [("feedback",), ("client_limits", "client_spend", "gateway_replicas")],
    ids=["version-6-with-client-limits", "version-6-with-feedback"],
)
def test_a_version_6_database_of_either_lineage_gets_every_table_and_keeps_its_rows(
    tmp_path, missing: tuple[str, ...]
) -> None:
    # Two lines of development each called their new tables version 6: one added the per-client limits, the
    # other feedback. Version 7 holds both; a database at 6 from either line is brought to 7 with all of them.
    engine = cdb.make_engine(_url(tmp_path))
    tables = [t for name, t in cdb.metadata.tables.items() if name not in missing]
    cdb.metadata.create_all(engine, tables=tables)
    with engine.begin() as conn:
        conn.execute(cdb.ratchet_schema.insert().values(id=1, version=6, updated_at="2026-01-01T00:00:00"))
        conn.execute(cdb.release_manifest_lock.insert().values(id=1))
        conn.execute(
            cdb.erasures.insert().values(example_key="k1", reason="user asked", at="2026-01-01T00:00:00")
        )
    assert not set(missing) & set(sa.inspect(engine).get_table_names())
    cdb.ensure_schema(engine)
    assert set(sa.inspect(engine).get_table_names()) >= TABLES
    with engine.connect() as conn:
        assert conn.execute(sa.select(cdb.erasures.c.example_key)).scalars().all() == ["k1"]
        assert conn.execute(sa.select(cdb.ratchet_schema.c.version)).scalar_one() == cdb.SCHEMA_VERSION


def test_migration_steps_run_in_order_from_the_stored_version(tmp_path, monkeypatch) -> None:
    engine = cdb.make_engine(_url(tmp_path))
    cdb.ensure_schema(engine)
    ran: list[int] = []
    monkeypatch.setattr(cdb, "SCHEMA_VERSION", cdb.SCHEMA_VERSION + 2)
    monkeypatch.setattr(
        cdb,
        "MIGRATIONS",
        {cdb.SCHEMA_VERSION - 1: lambda c: ran.append(1), cdb.SCHEMA_VERSION: lambda c: ran.append(2)},
    )
    cdb.ensure_schema(engine)
    assert ran == [1, 2]
    cdb.ensure_schema(engine)
    assert ran == [1, 2]  # current now: nothing runs again


def test_a_newer_schema_is_refused_with_a_clear_error(tmp_path) -> None:
    engine = cdb.make_engine(_url(tmp_path))
    cdb.ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(cdb.ratchet_schema.update().values(version=cdb.SCHEMA_VERSION + 1))
    with pytest.raises(cdb.SchemaError, match="upgrade Ratchet"):
        cdb.ensure_schema(engine)


def _ensure_in_child(url: str, barrier, out) -> None:
    barrier.wait()
    try:
        cdb.ensure_schema(cdb.make_engine(url))
        out.put("ok")
    except Exception as exc:  # reported to the parent
        out.put(repr(exc))


def test_concurrent_starters_create_the_schema_once(tmp_path) -> None:
    url = _url(tmp_path)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_ensure_in_child, args=(url, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == ["ok"] * 4
    with sa.create_engine(url).connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(cdb.ratchet_schema)).scalar() == 1
