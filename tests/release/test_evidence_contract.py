"""Release evidence sees the answer-contract guard: a shadow answer that broke its request's contract would have been
sent to the teacher, so it says nothing about the candidate's precision; segments sealed before the column existed
still read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_assets.release.evidence import Watermark, read_pairs
from ratchet_core.lake import segment_relpath
from ratchet_core.schema import LEDGER_SCHEMA, pair_row

DAY = "2026-01-05"


def _pair(i: int, outcome: str, violation: str = "") -> dict:
    return pair_row(
        request_id=f"r{i}",
        day=DAY,
        replica="gw1",
        seq=i,
        task="tickets",
        stage="canary",
        version="v2-abc",
        pair_role="shadow",
        pair_outcome=outcome,
        confidence=0.99,
        threshold=0.5,
        contract_violation=violation,
    )


def test_contract_violating_shadow_answer_is_no_evidence_and_old_segments_read(tmp_path):
    new = tmp_path / segment_relpath(DAY, "gw1", 1)
    new.parent.mkdir(parents=True)
    rows = [_pair(1, "disagree", "json_invalid"), _pair(2, "disagree"), _pair(3, "agree")]
    pq.write_table(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA), new)
    old = tmp_path / segment_relpath(DAY, "gw1", 4)
    old_schema = pa.schema([f for f in LEDGER_SCHEMA if f.name != "contract_violation"])
    old_rows = [{k: v for k, v in _pair(4, "disagree").items() if k != "contract_violation"}]
    pq.write_table(pa.Table.from_pylist(old_rows, schema=old_schema), old)
    rels = [segment_relpath(DAY, "gw1", 1), segment_relpath(DAY, "gw1", 4)]
    read = dict(read_pairs(tmp_path, rels, Watermark()))
    assert [p.error for p in read[rels[0]]] == [None, True, False]
    assert [(p.error, p.contract_violation) for p in read[rels[1]]] == [(True, "")]
