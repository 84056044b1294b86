"""The ledger's ``api`` column (schema version 4): segments sealed before it existed are read with it NULL, by the
night's ``traffic`` step and by the lake's readers alike, and the day's examples are made as before."""

from __future__ import annotations

import pyarrow.parquet as pq

from ratchet_assets.night.examples import build_examples
from ratchet_assets.night.fixtures import write_day
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.lake import Lake
from ratchet_core.layout import ArtifactLayout
from ratchet_core.schema import ADDED_COLUMNS, API_NAMES, SCHEMA_VERSION, request_row

DAY = "2026-02-03"


def test_rows_name_their_api_and_older_segments_read_it_as_null(tmp_path):
    assert ADDED_COLUMNS["api"] == 4 <= SCHEMA_VERSION and "responses" in API_NAMES
    assert request_row(api="messages")["api"] == "messages" and request_row()["api"] == ""
    paths = sorted(write_day(tmp_path / "lake", DAY, 60, seed=4, student_share=0.0, seal_next_day=False))
    assert len(paths) > 1
    old = pq.read_table(paths[0])
    pq.write_table(old.drop_columns(["api"]), paths[0])  # sealed by the previous version
    tables = Lake(tmp_path / "lake").day_tables(DAY, ["request_id", "api"])
    assert sum(t["api"].null_count for t in tables) == old.num_rows

    art = tmp_path / "artifacts"
    result = consolidate_traffic(tmp_path / "lake", art, DAY)
    traffic = pq.read_table(ArtifactLayout(art).traffic_file(DAY))
    assert traffic["api"].null_count == old.num_rows < traffic.num_rows == result.rows
    assert build_examples(art, DAY).examples > 0
