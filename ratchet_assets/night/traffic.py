"""The ``traffic`` step: a day's sealed lake segments -> one validated, deduplicated, sorted partition file.

Checks, in order:

- schema: every segment must have exactly ``LEDGER_SCHEMA``'s columns and types (else ``TrafficError`` naming
  the file and the column);
- duplicates: a row seen twice — the same ``(replica, seq)``, or the same ``(request_id, kind, pair_role)`` — is
  kept once (first by segment name) and counted; rows whose ``day`` is not the partition's are dropped and counted;
- late segments: sealed after the day's end plus a grace period on the clock the data was written with (the
  segment's ``ratchet_core.lake.SEALED_AT`` footer entry; its mtime when absent), or absent from the previous
  materialisation's ``segments.json`` (it arrived after the partition was built).

The lake is a folder or any fsspec URL (``ratchet_core.lake.Lake``: one code path; DuckDB reads local segments
in place, others through the registered fsspec filesystem); the artifacts are a local folder.

Output ``<artifacts>/traffic/day=D/traffic.parquet`` sorted by (ts, replica, seq), written by pyarrow with fixed
settings so a rerun over the same segments is byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ratchet_assets.night import (
    ChunkedParquetWriter,
    sql_list,
    sql_str,
    stream_batches,
)
from ratchet_assets.night.budget import MAX_SHARDS, Budget, resolve
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_core.lake import Lake, atomic_write_bytes
from ratchet_core.layout import ArtifactLayout
from ratchet_core.schema import ADDED_COLUMNS, COLUMN_NAMES, LEDGER_SCHEMA, duckdb_type

# Row groups of the traffic file: ~100 MB of wide ledger rows, so the writer's buffers stay a small part of the
# night's memory budget (ratchet_assets.night.budget).
ROW_GROUP_ROWS = 65_536
# A day of more kept rows than this is sorted in time ranges of about this many rows (each sorted in memory, in
# order) instead of by one out-of-core sort of all its wide rows, which spills and grows faster than the day.
ROWS_PER_BUCKET = 1_000_000
ORDER_BY = "ts, replica, seq, request_id, kind"
# The narrow columns the step's counts are made from (kept with each row's position).
_STAT_COLUMNS = "ts, kind, client, task, served_by, total_tokens, teacher_cost_usd, actual_cost_usd"


class TrafficError(ValueError):
    """The day's segments cannot be used as they are; the message says which file and what to do."""


@dataclass
class TrafficResult:
    day: str
    path: str
    rows: int
    requests: int
    pairs: int
    segments: int
    duplicates_dropped: int
    wrong_day_dropped: int
    late_segments: list[str] = field(default_factory=list)
    clients: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    served_by: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    teacher_cost_usd: float = 0.0
    actual_cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_schema(lake: Lake, rel: str) -> list[str]:
    """Differences between a segment's schema and LEDGER_SCHEMA (empty when it matches)."""
    try:
        schema = lake.read_schema(rel)
    except Exception as exc:  # unreadable: truncated copy, not Parquet, ...
        return [f"cannot read Parquet footer ({exc.__class__.__name__}: {exc})"]
    problems = []
    # A column added in a later schema version (ADDED_COLUMNS) is absent from older segments: read as NULL.
    missing = [
        f.name for f in LEDGER_SCHEMA if schema.get_field_index(f.name) < 0 and f.name not in ADDED_COLUMNS
    ]
    if missing:
        problems.append(f"missing columns {missing}")
    for want in LEDGER_SCHEMA:
        idx = schema.get_field_index(want.name)
        if idx >= 0 and not schema.field(idx).type.equals(want.type):
            problems.append(f"column {want.name!r} is {schema.field(idx).type}, expected {want.type}")
    extra = sorted(set(schema.names) - set(COLUMN_NAMES))
    if extra:
        problems.append(f"unexpected columns {extra}")
    return problems


