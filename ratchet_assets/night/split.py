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

People's labels (``night.labels``): a golden row whose key has a recorded demonstration takes it as its answer,
``label_source`` ``people`` and the teacher's answer in ``teacher_answer`` (both in its row-tree leaf, so the
commitment says which rows people labelled); an imported row's source is its import's (``import`` unless the import
named one); every other row's is ``teacher``. A key whose teacher label feedback called bad (and no demonstration
fixed) is left out of the golden set the certificate is computed on: its label is known to be wrong. It stays golden
in the registry (never trained on).
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

from ratchet_assets.night import ChunkedParquetWriter, sql_list, sql_str
from ratchet_assets.night.budget import Budget, resolve
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.examples import EXAMPLES_SCHEMA, examples_path
from ratchet_assets.night.labels import Labels, import_label_sources
from ratchet_assets.night.ranges import (
    Values,
    check_key_order,
    in_key_order,
    plan_ranges,
    prefetched,
    prefetched_chunks,
    range_sql,
    snapshot,
)
from ratchet_assets.night.streamed import golden_row_leaf_sql, write_golden_commitment
from ratchet_core.layout import ArtifactLayout
from ratchet_stats.commitment import Commitment
from ratchet_stats.merkle_store import TreeBuilder

REGISTRY_SCHEMA = pa.schema(
    [
        ("example_key", pa.string()),
        ("task", pa.string()),
        ("golden", pa.bool_()),
        ("reason", pa.string()),
        ("first_day", pa.string()),
    ]
)
# The golden set's rows: an example's columns plus where its label came from (teacher | people | import) and, for a
# row people labelled, the teacher's answer it replaced.
GOLDEN_SCHEMA = pa.schema([*EXAMPLES_SCHEMA, ("label_source", pa.string()), ("teacher_answer", pa.string())])
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
    labels_by_source: dict[str, int] = field(default_factory=dict)  # golden rows per label source

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
    labels: Labels | None = None,
) -> SplitResult:
    """Assign the day's new keys, then write the golden set to date for ``day``.

    ``task_shares``: task -> golden share from its signed policy (``ratchet_core.task_policy``), else ``share``;
    ``task_floors``: task -> its floor from its own target/delta (``task_policy.certification_floors``), else
    ``floor``. ``labels``: people's labels (``night.labels.load_labels``): demonstrations relabel golden rows.

    In bounded memory (`budget`, ``ratchet_assets.night.budget``): DuckDB scores and assigns the day's new keys
    in one pass; the merged registry and the golden set to date are then produced one example-key range at a
    time (``night.ranges``: the files are sorted by key, so a range reads only its row groups, deduplicates over
    only its rows, and the ranges concatenate into the same bytes), the next range's query running while this
    one is written; each golden row's leaf text comes from the same query and is hashed, with its key, in
    Python (``hashlib``) into the key and row trees, so the golden file is not read back."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"golden share must be in [0, 1), got {share}")
    for task, task_share in sorted((task_shares or {}).items()):
        if not 0.0 <= task_share < 1.0:
            raise ValueError(f"{task}: golden share must be in [0, 1), got {task_share}")
    erasures = erasures or Erasures()
    b = resolve(budget)
    today = examples_path(artifacts_root, day)
    layout = ArtifactLayout(artifacts_root)
    reg_path = layout.golden_registry()
    reg_src = f"read_parquet({sql_str(str(reg_path))})"
    con = budget_connect(b, artifacts_root, f"golden_split-{day}")
    with registry_lock(artifacts_root):
        had_reg = reg_path.exists()
        share_sql = repr(float(share))
        if task_shares:
            cases = " ".join(f"WHEN {sql_str(t)} THEN {float(v)!r}" for t, v in sorted(task_shares.items()))
            share_sql = f"(CASE task {cases} ELSE {float(share)!r} END)"
        # The day's new keys, scored and assigned in one pass (the registry file read, never copied).
        new_only = f"WHERE example_key NOT IN (SELECT example_key FROM {reg_src})" if had_reg else ""
        con.execute(
            f"""
            CREATE TABLE new AS
            SELECT example_key, task, score, score < {share_sql} AS golden, 'hash' AS reason FROM (
              SELECT example_key, task, {_score_sql(salt)} AS score
              FROM read_parquet({sql_str(str(today))}) {new_only})
            """
        )
        topped: dict[str, int] = {}
        task_floors = task_floors or {}
        if floor > 0 or any(v > 0 for v in task_floors.values()):
            old_golden = f"SELECT task FROM {reg_src} WHERE golden UNION ALL " if had_reg else ""
            have = dict(
                con.execute(
                    f"SELECT task, count(*) FROM ({old_golden}SELECT task FROM new WHERE golden) GROUP BY task"
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
        if new_keys or not had_reg:
            # Streamed range by range (registry and new keys merged in key order); row groups as pq.write_table
            # makes them (1Mi rows), so the file is the same bytes. A first day with nothing to assign still
            # writes the (empty) registry: it is the record that golden_split ran, which training_set requires.
            writer = ChunkedParquetWriter(
                reg_path,
                REGISTRY_SCHEMA,
                row_group_size=1 << 20,
                compression="zstd",
            )
            cur = con.cursor()

            def registry_range(bounds: tuple[str, str | None]) -> pa.Table:
                in_range = range_sql("example_key", *bounds)
                old = (
                    f"SELECT example_key, task, golden, reason, first_day FROM {reg_src} WHERE {in_range} UNION ALL "
                    if had_reg
                    else ""
                )
                return cur.sql(
                    f"""{old}SELECT example_key, task, golden, reason, {sql_str(day)} AS first_day FROM new
                        WHERE {in_range} ORDER BY example_key"""
                ).to_arrow_table()

            last = ""
            for part in prefetched(plan_ranges(b, [today], today), registry_range):
                part = in_key_order(part, last)
                if part.num_rows:
                    last = part.column("example_key")[-1].as_py()
                    writer.write(part)
            cur.close()
            writer.close()  # renamed over the registry only now, after the last range read it
        con.execute("DROP TABLE new")
        # The golden set below reads this version of the registry, whatever other partitions rename over it
        # meanwhile (a hard link in this connection's spill folder, removed with it); none yet: an empty one.
        if reg_path.exists():
            reg_src = f"read_parquet({sql_str(str(snapshot(con, reg_path)))})"
        else:
            con.register("_reg0", REGISTRY_SCHEMA.empty_table())
            con.execute("CREATE TABLE reg0 AS SELECT * FROM _reg0")
            reg_src = "reg0"

    # imported rows (``ratchet import``) whose keys the registry holds as golden join the golden set too
    files = layout.examples_files(until=day) + layout.import_files(until=day)
    src = f"read_parquet({sql_list(files)})"
    con.register("_ek", pa.table({"k": pa.array(sorted(erasures.example_keys), pa.string())}))
    con.register("_ei", pa.table({"r": pa.array(sorted(erasures.request_ids), pa.string())}))
    con.execute("CREATE TABLE erased_keys AS SELECT * FROM _ek; CREATE TABLE erased_ids AS SELECT * FROM _ei")
    not_erased = "TRUE"
    if erasures.example_keys or erasures.request_ids:
        not_erased = "e.example_key NOT IN (SELECT k FROM erased_keys) AND e.request_id NOT IN (SELECT r FROM erased_ids)"
    # A key's earliest row; one file (no earlier day, no import) has one row per key, nothing to deduplicate.
    dedup = (
        "QUALIFY row_number() OVER (PARTITION BY e.example_key ORDER BY e.day, e.ts, e.request_id) = 1"
        if len(files) > 1
        else ""
    )
    tasks = [
        r[0]
        for r in con.execute(f"SELECT DISTINCT task FROM {src} WHERE task IS NOT NULL ORDER BY 1").fetchall()
    ]
    leaf_sql = golden_row_leaf_sql(tasks)
    # people's labels and the label sources of imports, as tables the range query joins (plain tables: the
    # ranges run on a cursor, another connection to this database)
    con.register("_people", (labels or Labels()).table())
    imports = import_label_sources(artifacts_root, layout.import_files(until=day))
    con.register(
        "_imports",
        pa.table(
            {
                "import_id": pa.array(sorted(imports), pa.string()),
                "label": [imports[i] for i in sorted(imports)],
            }
        ),
    )
    con.register("_bad", pa.table({"k": pa.array(sorted((labels or Labels()).bad), pa.string())}))
    con.execute(
        "CREATE TABLE people AS SELECT * FROM _people; CREATE TABLE import_labels AS SELECT * FROM _imports; "
        "CREATE TABLE bad_keys AS SELECT * FROM _bad"
    )
    bad_sql = " AND e.example_key NOT IN (SELECT k FROM bad_keys)" if (labels and labels.bad) else ""
    cur = con.cursor()

    def golden_range(bounds: tuple[str, str | None]) -> Iterator[pa.RecordBatch]:
        in_range = range_sql("example_key", *bounds)
        yield from cur.sql(
            f"""
            WITH g AS (
              SELECT e.* FROM {src} e
              WHERE {in_range.replace("example_key", "e.example_key")}
                AND e.example_key IN (SELECT example_key FROM {reg_src} WHERE golden AND {in_range})
                AND {not_erased}{bad_sql}
              {dedup}
            ), labelled AS (
              SELECT g.* REPLACE (coalesce(p.people_answer, g.answer) AS answer),
                     CASE WHEN p.people_answer IS NOT NULL THEN 'people'
                          WHEN g.source = 'import' THEN coalesce(i.label, 'import')
                          ELSE 'teacher' END AS label_source,
                     CASE WHEN p.people_answer IS NOT NULL AND g.source <> 'import' THEN g.answer END
                       AS teacher_answer
              FROM g LEFT JOIN people p ON p.example_key = g.example_key
                     LEFT JOIN import_labels i ON g.source = 'import'
                       AND i.import_id = split_part(g.request_id, ':', 2)
            )
            SELECT *, {leaf_sql} AS _leaf, example_key || chr(10) AS _key_line
            FROM labelled ORDER BY example_key
            """
        ).to_arrow_reader(16_384)  # small batches: buffers reused, fewer pages faulted in

    out, keys_path = layout.golden_file(day), layout.golden_keys(day)
    # Row groups of 65,536 rows (the writer's buffers stay small in the memory budget; 256,000 before this, at
    # 10M requests a day that took golden_split past 2 GB); the rows and their commitments do not change.
    writer = ChunkedParquetWriter(
        out, GOLDEN_SCHEMA, row_group_size=GOLDEN_ROW_GROUP_ROWS, compression="zstd"
    )
    by_task: dict[str, int] = {}
    by_label: dict[str, int] = {}
    keys_tmp = keys_path.with_name(f".{keys_path.name}.tmp")
    key_tree, row_tree = TreeBuilder(), TreeBuilder()
    last = ""
    with open(keys_tmp, "wb", buffering=1 << 20) as keys_file:
        for part in prefetched_chunks(plan_ranges(b, files, today), golden_range):
            if not part.num_rows:
                continue
            last = check_key_order(part.column("example_key"), last)[-1].as_py()
            if part.column("_leaf").null_count:  # a NULL part: the row is not what the examples step writes
                raise ValueError(f"{out}: a golden row has an empty column; rebuild it with golden_split")
            writer.write(part)
            every = [(0, part.num_rows)]
            key_lines = Values(part.column("_key_line"))
            keys_file.write(key_lines.span(0, part.num_rows))
            key_tree.add_hashes(key_lines.leaf_hashes(every, strip=1))
            row_tree.add_hashes(Values(part.column("_leaf")).leaf_hashes(every))
            for item in pc.value_counts(part.column("task")).to_pylist():
                by_task[item["values"]] = by_task.get(item["values"], 0) + int(item["counts"])
            for item in pc.value_counts(part.column("label_source")).to_pylist():
                by_label[item["values"]] = by_label.get(item["values"], 0) + int(item["counts"])
    cur.close()
    writer.close()
    keys_tmp.replace(keys_path)
    by_task = dict(sorted(by_task.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
    commitment = Commitment(key_tree.finish().hex(), key_tree.size)
    rows_c = Commitment(row_tree.finish().hex(), row_tree.size)
    write_golden_commitment(
        layout.golden_commitment(day), day, commitment, rows_c, dict(sorted(by_label.items()))
    )
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
        labels_by_source=dict(sorted(by_label.items())),
    )
