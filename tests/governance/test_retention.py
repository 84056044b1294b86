"""The ``retention`` asset on an accelerated clock: expired days deleted per data class, evidence kept, a golden
set that certifies a version not yet retired held back (and reported) until the version is retired."""

from __future__ import annotations

import time
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest

from ratchet_assets.defs.resources import Retention, night_resources
from ratchet_assets.defs.retention import retention
from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.split import split_golden
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.control_db import ensure_schema, make_engine, versions
from ratchet_core.layout import ArtifactLayout

DAYS = ("2026-01-01", "2026-01-02")


def _run(home: Path, windows: Retention) -> dict:
    result = dg.materialize(
        [retention],
        instance=dg.DagsterInstance.ephemeral(),
        resources={**night_resources(home), "retention": windows},
    )
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


@pytest.mark.slow
def test_retention_on_an_accelerated_clock(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "1")
    monkeypatch.setenv("RATCHET_CLOCK_START", DAYS[0])
    from ratchet_core.clock import today

    art, lake = home / "artifacts", home / "lake"
    for i, day in enumerate(DAYS):
        write_day(lake, day, 20, seed=i, day_index=i)
        consolidate_traffic(lake, art, day)
        build_examples(art, day)
        split_golden(art, day, floor=2)
    layout = ArtifactLayout(art)
    layout.receipt_dir(DAYS[0]).mkdir(parents=True)
    layout.receipt_envelope(DAYS[0]).write_text("{}")  # evidence: never expires
    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    ensure_schema(engine)
    row = dict(
        task="tickets",
        stage="live",
        threshold=0.5,
        certificate_path="",
        note="",
        created_at="",
        updated_at="",
    )
    with engine.begin() as conn:
        conn.execute(versions.insert().values(version="v1-live", day=DAYS[0], status="live", **row))
    windows = Retention(traffic_days=2, examples_days=3, golden_days=2)

    first = _run(home, windows)  # today is the first day: nothing has expired
    assert first["today"] == DAYS[0] and first["deleted_traffic"] == 0 and first["deleted_golden"] == 0

    deadline = time.monotonic() + 30
    while today().isoformat() < "2026-01-05" and time.monotonic() < deadline:
        time.sleep(0.1)
    second = _run(home, windows)
    now = date.fromisoformat(second["today"])

    def expired(days: tuple[str, ...], window: int) -> int:
        return sum(d < (now - timedelta(days=window)).isoformat() for d in days)

    assert second["today"] >= "2026-01-05" and second["deleted_training"] == 0
    assert (
        second["deleted_traffic"] == expired((*DAYS, "2026-01-03"), 2) >= 2
    )  # + the next day's first segments
    assert second["deleted_examples"] == expired(DAYS, 3) and second["deleted_golden"] == 1
    assert not list(lake.glob(f"traffic/day={DAYS[0]}/*")) and not list(lake.glob(f"traffic/day={DAYS[1]}/*"))
    assert layout.days("traffic") == [] and layout.golden_dir(DAYS[0]).exists()
    assert not layout.golden_dir(DAYS[1]).exists() and layout.receipt_envelope(DAYS[0]).exists()
    assert "certifies v1-live (live)" in second["kept"]

    with engine.begin() as conn:
        conn.execute(versions.update().values(status="retired"))
    third = _run(home, windows)
    assert third["deleted_golden"] == 1 and not layout.golden_dir(DAYS[0]).exists()
    assert layout.golden_registry().exists()  # keys only: the disjointness of later nights still rests on it
