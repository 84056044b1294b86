"""`no_late_segments` judges lateness on the clock the data was written with: a demo day sealed in time on the
accelerated clock is not late though its files are months "younger" than the simulated day."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_cli.demo.state import set_accelerated_clock
from ratchet_core.clock import now as clock_now
from ratchet_core.lake import SEALED_AT, Lake, segment_relpath
from ratchet_core.schema import LEDGER_SCHEMA, request_row
from ratchet_gateway.ledger import Ledger


def test_a_day_sealed_in_time_on_the_accelerated_clock_is_not_late(tmp_path, monkeypatch):
    home, lake = tmp_path / "home", tmp_path / "lake"
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", "60")
    demo_day = (datetime.now(UTC) - timedelta(days=60)).date().isoformat()  # the demo's clock runs behind
    set_accelerated_clock(home, demo_day, 60.0, real_now=time.time() - 30)  # mid-day on the demo's clock
    day = clock_now().date().isoformat()
    assert day == demo_day

    led = Ledger(tmp_path / "ledger", str(lake), 3600, "gw")
    led.open()
    for i in range(5):
        led.append_nowait(request_row(request_id=f"r{i}", ts=int(clock_now().timestamp() * 1e6), day=day))
    led.seal_now()
    led.close()
    (seg,) = Lake(lake).segments(day)
    day_end = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(days=1)
    assert seg.mtime > day_end + timedelta(days=30)  # the file is "late" by its mtime
    assert Lake(lake).sealed_at(seg).date().isoformat() == day  # ... but was sealed on the writer's day

    # A segment of the same day without a seal time, written now: late by its mtime, as before.
    other = lake / segment_relpath(day, "old", 1)
    pq.write_table(pa.Table.from_pylist([request_row(request_id="x", day=day)], schema=LEDGER_SCHEMA), other)

    result = consolidate_traffic(lake, tmp_path / "artifacts", day)
    assert result.requests == 6
    assert result.late_segments == [other.name]
    assert SEALED_AT not in (pq.read_schema(other).metadata or {})
