"""The ``training_set`` step: non-golden examples of the last ``window_days`` days as chat fine-tuning rows.

Row (one per example key, earliest occurrence wins, sorted by key)::

    {"messages": [...request messages, {"role": "assistant", ...}], "response_format": ..., "tools": ...}

Each line of ``train/day=D/train.jsonl`` is ``canonical_json(row)`` — assembled in DuckDB from the canonical
JSON parts stored by ``examples`` (keys in sorted order: messages < response_format < tools), so the line bytes
ARE the Merkle leaves. Commitments (``commitment.json``, RFC 9162 SHA-256): the row tree over the lines in file
order and the key tree over the sorted keys (``keys.txt``), which makes non-membership provable.
Keys assigned golden in the registry are excluded, and the result is checked against the full registry.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from ratchet_assets.night import atomic_write_bytes, connect, sql_list, sql_str, stream_batches
from ratchet_assets.night.budget import Budget
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.streamed import KeyTree, RowTree
from ratchet_core.layout import ArtifactLayout


class TrainingSetError(RuntimeError):
    """The training set cannot be built; the message says what to run first."""


@dataclass
class TrainingResult:
    day: str
    path: str
    keys_path: str
    rows: int
    rows_root: str
    keys_root: str
    window_days: int
    days: list[str] = field(default_factory=list)
    by_task: dict[str, int] = field(default_factory=dict)
    golden_overlap: int = 0
    erased: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window(day: str, window_days: int) -> list[str]:
    d = date.fromisoformat(day)
    return [(d - timedelta(days=i)).isoformat() for i in range(window_days - 1, -1, -1)]


ROW_SQL = """
'{"messages":' ||
  CASE WHEN messages = '[]' THEN '[' || answer || ']'
       ELSE substr(messages, 1, length(messages) - 1) || ',' || answer || ']' END ||
