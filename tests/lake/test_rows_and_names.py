"""The ledger row's one home (ratchet_core.schema) and segment names built and parsed in one place (ratchet_core.lake)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ratchet_core.lake import (
    Lake,
    SegmentName,
    atomic_write_bytes,
    day_of,
    parse_segment_relpath,
    segment_relpath,
)
from ratchet_core.schema import (
    COLUMN_NAMES,
    LEDGER_SCHEMA,
    SCHEMA_VERSION,
    pair_row,
    pair_table,
    request_row,
    request_table,
)


def test_request_row_has_every_column_with_defaults_and_checks_names():
    row = request_row(request_id="r1", task="tickets", prompt_tokens=3)
    assert list(row) == COLUMN_NAMES
    assert row["kind"] == "request" and row["request_id"] == "r1" and row["prompt_tokens"] == 3
    assert row["answer"] == "" and row["completion_tokens"] == 0 and row["stream"] is False
    assert row["confidence"] is None and row["ts"] is None
    assert row["schema_version"] == SCHEMA_VERSION
    with pytest.raises(KeyError, match="promt_tokens"):
        request_row(request_id="r1", promt_tokens=3)
    with pytest.raises(KeyError, match="kind"):
        request_row(request_id="r1", kind="pair")
    # each call is a fresh dict (the gateway mutates rows: the ledger sets seq and replica)
    a, b = request_row(), request_row()
    a["seq"] = 7
    assert b["seq"] == 0


def test_pair_row_requires_a_known_role_and_outcome():
    row = pair_row(request_id="r1", pair_role="audit", pair_outcome="disagree", version="v1")
    assert row["kind"] == "pair" and row["pair_role"] == "audit" and row["pair_outcome"] == "disagree"
    assert list(row) == COLUMN_NAMES
    with pytest.raises(ValueError, match="pair_role"):
        pair_row(request_id="r1", pair_role="", pair_outcome="agree")
    with pytest.raises(ValueError, match="pair_outcome"):
        pair_row(request_id="r1", pair_role="shadow", pair_outcome="maybe")
    with pytest.raises(TypeError):
        pair_row(request_id="r1")  # role and outcome are required


def test_tables_equal_rows_built_one_by_one():
    rows = [request_row(request_id=f"r{i}", seq=i + 1, total_tokens=i) for i in range(3)]
    table = request_table(
        3, request_id=[f"r{i}" for i in range(3)], seq=pa.array([1, 2, 3]), total_tokens=range(3)
    )
    assert table.schema == LEDGER_SCHEMA
    assert table.equals(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA))
    pairs = pair_table(
        2, request_id=["a", "b"], pair_role=["audit", "shadow"], pair_outcome=["agree", "error"]
    )
    assert pairs.column("kind").to_pylist() == ["pair", "pair"]
    with pytest.raises(ValueError, match="pair_outcome"):
        pair_table(1, request_id=["a"], pair_role=["audit"], pair_outcome=[""])
    with pytest.raises(ValueError, match="has 1 values, not 2"):
        request_table(2, request_id=["a"])
    with pytest.raises(KeyError, match="nope"):
        request_table(1, nope=[1])


def test_segment_names_round_trip():
    rel = segment_relpath("2026-01-02", "host-0", 21)
    assert rel == "traffic/day=2026-01-02/host-0-00000021.parquet"
    assert parse_segment_relpath(rel) == SegmentName("2026-01-02", "host-0", 21)
    assert parse_segment_relpath("/abs/lake/" + rel).replica == "host-0"
    assert day_of(rel) == "2026-01-02"
    for bad in ("traffic/2026-01-02/r1-1.parquet", "traffic/day=2026-01-02/r1.parquet", "r1-1.parquet"):
        with pytest.raises(ValueError):
            parse_segment_relpath(bad)


def test_replica_segments_do_not_include_a_longer_replica_name(tmp_path):
    lake = Lake(tmp_path / "lake")
    for replica in ("t-1", "t-1-0", "t-10"):
        lake.publish_bytes(segment_relpath("2026-01-02", replica, 1), b"x")
    atomic_write_bytes(tmp_path / "lake" / "traffic" / "day=2026-01-03" / ".t-1-00000009.parquet.tmp-1", b"x")
    assert lake.replica_segments("t-1") == [segment_relpath("2026-01-02", "t-1", 1)]
    assert lake.replica_segments("t-1-0") == [segment_relpath("2026-01-02", "t-1-0", 1)]


def test_publish_is_write_once_complete_on_an_object_store():
    lake = Lake("memory://rows-and-names/lake")
    rel = segment_relpath("2026-01-02", "r1", 1)
    table = request_table(1, request_id=["r1"])
    lake.publish_table(rel, table)
    assert lake.exists(rel) and lake.read_table(rel).equals(table)
    assert [s.rel for s in lake.segments("2026-01-02")] == [rel]
    assert lake.replica_segments("r1") == [rel]
