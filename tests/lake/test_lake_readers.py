"""The lake's readers on an fsspec URL (``memory://``): the night's traffic step, the segments sensor and release
evidence see the same segments, and produce the same outputs, as on a local folder."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import fsspec
import pytest

from ratchet_assets.night.fixtures import request_rows, write_day
from ratchet_assets.night.traffic import TrafficError, consolidate_traffic
from ratchet_assets.release.evidence import Watermark, pending_segments, read_pairs
from ratchet_core.lake import Lake, lake_location, segment_relpath
from ratchet_gateway.ledger import Ledger

DAY1, DAY2 = "2026-01-01", "2026-01-02"


@pytest.fixture
def memory_lake(tmp_path: Path) -> Iterator[str]:
    """A fresh ``memory://`` lake (the memory filesystem is one store per process: a unique root, removed after)."""
    fs = fsspec.filesystem("memory")
    root = f"/lake-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"
    yield f"memory://{root}"
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _mirror(local_lake: Path, url: str) -> list[str]:
    """Copy every sealed segment of a local lake to ``url``, one write-once object each (as the sealer does)."""
    fs, root = fsspec.core.url_to_fs(url)
    rels = sorted(str(p.relative_to(local_lake)) for p in local_lake.rglob("*.parquet"))
    for rel in rels:
        fs.pipe_file(f"{root}/{rel}", (local_lake / rel).read_bytes())
    return rels


def _seal(ledger_dir: Path, lake: str, rows: list[dict]) -> None:
    """Rows through the gateway's ledger (journal -> DuckDB -> sealer), sealed into ``lake`` at close."""
    led = Ledger(ledger_dir, lake, 3600, "gw", load_interval=0.01)
    led.open()
    for row in rows:
        led.append_nowait(dict(row))
    led.close()


def test_urls_are_kept_intact_and_paths_stay_paths(tmp_path: Path) -> None:
    assert lake_location("s3://bucket/lake") == "s3://bucket/lake"  # Path() would make it s3:/bucket/lake
    assert lake_location(tmp_path / "lake") == tmp_path / "lake"
    lake = Lake("memory://some/lake")
    assert not lake.local and lake.uri("traffic") == "memory:///some/lake/traffic"
    assert Lake(tmp_path / "lake").uri("traffic") == str(tmp_path / "lake" / "traffic")


def test_traffic_on_an_object_store_lake_is_byte_identical_to_the_local_folder(
    tmp_path: Path, memory_lake: str
) -> None:
    write_day(tmp_path / "lake", DAY1, 150, seed=7)
    rels = _mirror(tmp_path / "lake", memory_lake)
    local = consolidate_traffic(tmp_path / "lake", tmp_path / "art-local", DAY1)
    remote = consolidate_traffic(memory_lake, tmp_path / "art-remote", DAY1)
    for name in ("traffic.parquet", "segments.json"):
        a = (tmp_path / "art-local" / "traffic" / f"day={DAY1}" / name).read_bytes()
        b = (tmp_path / "art-remote" / "traffic" / f"day={DAY1}" / name).read_bytes()
        assert a == b, name
    day_segments = sorted(Path(r).name for r in rels if f"day={DAY1}" in r)
    assert remote.segments == local.segments == len(day_segments)
    assert (remote.rows, remote.requests, remote.pairs) == (local.rows, local.requests, local.pairs)
    # Local fixture segments carry the day's end + 1 min as mtime; objects were written now, months later.
    assert local.late_segments == []
    assert remote.late_segments == day_segments


def test_a_broken_object_is_named_by_its_url(tmp_path: Path, memory_lake: str) -> None:
    write_day(tmp_path / "lake", DAY1, 20, seed=1)
    _mirror(tmp_path / "lake", memory_lake)
    fs, root = fsspec.core.url_to_fs(memory_lake)
    fs.pipe_file(f"{root}/{segment_relpath(DAY1, 'r9', 1)}", b"PAR1 truncated upload")
    with pytest.raises(TrafficError) as err:
        consolidate_traffic(memory_lake, tmp_path / "art", DAY1)
    assert f"memory://{root}/traffic/day={DAY1}/r9-" in str(err.value)
    assert "cannot read Parquet footer" in str(err.value) and "rerun the partition" in str(err.value)


