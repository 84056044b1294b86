"""The ledger's ``usage_source`` column (schema version 6: whether a row's tokens are the model's report or
Ratchet's count): segments sealed before it are read with it NULL by the night's ``traffic`` step and the lake's
readers, their examples are made as before, and an older ledger file gains it."""

from __future__ import annotations

import pyarrow.parquet as pq

from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.lake import Lake
from ratchet_core.layout import ArtifactLayout
from ratchet_core.schema import (
    ADDED_COLUMNS,
    SCHEMA_VERSION,
    USAGE_SOURCES,
    duckdb_ddl,
    pair_row,
    request_row,
)

DAY = "2026-02-05"


def test_rows_say_where_their_usage_came_from_and_older_segments_read_it_as_null(tmp_path):
    assert ADDED_COLUMNS["usage_source"] == SCHEMA_VERSION == 6 and USAGE_SOURCES == ("reported", "counted")
    assert request_row()["usage_source"] == "reported"  # every builder's rows carry the model's own usage
    assert pair_row(pair_role="audit", pair_outcome="agree")["usage_source"] == "reported"
    assert request_row(usage_source="counted")["usage_source"] == "counted"
    assert "ADD COLUMN IF NOT EXISTS usage_source VARCHAR" in duckdb_ddl()  # an older ledger file gains it
    paths = sorted(write_day(tmp_path / "lake", DAY, 60, seed=6, student_share=0.0, seal_next_day=False))
    old = pq.read_table(paths[0])
    pq.write_table(old.drop_columns(["usage_source"]), paths[0])  # sealed by version 5
    tables = Lake(tmp_path / "lake").day_tables(DAY, ["request_id", "usage_source"])
    assert sum(t["usage_source"].null_count for t in tables) == old.num_rows

    art = tmp_path / "artifacts"
    result = consolidate_traffic(tmp_path / "lake", art, DAY)
    traffic = pq.read_table(ArtifactLayout(art).traffic_file(DAY))
    assert traffic["usage_source"].null_count == old.num_rows < traffic.num_rows == result.rows
    assert build_examples(art, DAY).examples > 0
