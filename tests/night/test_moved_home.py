"""A home moved to another folder, or restored there from a copy, reruns its night: no training, the same evidence.

Real components: the night's Dagster assets on a test home (traffic -> ... -> lora_adapter -> evaluation_certificate
-> bom, and daily_receipt) with a real (tiny) LoRA training on the demo base, the real student server on loopback,
the control DB, keys and Dagster instance in the home. The home is renamed, then copied elsewhere with the one
before deleted; each time the night is rerun there. A home whose records hold absolute paths (as written before
records named items by their place in their store) is restored and rerun the same way.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from tests.night.nights import LOW_TARGET, TINY_TRAINING, run_night

from .conftest import home_with_a_day

# one tiny training (~10-30 s) and three nights of ~60 golden answers: ~1-3 min on the shared 2 cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

DAY = "2026-01-01"


def _night(home: Path) -> dg.ExecuteInProcessResult:
    """The night of DAY in `home`: its own Dagster instance (home/dagster) and a student server on its base."""
    (home / "dagster").mkdir(exist_ok=True)
    instance = dg.DagsterInstance.local_temp(tempdir=str(home / "dagster"))
    try:
        result = run_night(
            home,
            DAY,
            training=TINY_TRAINING,
            certificate=LOW_TARGET,
            bom=True,
            receipt=True,
            instance=instance,
        )
    finally:
        instance.dispose()
    assert result.success, [e.step_failure_data.error.message for e in result.all_events if e.is_step_failure]
    return result


def _artifacts(home: Path) -> dict[str, str]:
    """sha256 of every artifact (the evidence: certificate, BOM, receipt, commitments; the data sets, the adapter
    and its record), by name; lock and temporary files (a leading dot) left out."""
    root = home / "artifacts"
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def _effects(home: Path, effect_type: str) -> list:
    from ratchet_assets.effects import EffectLedger
    from ratchet_core.control_db import make_engine

    ledger = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
    return ledger.list_effects(effect_type=effect_type, limit=1000)


def _reused(result: dg.ExecuteInProcessResult) -> tuple[bool, str]:
    [event] = [
        e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "lora_adapter"
    ]
    metadata = event.materialization.metadata
    return metadata["reused"].value, metadata["version"].value


def _mentions(home: Path, old: Path) -> list[str]:
    """Files of `home` whose bytes name the folder `old` (the control DB with its WAL included); the Dagster
    instance's run history, which keeps what each run logged, left out."""
    needle = str(old).encode()
    return [
        p.relative_to(home).as_posix()
        for p in sorted(home.rglob("*"))
        if p.is_file() and "dagster" not in p.relative_to(home).parts and needle in p.read_bytes()
    ]


