"""The ledger's ``episode`` column (schema version 5, ``metadata.ratchet_episode``): segments sealed before it are
read with it NULL by the night's ``traffic`` step and the lake's readers, and their examples are made as before."""

from __future__ import annotations

import pyarrow.parquet as pq

from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.lake import Lake
from ratchet_core.layout import ArtifactLayout
from ratchet_core.schema import ADDED_COLUMNS, SCHEMA_VERSION, duckdb_ddl, request_row

DAY = "2026-02-04"


def test_rows_carry_their_episode_and_older_segments_read_it_as_null(tmp_path):
    assert ADDED_COLUMNS["episode"] == 5 <= SCHEMA_VERSION
    assert request_row(episode="conv-1")["episode"] == "conv-1" and request_row()["episode"] == ""
    assert "ADD COLUMN IF NOT EXISTS episode VARCHAR" in duckdb_ddl()  # an older ledger file gains it
    paths = sorted(write_day(tmp_path / "lake", DAY, 60, seed=5, student_share=0.0, seal_next_day=False))
    old = pq.read_table(paths[0])
    pq.write_table(old.drop_columns(["episode", "api"]), paths[0])  # sealed two versions ago
    tables = Lake(tmp_path / "lake").day_tables(DAY, ["request_id", "episode"])
    assert sum(t["episode"].null_count for t in tables) == old.num_rows

    art = tmp_path / "artifacts"
    result = consolidate_traffic(tmp_path / "lake", art, DAY)
    traffic = pq.read_table(ArtifactLayout(art).traffic_file(DAY))
    assert traffic["episode"].null_count == old.num_rows < traffic.num_rows == result.rows
    assert build_examples(art, DAY).examples > 0
