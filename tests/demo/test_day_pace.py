"""The accelerated demo keeps its days on a loaded machine: a day's traffic that outlasts the day is still stamped
that day (the clock waits for it), is sealed before the night, and no segment is late."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_cli.demo.runner import DemoOptions, DemoRunner
from ratchet_core.clock import now as clock_now
from ratchet_core.lake import Lake
from ratchet_core.schema import request_row
from ratchet_gateway.ledger import Ledger

DAY, NEXT = "2026-01-01", "2026-01-02"
DAY_SECONDS = 2.0
PER_REQUEST_S = 0.25  # a loaded machine: a burst of 6 takes 1.5 s, so two bursts outlast the 2-second day


def test_a_day_whose_traffic_runs_late_keeps_every_row_and_no_segment_is_late(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_DAY_SECONDS", f"{DAY_SECONDS:g}")
    options = DemoOptions(home=home, day_seconds=DAY_SECONDS, requests_per_day=12, bursts=2, dagster_ui=True)
    lines: list[str] = []
    runner = DemoRunner(options, lines.append)
    # The gateway's ledger, stamping rows on Ratchet's clock (as the gateway does) and sealing on its own timer.
    ledger = Ledger(tmp_path / "ledger", str(home / "lake"), options.segment_seconds, "gw")
    ledger.open()
    sent_at: list[float] = []

    def slow_sender(base_url: str, api_key: str, *, requests: int, **_: object) -> dict:
        for _i in range(requests):
            time.sleep(PER_REQUEST_S)
            now = clock_now()
            ledger.append_nowait(
                request_row(
                    request_id=f"r{len(sent_at)}",
                    ts=int(now.timestamp() * 1e6),
                    day=now.date().isoformat(),
                    task="tickets",
                    status_code=200,
                )
            )
            sent_at.append(time.time())
        return {"sent": requests, "ok": requests, "correct": requests, "served_by": {"teacher": requests},
                "by_task": {}, "error_samples": []}  # fmt: skip

    monkeypatch.setattr("ratchet_cli.loadgen.run_traffic", slow_sender)
    try:
        started = time.time()
        totals = runner.run_day(DAY)
        # The night: the clock stands at the next midnight until the next day's traffic starts it.
        during_night = clock_now()
    finally:
        ledger.close()

    assert totals.ok == 12
    assert totals.day_seconds > DAY_SECONDS and totals.past_day_end > 0  # what the day's line reports
    assert sent_at[-1] - started > DAY_SECONDS  # the traffic did outlast its day
    assert Lake(home / "lake").days() == [DAY]  # ... and not one row went to a later day
    result = consolidate_traffic(home / "lake", tmp_path / "artifacts", DAY)
    assert result.requests == 12
    assert result.late_segments == []
    assert during_night == datetime(2026, 1, 2, tzinfo=UTC)
    assert not [line for line in lines if "warning" in line]