def test_rows_sealed_by_the_gateway_to_an_url_are_read_like_a_local_lake(
    tmp_path: Path, memory_lake: str
) -> None:
    rows = request_rows(DAY1, 80, seed=3, student_share=0.5, audit_share=0.6)
    _seal(tmp_path / "ledger-remote", memory_lake, rows)
    _seal(tmp_path / "ledger-local", str(tmp_path / "lake"), rows)

    remote = consolidate_traffic(memory_lake, tmp_path / "art-remote", DAY1)
    local = consolidate_traffic(tmp_path / "lake", tmp_path / "art-local", DAY1)
    assert remote.rows == len(rows) and remote.requests == sum(r["kind"] == "request" for r in rows)
    sub = Path("traffic") / f"day={DAY1}" / "traffic.parquet"
    assert (tmp_path / "art-remote" / sub).read_bytes() == (tmp_path / "art-local" / sub).read_bytes()
    assert local.rows == remote.rows

    # Release evidence: every pair row, in seal order (seq = append order), from the URL lake.
    segs, late = pending_segments(memory_lake, Watermark())
    assert late == 0 and segs == pending_segments(tmp_path / "lake", Watermark())[0] and segs
    got = [
        (p.version, p.task, p.role, p.outcome)
        for _, ps in read_pairs(memory_lake, segs, Watermark())
        for p in ps
    ]
    want = [(r["version"], r["task"], r["pair_role"], r["pair_outcome"]) for r in rows if r["kind"] == "pair"]
    assert got == want and want

    # The watermark: once read, nothing is pending until a new segment is sealed.
    wm = Watermark()
    for rel in segs:
        wm.mark_done(rel)
    assert pending_segments(memory_lake, wm)[0] == []
    more = request_rows(DAY1, 5, seed=4)
    _seal(tmp_path / "ledger-remote", memory_lake, more)
    new, _ = pending_segments(memory_lake, wm)
    assert len(new) == 1 and new[0] not in segs


def test_segments_sensor_on_an_url_lake(tmp_path: Path, memory_lake: str, monkeypatch) -> None:
    from ratchet_assets.defs import sensors
    from ratchet_assets.defs.jobs import nightly
    from ratchet_assets.defs.resources import NightConfig, RatchetPaths
    from ratchet_assets.defs.sensors import complete_days, night_segments_sensor

    fs, root = fsspec.core.url_to_fs(memory_lake)
    write_day(tmp_path / "lake", DAY1, 20, seed=1, seal_next_day=False)  # replicas r1, r2
    _mirror(tmp_path / "lake", memory_lake)
    end = datetime(2026, 1, 2, tzinfo=UTC)
    grace = timedelta(minutes=60)
    assert complete_days(memory_lake, "", end + timedelta(minutes=5), grace, DAY1) == []
    assert complete_days(memory_lake, "", end + timedelta(minutes=61), grace, DAY1) == [DAY1]
    # Within the grace period, DAY1 completes once every replica sealed a segment of a later day.
    day2 = f"{root}/traffic/day={DAY2}"
    seg = (tmp_path / "lake" / segment_relpath(DAY1, "r1", 1)).read_bytes()
    fs.pipe_file(f"{day2}/r1-00000500.parquet", seg)
    assert complete_days(memory_lake, "", end + timedelta(minutes=5), grace, DAY1) == []
    fs.pipe_file(f"{day2}/r2-00000500.parquet", seg)
    assert complete_days(memory_lake, "", end + timedelta(minutes=5), grace, DAY1) == [DAY1]

    # The Dagster sensor itself, with the lake resource set to the URL.
    monkeypatch.setattr(sensors, "clock_now", lambda: end + timedelta(minutes=5))
    resources = {
        "paths": RatchetPaths(lake=memory_lake, artifacts=str(tmp_path / "art")),
        "night": NightConfig(),
    }
    defs = dg.Definitions(jobs=[nightly], sensors=[night_segments_sensor], resources=resources)
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(), cursor="", definitions=defs, resources=resources
    ) as ctx:
        result = night_segments_sensor(ctx)
    assert [r.run_key for r in result.run_requests] == [f"night-{DAY1}"] and result.cursor == DAY1
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.ephemeral(), cursor=DAY1, definitions=defs, resources=resources
    ) as ctx:
        idle = night_segments_sensor(ctx)
    assert isinstance(idle, dg.SkipReason) and f"memory://{root}/traffic" in idle.skip_message