def consolidate_traffic(
    lake_root: str | Path,
    artifacts_root: str | Path,
    day: str,
    grace: timedelta = timedelta(minutes=60),
    budget: Budget | int | None = None,
) -> TrafficResult:
    """Validate and merge the day's segments into ``traffic/day=D/traffic.parquet``; return what was seen.

    ``lake_root`` is a folder or an fsspec URL (``ratchet_core.lake``); ``artifacts_root`` is a local folder.
    `budget`: the memory budget (``ratchet_assets.night.budget``; DuckDB sorts and deduplicates out of core)."""
    lake = Lake(lake_root)
    files = lake.segments(day)
    bad = {lake.uri(s.rel): probs for s in files if (probs := check_schema(lake, s.rel))}
    if bad:
        lines = [f"{path}: {'; '.join(probs)}" for path, probs in bad.items()]
        raise TrafficError(
            "segments do not match the ledger schema (ratchet_core.schema.LEDGER_SCHEMA):\n  "
            + "\n  ".join(lines)
            + "\nMove them out of the lake (or rewrite them with the gateway's schema) and rerun the partition."
        )
    layout = ArtifactLayout(artifacts_root)
    out = layout.traffic_file(day)
    manifest_path = layout.traffic_segments(day)
    previous = set()
    if manifest_path.exists():
        previous = {s["name"] for s in json.loads(manifest_path.read_text())["segments"]}
    day_end = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(days=1)
    late = []
    for seg in files:
        # mtime first (no read); a file modified after the day may still have been sealed in time on the clock
        # its writer used (a demo's accelerated clock): the footer says (Lake.sealed_at).
        sealed_late = seg.mtime > day_end + grace and lake.sealed_at(seg) > day_end + grace
        if sealed_late or (previous and seg.name not in previous):
            late.append(seg.name)

    con = budget_connect(budget, artifacts_root, f"traffic-{day}")
    lake.attach(con)
    cols = ", ".join(COLUMN_NAMES)
    if files:
        paths = [lake.duckdb_path(seg.rel) for seg in files]
        # Segments sealed before a column was added lack it: union by name fills it with NULL.
        lacking = {
            c: sum(lake.read_schema(s.rel).get_field_index(c) < 0 for s in files) for c in ADDED_COLUMNS
        }
        union = ", union_by_name = true" if any(lacking.values()) else ""
        select = ", ".join(
            f"NULL::{duckdb_type(c)} AS {c}" if lacking.get(c) == len(files) else c for c in COLUMN_NAMES
        )
        con.execute(
            f"CREATE TEMP VIEW raw AS SELECT {select}, filename AS _file, file_row_number AS _row "
            f"FROM read_parquet({sql_list(paths)}, filename = true, file_row_number = true{union})"
        )
    else:
        con.register("_empty", LEDGER_SCHEMA.empty_table())
        con.execute(f"CREATE TEMP VIEW raw AS SELECT {cols}, '' AS _file, 0::BIGINT AS _row FROM _empty")
    counts = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE day <> {sql_str(day)}) FROM raw"
    ).fetchall()[0]
    total, wrong_day = int(counts[0]), int(counts[1])
    # Duplicates are looked for on narrow columns only: first whether there are any (distinct 64-bit hashes of
    # each key: equal rows have equal hashes, so no duplicate goes unseen; a hash collision only sends the day
    # down the exact path), then, only when there are, which rows to keep (two windows over the day's positions,
    # which grow faster than the day). The counts are made from ``keep``; the wide rows are read once, in order.
    on_day = f"day = {sql_str(day)}"
    distinct = con.execute(
        f"""SELECT count(*) = count(DISTINCT hash(replica, seq))
                   AND count(*) = count(DISTINCT hash(request_id, kind, pair_role))
            FROM raw WHERE {on_day}"""
    ).fetchall()[0][0]
    if distinct is not False:  # every row of the day is kept (True; None: no rows)
        con.execute(f"CREATE TEMP TABLE keep AS SELECT {_STAT_COLUMNS} FROM raw WHERE {on_day}")
        con.execute(f"CREATE TEMP VIEW kept AS SELECT {cols} FROM raw WHERE {on_day}")
    else:
        con.execute(
            f"""
            CREATE TEMP TABLE keep AS
            SELECT _file, _row, {_STAT_COLUMNS} FROM (
              SELECT _file, _row, {_STAT_COLUMNS},
                row_number() OVER (PARTITION BY replica, seq ORDER BY _file, _row) AS _by_seq,
                row_number() OVER (PARTITION BY request_id, kind, pair_role ORDER BY _file, _row) AS _by_id
              FROM (SELECT _file, _row, replica, seq, request_id, pair_role, {_STAT_COLUMNS} FROM raw
                    WHERE {on_day})
            ) WHERE _by_seq = 1 AND _by_id = 1
            """
        )
        con.execute(f"CREATE TEMP VIEW kept AS SELECT {cols} FROM raw SEMI JOIN keep USING (_file, _row)")
    kept_rows = con.execute("SELECT count(*) FROM keep").fetchall()[0][0]
    # Streamed: DuckDB sorts, Arrow batches go to Parquet in row groups (the day is never held in Python).
    writer = ChunkedParquetWriter(
        out, LEDGER_SCHEMA, row_group_size=ROW_GROUP_ROWS, compression="zstd", write_statistics=True
    )
    for batch in _sorted_kept(con, resolve(budget), int(kept_rows)):
        writer.write(batch)
    writer.close()
    segments = [{"name": seg.name, "bytes": seg.size} for seg in files]
    atomic_write_bytes(manifest_path, json.dumps({"day": day, "segments": segments}, sort_keys=True).encode())

    stats = con.execute(
        """
        SELECT count(*),
               count(*) FILTER (WHERE kind = 'request'),
               count(*) FILTER (WHERE kind = 'pair'),
               count(DISTINCT client) FILTER (WHERE kind = 'request'),
               coalesce(sum(total_tokens) FILTER (WHERE kind = 'request'), 0),
               coalesce(sum(teacher_cost_usd) FILTER (WHERE kind = 'request'), 0),
               coalesce(sum(actual_cost_usd) FILTER (WHERE kind = 'request'), 0)
        FROM keep
        """
    ).fetchall()[0]
    tasks = dict(
        con.execute(
            "SELECT task, count(*) FROM keep WHERE kind = 'request' GROUP BY task ORDER BY task"
        ).fetchall()
    )
    served = dict(
        con.execute(
            "SELECT served_by, count(*) FROM keep WHERE kind = 'request' GROUP BY served_by ORDER BY served_by"
        ).fetchall()
    )
    con.close()
    kept_rows = int(stats[0])
    return TrafficResult(
        day=day,
        path=str(out),
        rows=kept_rows,
        requests=int(stats[1]),
        pairs=int(stats[2]),
        segments=len(files),
        duplicates_dropped=total - wrong_day - kept_rows,
        wrong_day_dropped=wrong_day,
        late_segments=late,
        clients=int(stats[3]),
        tasks={k: int(v) for k, v in tasks.items()},
        served_by={k: int(v) for k, v in served.items()},
        tokens=int(stats[4]),
        teacher_cost_usd=float(stats[5]),
        actual_cost_usd=float(stats[6]),
    )


