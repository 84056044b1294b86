"""The receipt's pair lines streamed batch by batch (``receipts.pair_batches`` / ``_DayPairs``) are the in-memory
definition's: the same lines in ``receipt.v3.pair_order``, the same root, counts, costs and audit answers, with
pairs sharing a request_id (ties ordered by the line's bytes) split across batches of any size."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ratchet_assets.night.receipts import _DayPairs, pair_batches, pair_leaves
from ratchet_stats import merkle
from ratchet_stats.receipt import micro, v3


def json_rid(line: bytes) -> str | None:
    return json.loads(line)["request_id"]


_STRS = ("request_id", "client", "task", "pair_role", "pair_outcome", "served_by", "version")


def _traffic(path: Path) -> Path:
    """Pair rows (and request rows to leave out) meant to hit every path: shared request_ids whose lines differ
    only late in the text, exact duplicates, NULL and '' request_ids, escapes, non-ASCII and astral text, NULL
    ts / ints / costs, and all parts of the audit-answer rule."""
    t0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
    rows = []
    ids = ["r-07", "r-01", "r-03", "r-01", None, "", "r-03", "r-01", "r-02", "r-01", "r-09", "r-01"]
    texts = ["plain", 'q"uote', "new\nline", "caf\u00e9", "\U0001f600", "back\\slash", None]
    outcomes = ["agree", "disagree", "error", None]
    for i in range(96):
        rows.append(
            {
                "kind": "pair" if i % 7 else "request",
                "request_id": ids[i % len(ids)],
                "ts": None if i % 11 == 3 else t0 + timedelta(microseconds=(i % 5) * 1_000_001),
                "client": ["acme", "zeta", None, "b\u00e9ta"][i % 4],
                "task": ["tickets", "sql", None][i % 3],
                "pair_role": ["audit", "shadow", None][i % 3 if i % 13 else 0],
                "pair_outcome": outcomes[i % 4],
                "served_by": ["teacher", "student", "", None][(i // 2) % 4],
                "version": texts[i % len(texts)],
                "prompt_tokens": None if i % 9 == 0 else i * 3,
                "completion_tokens": [0, 17, None, 40][i % 4],
                "status_code": [200, 200, 500, None][(i // 3) % 4],
                "teacher_cost_usd": None if i % 6 == 0 else 0.000125 * (i % 4),
                "actual_cost_usd": [0.0003, None, 1e-07, 0.1 + 0.2, -0.0, 0.0, 2.5e-06][
                    i % 7
                ],  # -0.0 reads 0.0
            }
        )
    rows += [dict(rows[5])] * 3  # exact duplicates of one pair line
    types = {c: pa.string() for c in _STRS}
    types |= {"kind": pa.string(), "ts": pa.timestamp("us", tz="UTC"), "status_code": pa.int32()}
    types |= {c: pa.int64() for c in ("prompt_tokens", "completion_tokens")}
    types |= {c: pa.float64() for c in ("teacher_cost_usd", "actual_cost_usd")}
    pq.write_table(pa.table({c: pa.array([r[c] for r in rows], t) for c, t in types.items()}), path)
    return path


@pytest.mark.parametrize("batch_rows", [1, 2, 5, 65_536])
def test_streamed_pair_lines_equal_the_in_memory_definition(tmp_path: Path, batch_rows: int) -> None:
    path = _traffic(tmp_path / "traffic.parquet")
    want, rows = pair_leaves(path)
    assert len(want) > 70 and len(set(want)) < len(want)
    assert want == v3.pair_order(want)
    assert any(b"\\u" not in w and "\U0001f600".encode() in w for w in want)
    batches = list(pair_batches(path, rows=batch_rows))
    got = [b for t in batches for b in t["line"].to_pylist()]
    assert got == want
    if batch_rows == 1:  # one row a batch from DuckDB: each request_id's rows were held back until complete
        assert [t["sort_key"].unique().to_pylist() for t in batches] == [
            [k] for k in sorted({r or "" for r in (json_rid(w) for w in want)})
        ]

    (tmp_path / "out").mkdir()
    day = _DayPairs(tmp_path / "out" / "pairs.jsonl")
    for t in batches:
        day.add(t)
    day.finish()
    assert (day.root, day.size) == (merkle.root(want).hex(), len(want))
    assert (tmp_path / "out" / "pairs.jsonl").exists() is False
    day.publish()
    day.discard()
    assert (tmp_path / "out" / "pairs.jsonl").read_bytes() == b"".join(w + b"\n" for w in want)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["pairs.jsonl"]

    assert day.audits == v3.audit_answers(rows) and day.audits
    clients: dict[str, tuple[int, int]] = {}
    first: dict[str, str] = {}
    for r in rows:
        name = str(r["client"])
        n, cost = clients.get(name, (0, 0))
        clients[name] = (n + 1, cost + micro(r["actual_cost_usd"]))
        if r["request_id"] is not None and (name not in first or r["request_id"] < first[name]):
            first[name] = r["request_id"]
    assert day.clients == clients and day.first == first


def test_a_non_finite_cost_is_refused_as_before(tmp_path: Path) -> None:
    path = _traffic(tmp_path / "traffic.parquet")
    table = pq.read_table(path)
    costs = table["actual_cost_usd"].to_pylist()
    costs[1] = math.nan
    pq.write_table(
        table.set_column(
            table.schema.get_field_index("actual_cost_usd"), "actual_cost_usd", pa.array(costs, pa.float64())
        ),
        path,
    )
    with pytest.raises(ValueError):
        pair_leaves(path)
    with pytest.raises(ValueError):
        list(pair_batches(path))
