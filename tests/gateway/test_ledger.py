"""The ledger alone: journal replay after a crash, torn tails, restart-safe sealing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from ratchet_core.schema import request_row
from ratchet_gateway.ledger import Ledger

from .conftest import sealed_rows


def _row(i: int) -> dict:
    return request_row(request_id=f"r{i}", ts=1_700_000_000_000_000 + i, day="2026-01-02")


def _append(ledger: Ledger, ids: range) -> None:
    async def go():
        await asyncio.gather(*(ledger.append(_row(i)) for i in ids))

    asyncio.run(go())


def test_acknowledged_rows_survive_a_crash_before_duckdb_load(tmp_path):
    # A child appends 50 rows (acknowledged = fdatasync'd) with DuckDB loading effectively off, then dies hard.
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from pathlib import Path
        from ratchet_core.schema import request_row
        from ratchet_gateway.ledger import Ledger
        led = Ledger(Path({str(tmp_path / "ledger")!r}), {str(tmp_path / "lake")!r}, 3600, "t", load_interval=3600)
        led.open()
        async def go():
            await asyncio.gather(*(led.append(request_row(request_id=f"r{{i}}", day="2026-01-02",
                                                        ts=1_700_000_000_000_000)) for i in range(50)))
        asyncio.run(go())
        os._exit(9)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=False, timeout=120)
    journal = tmp_path / "ledger" / "t-0.journal"
    assert journal.stat().st_size > 0
    with journal.open("ab") as fh:  # a torn record from a write that was never acknowledged
        fh.write(b'\x40\x00\x00\x00\x00\x00\x00\x00{"partial')
    led = Ledger(tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t")
    led.open()
    assert led.replica == "t-0"
    _append(led, range(50, 60))
    led.close()
    rows = sealed_rows(tmp_path / "lake")
    assert sorted(r["request_id"] for r in rows) == sorted(f"r{i}" for i in range(60))
    assert sorted(r["seq"] for r in rows) == list(range(1, 61))


def test_crash_between_segment_rename_and_mark_never_seals_twice(tmp_path):
    import duckdb

    led = Ledger(tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t", load_interval=0.01)
    led.open()
    _append(led, range(0, 20))
    led.close()  # seals rows 1..20 and stores the mark
    con = duckdb.connect(str(tmp_path / "ledger" / "t-0.duckdb"))
    con.execute("UPDATE seal_state SET sealed_seq = 0")  # as if we died right after the rename
    con.close()
    led = Ledger(tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t", load_interval=0.01)
    led.open()
    _append(led, range(20, 30))
    led.close()
    seqs = sorted(r["seq"] for r in sealed_rows(tmp_path / "lake"))
    assert seqs == list(range(1, 31))
    assert len(list(Path(tmp_path / "lake").glob("traffic/day=*/t-0-*.parquet"))) == 2


def test_group_commit_shares_fsyncs(tmp_path):
    batches: list[int] = []
    led = Ledger(
        tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t", on_commit=lambda s, n: batches.append(n)
    )
    led.open()
    _append(led, range(200))
    led.close()
    assert sum(batches) == 200 and len(batches) < 200  # concurrent appends shared commits


def _reset_mark(ledger_dir: Path) -> None:
    import duckdb

    con = duckdb.connect(str(ledger_dir / "t-0.duckdb"))
    con.execute("UPDATE seal_state SET sealed_seq = 0")  # as if we died right after publishing
    con.close()


def test_segments_are_write_once_objects_on_an_fsspec_url(tmp_path):
    import fsspec
    import pyarrow.parquet as pq

    root = f"/lake-{tmp_path.name}"  # the memory filesystem is one store per process
    fs = fsspec.filesystem("memory")
    led = Ledger(tmp_path / "ledger", f"memory://{root}", 3600, "t", load_interval=0.01)
    led.open()
    _append(led, range(0, 20))
    led.close()
    first = f"{root}/traffic/day=2026-01-02/t-0-00000001.parquet"
    assert fs.find(root) == [first]  # the final key only: no temp object, nothing renamed
    _reset_mark(tmp_path / "ledger")
    led = Ledger(tmp_path / "ledger", f"memory://{root}", 3600, "t", load_interval=0.01)
    led.open()
    _append(led, range(20, 30))
    led.close()
    keys = fs.find(root)
    assert keys == [first, f"{root}/traffic/day=2026-01-02/t-0-00000021.parquet"]
    seqs = []
    for key in keys:
        with fs.open(key, "rb") as fh:
            seqs += pq.read_table(fh).column("seq").to_pylist()
    assert sorted(seqs) == list(range(1, 31))  # every row once, none sealed twice after the lost mark
    fs.rm(root, recursive=True)


def test_segments_on_a_file_url_are_renamed_into_place(tmp_path):
    led = Ledger(tmp_path / "ledger", f"file://{tmp_path}/lake", 3600, "t", load_interval=0.01)
    led.open()
    _append(led, range(0, 15))
    led.close()
    assert sorted(r["seq"] for r in sealed_rows(tmp_path / "lake")) == list(range(1, 16))
    files = [p.name for p in (tmp_path / "lake").rglob("*") if p.is_file()]
    assert files == ["t-0-00000001.parquet"]  # no temp file left behind


def test_a_proof_finds_its_request_before_the_loader_has_put_it_in_duckdb(tmp_path):
    """The proof route's lookup (``proofs.find_request_row``) sees a row as soon as its append is acknowledged,
    while it is still only journaled (the loader runs every ``load_interval``; here effectively never)."""
    from ratchet_gateway.proofs import OwnRow, find_request_row

    led = Ledger(tmp_path / "ledger", str(tmp_path / "lake"), 3600, "t", load_interval=3600)
    led.open()
    try:
        row = {**_row(1), "client": "app1", "task": "tickets", "messages": '[{"role":"user","content":"hi"}]'}
        asyncio.run(led.append(row))
        assert led.lag_rows == 1  # acknowledged, not in DuckDB
        found = find_request_row(led, "r1")
        assert found == OwnRow("app1", "tickets", row["messages"], "", "", "2026-01-02")
        assert find_request_row(led, "r2") is None
    finally:
        led.close()
