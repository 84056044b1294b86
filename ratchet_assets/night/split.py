"""The ``golden_split`` step: a permanent, deterministic assignment of example keys to golden or train.

A new key k gets the score ``s(k) = int(sha256(salt ":" k)[:13 hex], 16) / 2**52`` (uniform on [0, 1)) and is
golden iff ``s(k) < share``. Per task, if fewer than ``floor`` keys are golden to date (the floor is the least
number of rows that can certify the target: ``ratchet_stats.bounds.rows_to_certify(target, delta)``, i.e.
``ratchet stats plan``), more of the day's NEW keys of that task become golden, lowest score first. Only new keys
are topped up: an older train key has already been in a training set, and golden rows must never have been.

The registry ``golden/registry.parquet`` (key, task, golden, reason, first_day) records every assignment and only
grows, so once golden, always golden (and once train, always train); it is rewritten under a file lock, by
atomic rename. The day's output is the golden set to date: every golden example of days <= D not erased,
``golden/day=D/golden.parquet`` (sorted by key) and ``keys.txt``; its commitment is the RFC 9162 root over the
sorted keys (``ratchet_stats.commitment.key_commitment``); it and the row commitment are written once, to
``golden/day=D/commitment.json`` (``night.commitments``), for the certificate and the BOM.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ratchet_assets.night import ChunkedParquetWriter, sql_list, sql_str, stream_batches
from ratchet_assets.night.budget import Budget
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.examples import EXAMPLES_SCHEMA, examples_path
from ratchet_assets.night.streamed import stream_golden_commitment
from ratchet_core.layout import ArtifactLayout

REGISTRY_SCHEMA = pa.schema(
    [
        ("example_key", pa.string()),
        ("task", pa.string()),
        ("golden", pa.bool_()),
        ("reason", pa.string()),
        ("first_day", pa.string()),
    ]
)
SCORE_HEX = 13  # 52 bits: exact in a double
GOLDEN_ROW_GROUP_ROWS = 65_536


def _score_sql(salt: str, column: str = "example_key") -> str:
    return f"(('0x' || substr(sha256({sql_str(salt + ':')} || {column}), 1, {SCORE_HEX}))::UBIGINT / 4503599627370496.0)"


@dataclass
class SplitResult:
    day: str
    path: str
    keys_path: str
    golden_root: str
    golden_size: int
    new_keys: int
    new_golden: int
    floor_topped_up: dict[str, int] = field(default_factory=dict)
    golden_by_task: dict[str, int] = field(default_factory=dict)
    floor: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def registry_lock(artifacts_root: str | Path) -> Iterator[None]:
    """Exclusive lock around read-modify-write of the registry (several partitions may run at once)."""
    lock = ArtifactLayout(artifacts_root).golden_registry_lock()
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def split_golden(
    artifacts_root: str | Path,
    day: str,
    share: float = 0.2,
    salt: str = "ratchet-golden-v1",
    floor: int = 0,
    erasures: Erasures | None = None,
    budget: Budget | int | None = None,
    task_shares: dict[str, float] | None = None,
    task_floors: dict[str, int] | None = None,
) -> SplitResult:
    """Assign the day's new keys, then write the golden set to date for ``day``.

    ``task_shares``: task -> golden share from its signed policy (``ratchet_core.task_policy``), else ``share``;
    ``task_floors``: task -> its floor from its own target/delta (``task_policy.certification_floors``), else
    ``floor``.

    In bounded memory (`budget`, ``ratchet_assets.night.budget``): DuckDB assigns, sorts and deduplicates out of
    core; the registry, the golden set, its keys and its commitments are written as the rows stream past."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"golden share must be in [0, 1), got {share}")
    erasures = erasures or Erasures()
    today = examples_path(artifacts_root, day)
    reg_path = ArtifactLayout(artifacts_root).golden_registry()
    con = budget_connect(budget, artifacts_root, f"golden_split-{day}")
    with registry_lock(artifacts_root):
        if reg_path.exists():
            con.execute(f"CREATE TEMP TABLE reg AS SELECT * FROM read_parquet({sql_str(str(reg_path))})")
        else:
            con.register("_reg0", REGISTRY_SCHEMA.empty_table())
            con.execute("CREATE TEMP TABLE reg AS SELECT * FROM _reg0")
        con.execute(
            f"""
            CREATE TEMP TABLE new AS
            SELECT example_key, task, {_score_sql(salt)} AS score
            FROM read_parquet({sql_str(str(today))})
            WHERE example_key NOT IN (SELECT example_key FROM reg)
            """
        )
        share_sql = repr(float(share))
        for task, task_share in sorted((task_shares or {}).items()):
            if not 0.0 <= task_share < 1.0:
                raise ValueError(f"{task}: golden share must be in [0, 1), got {task_share}")
        if task_shares:
            cases = " ".join(f"WHEN {sql_str(t)} THEN {float(v)!r}" for t, v in sorted(task_shares.items()))
            share_sql = f"(CASE task {cases} ELSE {float(share)!r} END)"
        con.execute(f"ALTER TABLE new ADD COLUMN golden BOOLEAN; UPDATE new SET golden = score < {share_sql}")
        con.execute("ALTER TABLE new ADD COLUMN reason VARCHAR; UPDATE new SET reason = 'hash'")
        topped: dict[str, int] = {}
        task_floors = task_floors or {}
        if floor > 0 or any(v > 0 for v in task_floors.values()):
            have = dict(
                con.execute(
                    """
                    SELECT task, count(*) FROM (
                      SELECT task FROM reg WHERE golden UNION ALL SELECT task FROM new WHERE golden
                    ) GROUP BY task
                    """
                ).fetchall()
            )
            for (task,) in con.execute("SELECT DISTINCT task FROM new ORDER BY task").fetchall():
                deficit = task_floors.get(task, floor) - int(have.get(task, 0))
                if deficit <= 0:
                    continue
                picked = con.execute(
                    f"""
                    UPDATE new SET golden = true, reason = 'floor'
                    WHERE example_key IN (
                      SELECT example_key FROM new WHERE task = {sql_str(task)} AND NOT golden
                      ORDER BY score, example_key LIMIT {deficit})
                    """
                ).fetchall()[0][0]
                if picked:
                    topped[task] = int(picked)
        new_keys, new_golden = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE golden) FROM new"
        ).fetchall()[0]
        if new_keys:
            # Streamed; row groups as pq.write_table makes them (1Mi rows), so the file is the same bytes.
            writer = ChunkedParquetWriter(
                reg_path, REGISTRY_SCHEMA, row_group_size=1 << 20, compression="zstd"
            )
            merged = f"""
                SELECT example_key, task, golden, reason, first_day FROM reg
                UNION ALL
                SELECT example_key, task, golden, reason, {sql_str(day)} FROM new
                ORDER BY example_key
                """
            for batch in stream_batches(con, merged):
                writer.write(batch)
            writer.close()
            con.execute("DROP TABLE reg")
            con.execute(f"CREATE TEMP TABLE reg AS SELECT * FROM read_parquet({sql_str(str(reg_path))})")

    from ratchet_assets.governance.importer import imports_until

    # imported rows (``ratchet import``) whose keys the registry holds as golden join the golden set too
    files = ArtifactLayout(artifacts_root).examples_files(until=day) + imports_until(artifacts_root, day)
    con.register("erased_keys", pa.table({"k": pa.array(sorted(erasures.example_keys), pa.string())}))
    con.register("erased_ids", pa.table({"r": pa.array(sorted(erasures.request_ids), pa.string())}))
    golden = stream_batches(
        con,
        f"""
        SELECT * EXCLUDE (rn) FROM (
          SELECT e.*, row_number() OVER (PARTITION BY e.example_key ORDER BY e.day, e.ts, e.request_id) AS rn
          FROM read_parquet({sql_list(files)}) e
          JOIN (SELECT example_key FROM reg WHERE golden) g USING (example_key)
          WHERE e.example_key NOT IN (SELECT k FROM erased_keys)
            AND e.request_id NOT IN (SELECT r FROM erased_ids)
        ) WHERE rn = 1 ORDER BY example_key
        """,
    )
    layout = ArtifactLayout(artifacts_root)
    out, keys_path = layout.golden_file(day), layout.golden_keys(day)
    # Row groups of 65,536 rows (the writer's buffers stay small in the memory budget; 256,000 before this, at
    # 10M requests a day that took golden_split past 2 GB); the rows and their commitments do not change.
    writer = ChunkedParquetWriter(
        out, EXAMPLES_SCHEMA, row_group_size=GOLDEN_ROW_GROUP_ROWS, compression="zstd"
    )
    by_task: dict[str, int] = {}
    keys_tmp = keys_path.with_name(f".{keys_path.name}.tmp")
    with open(keys_tmp, "wb") as keys_file:
        for batch in golden:
            writer.write(batch)
            keys_file.write(
                "".join(k + "\n" for k in batch.column("example_key").to_pylist()).encode("ascii")
            )
            for item in pc.value_counts(batch.column("task")).to_pylist():
                by_task[item["values"]] = by_task.get(item["values"], 0) + int(item["counts"])
    writer.close()
    keys_tmp.replace(keys_path)
    by_task = dict(sorted(by_task.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
    commitment, _ = stream_golden_commitment(con, out, layout.golden_commitment(day), day)
    con.close()
    return SplitResult(
        day=day,
        path=str(out),
        keys_path=str(keys_path),
        golden_root=commitment.root,
        golden_size=commitment.size,
        new_keys=int(new_keys),
        new_golden=int(new_golden),
        floor_topped_up=topped,
        golden_by_task={k: int(v) for k, v in by_task.items()},
        floor=floor,
    )