def _rerun_in(home: Path, old: Path, first) -> dg.ExecuteInProcessResult:
    """Rerun the night in `home` (moved from `old`, which is gone): the adapter is reused, nothing is trained,
    every artifact is byte for byte the first night's."""
    assert not old.exists()
    result = _night(home)
    assert _reused(result) == (True, first.version)
    launches = _effects(home, "training.launch")
    assert [(e.status, e.attempts) for e in launches] == [("done", 1)]
    [receipt] = _effects(home, "receipt.sign")
    assert receipt.attempts == 1
    assert _artifacts(home) == first.artifacts
    return result


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The first night in a home at <tmp>/first/home; `home` is wherever that home is now (the tests move it)."""
    home = tmp_path_factory.mktemp("first") / "home"
    key = home_with_a_day(home, DAY, 90, seed=1)
    result = _night(home)
    reused, version = _reused(result)
    assert not reused
    artifacts = _artifacts(home)
    assert f"boms/{version}/bom.dsse.json" in artifacts and f"receipts/{DAY}/receipt.dsse.json" in artifacts
    return SimpleNamespace(home=home, version=version, artifacts=artifacts, public_key=key.public_key())


def test_a_renamed_home_and_a_copy_restored_elsewhere_rerun_their_night_without_training(first, tmp_path):
    from ratchet_assets.release import registry
    from ratchet_assets.release.control import candidates
    from ratchet_assets.release.decision import ReleaseRule
    from ratchet_core.control_db import make_engine
    from ratchet_core.manifest import Manifest

    born = first.home
    engine = make_engine(f"sqlite:///{(born / 'control.db').as_posix()}")
    assert registry.register_certificates(engine, born / "artifacts", first.public_key)
    engine.dispose()

    renamed = born.with_name("renamed")
    born.rename(renamed)
    first.home = renamed
    _rerun_in(renamed, born, first)
    assert _mentions(renamed, born) == []  # nothing the night stored names where the home was

    restored = tmp_path / "restored" / "home"
    shutil.copytree(renamed, restored, symlinks=True)
    shutil.rmtree(renamed)
    first.home = restored
    _rerun_in(restored, renamed, first)
    assert _mentions(restored, born) == [] and _mentions(restored, renamed) == []

    # release control finds the certificate it registered in the first home, under the restored one
    engine = make_engine(f"sqlite:///{(restored / 'control.db').as_posix()}")
    [row] = registry.list_versions(engine)
    assert row["certificate_path"] == f"certificates/{first.version}.dsse.json"
    assert registry.register_certificates(engine, restored / "artifacts", first.public_key) == []
    rule = ReleaseRule(target=0.01, floor=0.005)
    [candidate] = candidates(engine, [first.public_key], rule, restored / "artifacts", Manifest.default())
    assert "missing" not in (candidate.problem or ""), candidate.problem


def _as_written_before(home: Path) -> None:
    """Rewrite `home`'s records as Ratchet wrote them when records held absolute paths (under `home`): the adapter
    record and the training launch's result (``adapter_dir``, ``base_path``, no ``base_license``), the adapter
    loads' results and the versions registry's ``certificate_path``."""
    art = home / "artifacts"
    pointer = art / "adapters" / f"day={DAY}" / "adapter.json"
    record = json.loads(pointer.read_text())
    record.pop("base_license")
    record.update(adapter_dir=str(art / record["adapter_dir"]), base_path=str(home / "models" / "demo-base"))
    pointer.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    with sqlite3.connect(home / "control.db") as db:
        db.execute(
            "UPDATE effects SET result = ? WHERE effect_type = 'training.launch'",
            (json.dumps(record, sort_keys=True),),
        )
        for key, result in db.execute("SELECT key, result FROM effects WHERE effect_type = 'adapter.load'"):
            old = {**json.loads(result), "path": str(art / json.loads(result)["path"])}
            db.execute("UPDATE effects SET result = ? WHERE key = ?", (json.dumps(old, sort_keys=True), key))
        db.execute("UPDATE versions SET certificate_path = ? || '/' || certificate_path", (str(art),))


def test_a_home_whose_records_hold_absolute_paths_reruns_after_a_restore_elsewhere(first, tmp_path):
    from ratchet_assets.release import registry
    from ratchet_core.control_db import make_engine
    from ratchet_core.layout import ArtifactLayout

    written = tmp_path / "written" / "home"
    shutil.copytree(first.home, written, symlinks=True)
    engine = make_engine(f"sqlite:///{(written / 'control.db').as_posix()}")
    registry.register_certificates(engine, written / "artifacts", first.public_key)  # (if not registered yet)
    engine.dispose()
    _as_written_before(written)
    restored = tmp_path / "restored" / "home"
    shutil.copytree(written, restored, symlinks=True)
    shutil.rmtree(written)

    _rerun_in(restored, written, first)  # the rerun also rewrote the adapter record with names
    engine = make_engine(f"sqlite:///{(restored / 'control.db').as_posix()}")
    [row] = registry.list_versions(engine)
    assert row["certificate_path"].startswith(str(written))
    assert registry.certificate_file(restored / "artifacts", row, first.version) == ArtifactLayout(
        restored / "artifacts"
    ).certificate(first.version)
    assert registry.register_certificates(engine, restored / "artifacts", first.public_key) == []