',"response_format":' || response_format || ',"tools":' || tools || '}'
"""


def build_training_set(
    artifacts_root: str | Path,
    day: str,
    window_days: int = 7,
    erasures: Erasures | None = None,
    budget: Budget | int | None = None,
) -> TrainingResult:
    """Write ``train/day=D/{train.jsonl, keys.txt, commitment.json}``; return counts, roots and the overlap.

    In bounded memory (`budget`, ``ratchet_assets.night.budget``): lines, keys and both Merkle trees are written
    and hashed as the rows stream from DuckDB (``night.streamed``)."""
    if window_days < 1:
        raise ValueError(f"window_days must be >= 1, got {window_days}")
    erasures = erasures or Erasures()
    days = window(day, window_days)
    layout = ArtifactLayout(artifacts_root)
    files = [p for d in days if (p := layout.examples_file(d)).exists()]
    if layout.examples_file(day) not in files:
        raise TrainingSetError(f"no examples for {day}: materialise `examples` for {day} first")
    from ratchet_assets.governance.importer import imports_until

    # imported training rows of the window (``ratchet import``); imported golden rows are left out by the registry
    files += [p for p in imports_until(artifacts_root, day) if p.parent.name[:10] >= days[0]]
    reg = layout.golden_registry()
    if not reg.exists():
        raise TrainingSetError(f"no golden registry at {reg}: materialise `golden_split` for {day} first")
    con = budget_connect(budget, artifacts_root, f"training_set-{day}")
    con.execute(f"CREATE TEMP TABLE reg AS SELECT example_key, golden FROM read_parquet({sql_str(str(reg))})")
    con.register("erased_keys", pa.table({"k": pa.array(sorted(erasures.example_keys), pa.string())}))
    con.register("erased_ids", pa.table({"r": pa.array(sorted(erasures.request_ids), pa.string())}))
    con.execute(
        f"CREATE TEMP VIEW ex AS SELECT * FROM read_parquet({sql_list(files)}, filename = true, "
        "file_row_number = true)"
    )
    unassigned = con.execute(
        "SELECT count(*) FROM ex WHERE example_key NOT IN (SELECT example_key FROM reg)"
    ).fetchall()[0][0]
    if unassigned:
        raise TrainingSetError(
            f"{unassigned} example keys in the window have no golden/train assignment: materialise "
            f"`golden_split` for every day of {days[0]}..{day} first"
        )
    erased = con.execute(
        """SELECT count(*) FROM ex WHERE example_key IN (SELECT k FROM erased_keys)
           OR request_id IN (SELECT r FROM erased_ids)"""
    ).fetchall()[0][0]
    # Narrow pass: which file row is each training key's earliest occurrence (the wide row is read once, below).
    con.execute(
        """
        CREATE TEMP TABLE train AS
        SELECT example_key, task, filename, file_row_number FROM (
          SELECT e.example_key, e.task, e.filename, e.file_row_number,
                 row_number() OVER (PARTITION BY e.example_key ORDER BY e.day, e.ts, e.request_id) AS rn
          FROM ex e JOIN reg r USING (example_key)
          WHERE NOT r.golden
            AND e.example_key NOT IN (SELECT k FROM erased_keys)
            AND e.request_id NOT IN (SELECT r FROM erased_ids)
        ) WHERE rn = 1
        """
    )
    overlap = con.execute(
        "SELECT count(*) FROM train WHERE example_key IN (SELECT example_key FROM reg WHERE golden)"
    ).fetchall()[0][0]
    by_task = dict(con.execute("SELECT task, count(*) FROM train GROUP BY task ORDER BY task").fetchall())
    out = layout.train_jsonl(day)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    keys_path = layout.train_keys(day)
    keys_tmp = keys_path.with_name(f".{keys_path.name}.tmp")
    key_tree, row_tree = KeyTree(), RowTree()
    rows = stream_batches(
        con,
        f"""
        SELECT t.example_key, encode({ROW_SQL}) AS line
        FROM train t JOIN ex e ON e.filename = t.filename AND e.file_row_number = t.file_row_number
        ORDER BY t.example_key
        """,
    )
    with open(tmp, "wb") as fh, open(keys_tmp, "wb") as keys_file:
        for batch in rows:
            keys = batch.column(0).to_pylist()
            lines = batch.column(1).to_pylist()
            fh.write(b"".join(line + b"\n" for line in lines))
            keys_file.write("".join(k + "\n" for k in keys).encode("ascii"))
            key_tree.add(keys)
            row_tree.add(lines)
    tmp.replace(out)
    keys_tmp.replace(keys_path)
    con.close()
    rows_c, keys_c = row_tree.finish(), key_tree.finish()
    rows_root = rows_c.root
    commitment = {
        "day": day,
        "window_days": window_days,
        "days": days,
        "rows": {"root": rows_root, "size": rows_c.size, "leaf": "canonical_json(row), file order"},
        "keys": {"root": keys_c.root, "size": keys_c.size, "leaf": "example key ASCII, sorted ascending"},
        "tree": "RFC 9162 SHA-256",
    }
    if erasures.example_keys or erasures.request_ids:  # the erasures this set honoured (the BOM records them)
        from ratchet_stats.canonical import canonical_json, sha256_hex

        erased_ids = {
            "example_keys": sorted(erasures.example_keys),
            "request_ids": sorted(erasures.request_ids),
        }
        commitment["erasures"] = {
            "honoured": len(erasures.example_keys) + len(erasures.request_ids),
            "rows_left_out": int(erased),
            "sha256": sha256_hex(canonical_json(erased_ids)),
        }
    atomic_write_bytes(
        layout.train_commitment(day), json.dumps(commitment, indent=2, sort_keys=True).encode()
    )
    return TrainingResult(
        day=day,
        path=str(out),
        keys_path=str(keys_path),
        rows=rows_c.size,
        rows_root=rows_root,
        keys_root=keys_c.root,
        window_days=window_days,
        days=days,
        by_task={k: int(v) for k, v in by_task.items()},
        golden_overlap=int(overlap),
        erased=int(erased),
    )


def disjoint_from_golden(artifacts_root: str | Path, day: str) -> tuple[bool, int, list[str]]:
    """Check ``train/day=D/keys.txt`` against every golden key ever assigned: (ok, overlap, examples)."""
    layout = ArtifactLayout(artifacts_root)
    keys_path, reg = layout.train_keys(day), layout.golden_registry()
    con = connect()
    shared = [
        r[0]
        for r in con.execute(
            f"""
            SELECT t.column0 FROM read_csv({sql_str(str(keys_path))}, header = false, columns = {{'column0': 'VARCHAR'}}) t
            JOIN (SELECT example_key FROM read_parquet({sql_str(str(reg))}) WHERE golden) g
              ON g.example_key = t.column0
            ORDER BY 1
            """
        ).fetchall()
    ]
    con.close()
    return not shared, len(shared), shared[:5]
