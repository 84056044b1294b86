"""The lake on an S3-API server (moto's server mode on loopback): write-once keys by conditional PUT, and the
readers the night uses see exactly what was published."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ratchet_assets.night.fixtures import request_rows
from ratchet_core.lake import Lake, segment_relpath, write_once
from ratchet_core.schema import LEDGER_SCHEMA

DAY = "2026-01-01"


def test_segments_are_written_once_and_read_back(s3_env) -> None:
    bucket = s3_env.new_bucket()
    lake = Lake(f"s3://{bucket}/lake")
    rows = request_rows(DAY, 30, seed=1, workload="tickets", replicas=("gw-a",))
    rel = segment_relpath(DAY, "gw-a", 1)
    lake.publish_table(rel, pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA))

    other = pa.Table.from_pylist(rows[:3], schema=LEDGER_SCHEMA)
    with pytest.raises(FileExistsError, match="replica id"):  # a second writer of the key is refused
        lake.publish_table(rel, other)
    with pytest.raises(FileExistsError):
        write_once(lake.fs, lake.path(rel), b"not a segment")

    assert lake.days() == [DAY]
    (seg,) = lake.segments(DAY)
    assert seg.rel == rel and seg.size > 0
    assert lake.read_table(rel).num_rows == 30  # the first write stands
    assert lake.uri(rel) == f"s3://{bucket}/lake/{rel}"

    import duckdb

    con = duckdb.connect()
    lake.attach(con)  # DuckDB reads the object in place through fsspec (no httpfs extension download)
    (count,) = con.execute(f"SELECT count(*) FROM read_parquet('{lake.duckdb_path(rel)}')").fetchone()
    assert count == 30