def _sorted_kept(con: Any, budget: Budget, rows: int) -> Iterator[Any]:
    """The ``kept`` rows as Arrow batches in ``ORDER_BY`` order.

    A big day whose segments each cover a short stretch of it (as the gateway writes them: rows in time order,
    sealed every few minutes) is sorted in time ranges of ~``ROWS_PER_BUCKET`` rows (bounds: timestamps at
    quantiles of the kept rows, so rows of one timestamp share a range), one after the other: DuckDB reads only
    the row groups whose ``ts`` statistics overlap the range and sorts it in memory, instead of one out-of-core
    sort of all the day's wide rows (which spills and grows faster than the day). ``ORDER_BY`` is a total order
    (``(replica, seq)`` is unique among kept rows), so the rows and the file are the same either way. Segments
    that overlap in time so much that the ranges would read the day more than three times take the one sort.
    ``budget.shards`` > 0 forces that many ranges (tests)."""
    buckets = budget.shards or min(MAX_SHARDS, -(-rows // ROWS_PER_BUCKET))
    bounds: list[Any] = []
    if buckets > 1:
        quantiles = ", ".join(repr(i / buckets) for i in range(1, buckets))
        got = con.execute(f"SELECT quantile_disc(ts, [{quantiles}]) FROM keep").fetchall()[0][0] or []
        bounds = sorted({b for b in got if b is not None})
    if bounds and not budget.shards:
        spans = con.execute("SELECT min(ts), max(ts), count(*) FROM raw GROUP BY _file").fetchall()
        edges = [None, *bounds, None]
        read = sum(
            n
            for lo, hi in zip(edges, edges[1:], strict=False)
            for first, last, n in spans
            if first is None or ((hi is None or first < hi) and (lo is None or last >= lo))
        )
        if read > 3 * sum(n for _, _, n in spans):
            bounds = []
    if not bounds:
        yield from stream_batches(con, f"SELECT * FROM kept ORDER BY {ORDER_BY}")
        return
    edges = [None, *bounds, None]
    for lo, hi in zip(edges, edges[1:], strict=False):
        where = " AND ".join(
            ([f"ts >= {sql_str(lo.isoformat())}::TIMESTAMPTZ"] if lo is not None else [])
            + ([f"ts < {sql_str(hi.isoformat())}::TIMESTAMPTZ"] if hi is not None else [])
        )
        if hi is None:  # the last range also takes rows without a time (sorted last, as one sort puts them)
            where = f"({where} OR ts IS NULL)"
        yield from stream_batches(con, f"SELECT * FROM kept WHERE {where} ORDER BY {ORDER_BY}")


def traffic_path(artifacts_root: str | Path, day: str) -> Path:
    """Where ``consolidate_traffic`` wrote the day (raises with what to do if it has not run)."""
    path = ArtifactLayout(artifacts_root).traffic_file(day)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: materialise `traffic` for {day} first")
    return path
