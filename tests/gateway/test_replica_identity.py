"""A replica's name (``RATCHET_REPLICA_ID`` / ``ratchet gateway --replica``) is its own in the lake: a ledger whose
name already has another ledger's segments refuses to start with a clear message, and a segment name taken by
another writer is never replaced and never costs a row."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ratchet_core.lake import LEDGER_ID
from ratchet_core.schema import request_row
from ratchet_core.settings import Settings, SettingsError, load_settings
from ratchet_gateway.cli import gateway
from ratchet_gateway.ledger import Ledger, ReplicaConflict

from .conftest import sealed_rows


def _append(ledger: Ledger, tag: str, n: int) -> None:
    async def go():
        await asyncio.gather(
            *(ledger.append(request_row(request_id=f"{tag}{i}", ts=1_700_000_000_000_000, day="2026-01-02"))
              for i in range(n))
        )  # fmt: skip

    asyncio.run(go())


def _ledger(tmp_path: Path, name: str, base: str = "edge") -> Ledger:
    return Ledger(tmp_path / name / "ledger", str(tmp_path / "lake"), 3600, base, load_interval=0.05)


def test_a_second_ledger_with_a_taken_replica_id_refuses_to_start(tmp_path):
    a = _ledger(tmp_path, "a")
    a.open()
    _append(a, "a", 5)
    a.close()
    b = _ledger(tmp_path, "b")  # another gateway's home, the same replica id, the same lake
    with pytest.raises(
        ReplicaConflict, match=r"replica id edge-0 already has 1 segment\(s\).*RATCHET_REPLICA_ID"
    ):
        b.open()
    # its own name is fine, and the first ledger still opens as itself
    c = _ledger(tmp_path, "b", base="edge-b")
    c.open()
    c.close()
    a.open()
    assert a.replica == "edge-0"
    a.close()


def test_a_sealing_conflict_never_loses_a_row(tmp_path):
    """Both start before either sealed (so neither saw the other's segments): the second to seal finds its name
    taken, keeps its rows in its ledger and says why; the first one's segment is untouched."""
    a, b = _ledger(tmp_path, "a"), _ledger(tmp_path, "b")
    a.open()
    b.open()
    _append(a, "a", 3)
    _append(b, "b", 4)
    a.seal_now()
    b.seal_now(timeout=5)
    assert b.error is not None and "name is taken" in b.error and "RATCHET_REPLICA_ID" in b.error
    assert b._sql("SELECT count(*) FROM ledger")[0][0] == 4  # every row still in b's ledger
    assert b._sealed_seq == 0  # its seal mark never moved past rows it could not publish
    [segment] = list((tmp_path / "lake").rglob("*.parquet"))
    assert pq.read_schema(segment).metadata[LEDGER_ID].decode() == a.ledger_id
    assert sorted(r["request_id"] for r in sealed_rows(tmp_path / "lake")) == ["a0", "a1", "a2"]
    a.close()
    b.close()
    again = _ledger(tmp_path, "b")
    # restarted under that name: refused, rows kept
    with pytest.raises(ReplicaConflict, match="another ledger"):
        again.open()
    import duckdb

    with duckdb.connect(str(tmp_path / "b" / "ledger" / "edge-0.duckdb")) as con:
        assert con.execute("SELECT count(*) FROM ledger").fetchone()[0] == 4


def test_the_replica_id_setting_and_option(tmp_path, monkeypatch):
    monkeypatch.setenv("RATCHET_REPLICA_ID", "edge-7")
    assert load_settings(home=tmp_path).replica_id == "edge-7"
    for bad in ("a/b", "a b", "-x", "x" * 65):
        monkeypatch.setenv("RATCHET_REPLICA_ID", bad)
        with pytest.raises(SettingsError, match="RATCHET_REPLICA_ID"):
            load_settings(home=tmp_path)
    monkeypatch.delenv("RATCHET_REPLICA_ID")
    assert Settings(home=tmp_path).replica_id is None
    result = CliRunner().invoke(gateway, ["--replica", "../x"])
    assert result.exit_code == 2 and "not a valid replica" in result.output


def test_a_gateway_process_whose_name_is_taken_exits_with_the_reason(tmp_path):
    first = _ledger(tmp_path, "a", base="edge")
    first.open()
    _append(first, "a", 2)
    first.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(
        RATCHET_HOME=str(tmp_path / "b"),
        RATCHET_LAKE=str(tmp_path / "lake"),
        RATCHET_API_KEYS="app1:sk-app1-0123456789abcdef",
        RATCHET_STUDENT_BASE_URL="http://127.0.0.1:9/v1",
        RATCHET_TEACHER_API_BASE="http://127.0.0.1:9/v1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    ratchet = Path(sys.executable).with_name("ratchet")
    out = subprocess.run(
        [str(ratchet), "gateway", "--replica", "edge", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "replica id edge-0 already has" in out.stdout + out.stderr
