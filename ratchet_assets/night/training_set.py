"""The ``training_set`` step: non-golden examples of the last ``window_days`` days as chat fine-tuning rows.

Row (one per example key, earliest occurrence wins, sorted by key)::

    {"messages": [...request messages, {"role": "assistant", ...}], "response_format": ..., "tools": ...}

Each line of ``train/day=D/train.jsonl`` is ``canonical_json(row)`` — assembled in DuckDB from the canonical
JSON parts stored by ``examples`` (keys in sorted order: messages < response_format < tools), so the line bytes
ARE the Merkle leaves. Commitments (``commitment.json``, RFC 9162 SHA-256): the row tree over the lines in file
order and the key tree over the sorted keys (``keys.txt``), which makes non-membership provable.
Keys assigned golden in the registry are excluded, and the result is checked against the full registry.

People's labels (``night.labels``): a key with a recorded demonstration takes it as its answer; a key whose
teacher answer feedback called bad is left out. Every row's label source (``teacher`` | ``people`` | ``import``) is
a line ``<key> <source>`` of ``labels.txt`` in file order, committed by a third tree (``labels`` in
``commitment.json``, with the counts per source and, when feedback was read, the digest of what it gave).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ratchet_assets.night import connect, sql_list, sql_str
from ratchet_assets.night.budget import Budget, resolve
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.labels import Labels, import_label_sources
from ratchet_assets.night.ranges import (
    Values,
    check_key_order,
    kept_runs,
    plan_ranges,
    prefetched_chunks,
    range_sql,
    snapshot,
)
from ratchet_core.lake import atomic_write_bytes
from ratchet_core.layout import ArtifactLayout
from ratchet_stats.commitment import Commitment
from ratchet_stats.merkle_store import TreeBuilder


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
    labels_root: str = ""
    by_label: dict[str, int] = field(default_factory=dict)  # rows per label source
    bad_left_out: int = 0  # rows feedback called bad, left out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window(day: str, window_days: int) -> list[str]:
    d = date.fromisoformat(day)
    return [(d - timedelta(days=i)).isoformat() for i in range(window_days - 1, -1, -1)]


LABEL_LEAF = "example key, a space and its label source (teacher | people | import), file order"
BATCH_ROWS = 16_384  # small batches: their buffers are reused, not faulted in afresh (1/3 of the system time)

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
    labels: Labels | None = None,
) -> TrainingResult:
    """Write ``train/day=D/{train.jsonl, keys.txt, labels.txt, commitment.json}``; return counts, roots and the
    overlap. ``labels``: people's labels (``night.labels.load_labels``; module docstring).

    In bounded memory (`budget`, ``ratchet_assets.night.budget``), one example-key range at a time
    (``night.ranges``; the next range's query runs while this one is written): a range's rows are the window's
    rows in it (row-group pruned), deduplicated over only them (a key's rows all fall in its range) and in key
    order, so the ranges concatenate into the file one pass over the window writes. DuckDB assembles each line;
    golden and erased keys are left out in Arrow (``is_in`` against the registry's keys of the range), and the
    kept lines and keys are written as runs of the Arrow buffers and hashed into the trees from there
    (``ratchet_stats.merkle_store.TreeBuilder``)."""
    if window_days < 1:
        raise ValueError(f"window_days must be >= 1, got {window_days}")
    erasures = erasures or Erasures()
    days = window(day, window_days)
    layout = ArtifactLayout(artifacts_root)
    files = [p for d in days if (p := layout.examples_file(d)).exists()]
    if layout.examples_file(day) not in files:
        raise TrainingSetError(f"no examples for {day}: materialise `examples` for {day} first")
    # imported training rows of the window (``ratchet import``); imported golden rows are left out by the registry
    files += [p for p in layout.import_files(until=day) if p.parent.name[:10] >= days[0]]
    reg = layout.golden_registry()
    if not reg.exists():
        raise TrainingSetError(f"no golden registry at {reg}: materialise `golden_split` for {day} first")
    b = resolve(budget)
    con = budget_connect(b, artifacts_root, f"training_set-{day}")
    # plain (not TEMP) tables: the range queries run on a cursor, another connection to this database
    con.register("_ek", pa.table({"k": pa.array(sorted(erasures.example_keys), pa.string())}))
    con.register("_ei", pa.table({"r": pa.array(sorted(erasures.request_ids), pa.string())}))
    con.execute("CREATE TABLE erased_keys AS SELECT * FROM _ek; CREATE TABLE erased_ids AS SELECT * FROM _ei")
    src = f"read_parquet({sql_list(files)})"
    reg_src = f"read_parquet({sql_str(str(snapshot(con, reg)))})"  # one version for every range
    erasing = bool(erasures.example_keys or erasures.request_ids)
    labels = labels or Labels()
    relabel = bool(labels.demonstrations)
    bad = pa.array(sorted(labels.bad), pa.string())
    con.register("_people", labels.table())
    con.register("_bad", pa.table({"k": bad}))
    imports = import_label_sources(artifacts_root, [p for p in files if p.parent.parent.name == "imports"])
    con.register(
        "_imports",
        pa.table(
            {
                "import_id": pa.array(sorted(imports), pa.string()),
                "label": [imports[i] for i in sorted(imports)],
            }
        ),
    )
    con.execute(
        "CREATE TABLE people AS SELECT * FROM _people; CREATE TABLE bad_keys AS SELECT * FROM _bad; "
        "CREATE TABLE import_labels AS SELECT * FROM _imports"
    )
    erased = 0
    if erasing:
        erased = con.execute(
            f"""SELECT count(*) FROM {src} e WHERE e.example_key IN (SELECT k FROM erased_keys)
               OR e.request_id IN (SELECT r FROM erased_ids)"""
        ).fetchall()[0][0]
    # A key's earliest row (day, ts, request_id) among its rows not erased. One examples file and no imports: a
    # key has one row (``examples`` writes one per key), so the range is a plain scan in file order (key order),
    # erasures applied in Python; ``in_key_order`` refuses a repeated key rather than write it twice.
    dedup = len(files) > 1
    bad_left_out = 0
    if len(bad) and dedup:
        bad_left_out = con.execute(
            f"SELECT count(DISTINCT example_key) FROM {src} WHERE example_key IN (SELECT k FROM bad_keys) "
            f"AND example_key NOT IN (SELECT example_key FROM {reg_src} WHERE golden)"
        ).fetchall()[0][0]
    if dedup:
        not_erased = (
            "e.example_key NOT IN (SELECT k FROM erased_keys) AND e.request_id NOT IN (SELECT r FROM erased_ids)"
            if erasing
            else "TRUE"
        )
        if len(bad):
            not_erased += " AND e.example_key NOT IN (SELECT k FROM bad_keys)"
        tail = (
            f"AND {not_erased} QUALIFY row_number() OVER (PARTITION BY e.example_key ORDER BY e.day, e.ts, "
            "e.request_id) = 1"
        )
    else:
        tail = ""
    # The answer is people's where a demonstration gives one; each row's label source beside its line.
    labelled = dedup or relabel
    label_sql = (
        "CASE WHEN p.people_answer IS NOT NULL THEN 'people' WHEN w.source = 'import' "
        "THEN coalesce(i.label, 'import') ELSE 'teacher' END"
    )
    ek = pa.array(sorted(erasures.example_keys), pa.string())
    ei = pa.array(sorted(erasures.request_ids), pa.string())
    rid_col = "e.request_id," if erasing and not dedup else ""  # read only where Python erases by it
    cur = con.cursor()

    def produce(bounds: tuple[str, str | None]) -> Iterator[tuple[pa.Table, pa.Table | None]]:
        """A range: first (its registry rows, its narrow rows: key and request id), then (None, wide batch)s of
        the same rows in the same order (the plain scan twice, or the deduplicated range cut in batches)."""
        in_range = range_sql("example_key", *bounds)
        in_range_e = in_range.replace("example_key", "e.example_key")
        reg_part = cur.sql(f"SELECT example_key, golden FROM {reg_src} WHERE {in_range}").to_arrow_table()
        if labelled:  # joined with people's labels and the imports' label sources, in key order
            wide = f"""WITH w AS (SELECT e.* FROM {src} e WHERE {in_range_e} {tail}),
                       x AS (SELECT w.* REPLACE (coalesce(p.people_answer, w.answer) AS answer), {label_sql} AS label
                             FROM w LEFT JOIN people p ON p.example_key = w.example_key
                             LEFT JOIN import_labels i ON w.source = 'import'
                               AND i.import_id = split_part(w.request_id, ':', 2))
                       SELECT example_key, task, {rid_col.replace("e.", "")} {ROW_SQL} || chr(10) AS line, label
                       FROM x ORDER BY example_key"""
        else:  # one examples file: every label is the teacher's, rows in file (key) order
            wide = f"""SELECT e.example_key, e.task, {rid_col} {ROW_SQL} || chr(10) AS line, 'teacher' AS label
                       FROM {src} e WHERE {in_range_e}"""
        if dedup:
            part = cur.sql(wide).to_arrow_table()
            yield reg_part, part.select(["example_key"])
            for batch in part.to_batches(max_chunksize=BATCH_ROWS):
                yield None, batch
            return
        order = " ORDER BY e.example_key" if relabel else ""  # the wide query's order (joined: key order)
        yield (
            reg_part,
            cur.sql(
                f"SELECT e.example_key, {rid_col} FROM {src} e WHERE {in_range_e}{order}"
            ).to_arrow_table(),
        )
        yield from ((None, batch) for batch in cur.sql(wide).to_arrow_reader(BATCH_ROWS))

    out = layout.train_jsonl(day)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    keys_path = layout.train_keys(day)
    keys_tmp = keys_path.with_name(f".{keys_path.name}.tmp")
    labels_path = layout.train_labels(day)
    labels_tmp = labels_path.with_name(f".{labels_path.name}.tmp")
    key_tree, row_tree, label_tree = TreeBuilder(), TreeBuilder(), TreeBuilder()
    by_task: dict[str, int] = {}
    by_label: dict[str, int] = {}
    last, unassigned, overlap = "", 0, 0
    ranges = plan_ranges(b, files, layout.examples_file(day))
    keep_all, golden, at = pa.array([], pa.bool_()), pa.array([], pa.string()), 0
    with (
        open(tmp, "wb", buffering=1 << 20) as fh,
        open(keys_tmp, "wb", buffering=1 << 20) as keys_file,
        open(labels_tmp, "wb", buffering=1 << 20) as labels_file,
    ):
        for reg_part, rows in prefetched_chunks(ranges, produce):
            if reg_part is not None:  # a range starts: which of its rows are kept, decided on its narrow rows
                keys = check_key_order(rows.column("example_key"), last)
                last = keys[-1].as_py() if len(keys) else last
                unassigned += len(keys) - (
                    pc.sum(pc.is_in(keys, value_set=reg_part.column("example_key"))).as_py() or 0
                )
                golden = reg_part.filter(reg_part.column("golden")).column("example_key")
                keep_all = pc.invert(pc.is_in(keys, value_set=golden))
                if len(bad) and not dedup:  # keys feedback called bad (night.labels)
                    left_out = pc.is_in(keys, value_set=bad)
                    bad_left_out += pc.sum(pc.and_(keep_all, left_out)).as_py() or 0
                    keep_all = pc.and_(keep_all, pc.invert(left_out))
                # erased here as SQL's NOT IN would: a NULL request id is not kept once ids are erased
                if erasing and not dedup:
                    rid = rows.column("request_id")
                    gone = pc.is_in(rid, value_set=ei)
                    gone = pc.or_(gone, pc.is_null(rid)) if len(ei) else gone
                    keep_all = pc.and_(
                        pc.and_(keep_all, pc.invert(pc.is_in(keys, value_set=ek))), pc.invert(gone)
                    )
                keep_keys, at = keys, 0
                continue
            if unassigned or not rows.num_rows:
                continue  # counted over every range, then refused below
            keys = rows.column("example_key")
            if not pa.chunked_array([keys]).equals(keep_keys.slice(at, len(keys))):
                raise RuntimeError("the range's rows came in another order on the second read")
            keep = keep_all.slice(at, len(keys)).combine_chunks()
            at += len(keys)
            runs = kept_runs(keep)
            overlap += pc.sum(pc.is_in(pc.filter(keys, keep), value_set=golden)).as_py() or 0
            lines = Values(rows.column("line"))
            key_lines = Values(pc.binary_join_element_wise(keys, "", "\n"))
            sources = rows.column("label")
            label_lines = Values(
                pc.binary_join_element_wise(pc.binary_join_element_wise(keys, sources, " "), "", "\n")
            )
            for i, j in runs:
                fh.write(lines.span(i, j))
                keys_file.write(key_lines.span(i, j))
                labels_file.write(label_lines.span(i, j))
            key_tree.add_hashes(key_lines.leaf_hashes(runs, strip=1))
            row_tree.add_hashes(lines.leaf_hashes(runs, strip=1))
            label_tree.add_hashes(label_lines.leaf_hashes(runs, strip=1))
            for counts, column in ((by_task, rows.column("task")), (by_label, sources)):
                for item in pc.value_counts(pc.filter(column, keep)).to_pylist():
                    counts[item["values"]] = counts.get(item["values"], 0) + int(item["counts"])
    cur.close()
    if unassigned:
        tmp.unlink(missing_ok=True)
        keys_tmp.unlink(missing_ok=True)
        labels_tmp.unlink(missing_ok=True)
        con.close()
        raise TrainingSetError(
            f"{unassigned} example keys in the window have no golden/train assignment: materialise "
            f"`golden_split` for every day of {days[0]}..{day} first"
        )
    tmp.replace(out)
    keys_tmp.replace(keys_path)
    labels_tmp.replace(labels_path)
    con.close()
    by_task = dict(sorted(by_task.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))
    rows_c = Commitment(row_tree.finish().hex(), row_tree.size)
    keys_c = Commitment(key_tree.finish().hex(), key_tree.size)
    labels_c = Commitment(label_tree.finish().hex(), label_tree.size)
    by_label = dict(sorted(by_label.items()))
    rows_root = rows_c.root
    commitment = {
        "day": day,
        "window_days": window_days,
        "days": days,
        "rows": {"root": rows_root, "size": rows_c.size, "leaf": "canonical_json(row), file order"},
        "keys": {"root": keys_c.root, "size": keys_c.size, "leaf": "example key ASCII, sorted ascending"},
        "labels": {**labels_c.to_dict(), "leaf": LABEL_LEAF, "counts": by_label},
        "tree": "RFC 9162 SHA-256",
    }
    if labels.items:  # what the application's feedback gave this set (night.labels)
        commitment["feedback"] = {
            "items": labels.items,
            "demonstrations_used": by_label.get("people", 0),
            "bad_left_out": int(bad_left_out),
            "sha256": labels.digest,
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
        labels_root=labels_c.root,
        by_label=by_label,
        bad_left_out=int(bad_left_out),
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
