"""The ledger in loop mode (``Ledger.open(loop)``, as the gateway opens it): the event loop writes the journal, a
sync process fdatasyncs it; group commit, durability under ``kill -9``, failure of the sync process, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from ratchet_core.schema import request_row
from ratchet_gateway.ledger import Ledger, read_journal
from ratchet_gateway.ledger.commit import LoopCommit

from .conftest import sealed_rows


def _row(i: int) -> dict:
    return request_row(request_id=f"r{i}", ts=1_700_000_000_000_000 + i, day="2026-01-02")


def test_concurrent_appends_share_fdatasyncs_and_every_row_is_sealed_once(tmp_path):
    commits: list[int] = []

    async def go() -> Ledger:
        led = Ledger(
            tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t", on_commit=lambda s, n: commits.append(n)
        )
        await asyncio.to_thread(led.open, asyncio.get_running_loop())  # as Gateway.start does
        assert isinstance(led.engine, LoopCommit) and led.engine.sync_process is not None
        seqs = await asyncio.gather(*(led.append(_row(i)) for i in range(200)))
        assert sorted(seqs) == list(range(1, 201))
        assert led.writable
        # acknowledged = in the journal, in seq order, before any DuckDB load
        assert [r["seq"] for r in read_journal(led.journal_path)][:200] == list(range(1, 201))
        led.append_nowait(_row(200))  # a row not awaited (pair rows) is committed too
        await asyncio.to_thread(led.close)  # as Gateway.stop does: the loop runs while close() waits
        return led

    led = asyncio.run(go())
    assert sum(commits) == 201
    assert len(commits) < 201 / 4, commits  # group commit: rows appended together share an fdatasync
    assert led.engine.sync_process.returncode == 0  # the sync process exits when the ledger closes
    rows = sealed_rows(tmp_path / "lake")
    assert sorted(r["seq"] for r in rows) == list(range(1, 202))


def test_a_dead_sync_process_fails_the_waiting_requests_and_marks_the_ledger_not_writable(tmp_path):
    async def go() -> None:
        led = Ledger(tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t", load_interval=3600)
        await asyncio.to_thread(led.open, asyncio.get_running_loop())
        await led.append(_row(0))
        led.engine.sync_process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(led.engine.sync_process.wait)
        with pytest.raises(OSError):
            await asyncio.wait_for(led.append(_row(1)), 10)
        assert not led.writable
        with pytest.raises(OSError):  # later requests are refused at once (the gateway answers 503)
            await led.append(_row(2))
        await asyncio.to_thread(led.close)

    asyncio.run(go())
    assert 1 in {r["seq"] for r in sealed_rows(tmp_path / "lake")}  # the acknowledged row is kept


def test_acknowledged_rows_survive_kill_9_of_gateway_and_sync_process(tmp_path):
    # A child acknowledges 100 rows in loop mode, then its whole process group (the sync process too) dies hard.
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal
        from pathlib import Path
        from ratchet_core.schema import request_row
        from ratchet_gateway.ledger import Ledger
        async def go():
            led = Ledger(Path({str(tmp_path / "ledger")!r}), {str(tmp_path / "lake")!r}, 3600, "t",
                         load_interval=3600)
            await asyncio.to_thread(led.open, asyncio.get_running_loop())
            await asyncio.gather(*(led.append(request_row(request_id=f"r{{i}}", day="2026-01-02",
                                                         ts=1_700_000_000_000_000)) for i in range(100)))
            print("acked", flush=True)
            os.killpg(0, signal.SIGKILL)
        asyncio.run(go())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        timeout=120,
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    assert proc.returncode == -signal.SIGKILL and "acked" in proc.stdout, proc.stderr[-2000:]
    led = Ledger(tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t")
    led.open()
    led.close()
    rows = sealed_rows(tmp_path / "lake")
    assert sorted(r["seq"] for r in rows) == list(range(1, 101))
    assert os.path.getsize(tmp_path / "ledger" / "t-0.journal") == 0


def test_rows_loaded_from_their_journal_json_equal_the_rows_converted_from_dicts():
    import orjson

    from ratchet_gateway.ledger import rows_to_arrow

    rows = []
    for i in range(150):
        r = request_row(
            request_id=f"r{i}",
            ts=1_700_000_000_000_000 + i,
            day="2026-01-02",
            messages=orjson.dumps([{"role": "user", "content": 'héllo 😀 "q"\n\\ <EMAIL_1>'}]).decode(),
            answer="" if i % 3 else "ünï\u2028code",
            confidence=None if i % 2 else 0.93,
            latency_ms=i,  # an int in a float column
            truncated=bool(i % 5 == 0),
        )
        r.update(seq=i + 1, replica="t-0")
        rows.append(r)
    encoded = [orjson.dumps(r) for r in rows]
    assert rows_to_arrow(rows, encoded=encoded).equals(rows_to_arrow(rows))
    assert rows_to_arrow(rows, encoded=[b"{not json"] * 150).equals(rows_to_arrow(rows))  # refused: the dicts
