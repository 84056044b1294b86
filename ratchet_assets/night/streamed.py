"""Data-set commitments computed while the data set streams past, in bounded memory.

A training or golden set of millions of rows must not be held in Python to hash it: :class:`KeyTree` and
:class:`RowTree` feed ``ratchet_stats.merkle_store.TreeBuilder`` batch by batch (``O(log n)`` memory) and give
exactly the ``ratchet_stats.commitment.Commitment`` that ``key_commitment`` / a ``MerkleTree`` over the same
leaves gives. ``KeyTree`` needs the keys in ascending order with no repeats (as the steps write them:
``ORDER BY example_key`` after deduplication) and refuses anything else, so it never commits to a list that
``key_commitment`` would have sorted differently.

``golden_row_leaf_sql`` assembles a golden row's row-tree leaf (``night.evaluate.GoldenRow.leaf()``: canonical JSON
of key, task, request and answer) in DuckDB from the canonical JSON texts the examples step stored, so the golden
set's row root needs no JSON parsing in Python; ``stream_golden_commitment`` writes ``golden/day=D/commitment.json``
(read by ``night.commitments.golden_commitment``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from json.encoder import encode_basestring
from pathlib import Path

import pyarrow as pa

from ratchet_stats.commitment import Commitment, check_key
from ratchet_stats.merkle_store import TreeBuilder, leaf_hashes

_HEX_KEY = re.compile(r"^[0-9a-f]{64}$")


class KeyTree:
    """The key tree (ascending unique example keys, leaf = ASCII bytes) built batch by batch."""

    def __init__(self) -> None:
        self._tree = TreeBuilder()
        self._last = ""

    def add(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            if key <= self._last:
                raise ValueError(
                    f"example keys must arrive sorted and unique for the key tree; {key!r} follows {self._last!r}"
                )
            check_key(key)
            self._last = key
        self._tree.add_hashes(leaf_hashes([k.encode("ascii") for k in keys]))

    def finish(self) -> Commitment:
        return Commitment(self._tree.finish().hex(), self._tree.size)


class RowTree:
    """The row tree (leaves in order, as given) built batch by batch."""

    def __init__(self) -> None:
        self._tree = TreeBuilder()

    def add(self, leaves: Iterable[bytes]) -> None:
        self._tree.add_hashes(leaf_hashes(leaves))

    def finish(self) -> Commitment:
        return Commitment(self._tree.finish().hex(), self._tree.size)


def json_string_sql(column: str, values: list[str]) -> str:
    """SQL: `column` as a JSON string (canonical JSON's escaping), for a column with few distinct `values`
    (task names): a CASE over the Python-encoded texts."""
    if not values:
        return "NULL"
    cases = " ".join(
        f"WHEN {column} = '{v.replace(chr(39), chr(39) * 2)}' "
        f"THEN '{encode_basestring(v).replace(chr(39), chr(39) * 2)}'"
        for v in values
    )
    return f"CASE {cases} END"


def golden_row_leaf_sql(tasks: list[str], labelled: bool = True) -> str:
    """SQL over a golden/examples table: ``GoldenRow.leaf()`` text — keys in canonical order (answer <
    example_key < label_source < messages < response_format < task < teacher_answer < tools), parts from the
    stored canonical JSON texts. ``label_source`` and ``teacher_answer`` are in the leaf of a row people labelled
    only (``labelled``: the table has those columns; a golden set written before them has none)."""
    people = "label_source = 'people'"
    source = f"CASE WHEN {people} THEN ',\"label_source\":\"people\"' ELSE '' END || " if labelled else ""
    teacher = (
        f"CASE WHEN {people} THEN ',\"teacher_answer\":' || coalesce(teacher_answer, 'null') ELSE '' END || "
        if labelled
        else ""
    )
    return (
        "'{\"answer\":' || answer || ',\"example_key\":\"' || example_key || '\"' || "
        f"{source}',\"messages\":' || messages || "
        "',\"response_format\":' || coalesce(nullif(response_format, ''), 'null') || ',\"task\":' || "
        f"{json_string_sql('task', tasks)} || {teacher}',\"tools\":' || coalesce(nullif(tools, ''), 'null') || '}}'"
    )


def stream_golden_commitment(con, golden_file: Path, out: Path, day: str) -> tuple[Commitment, Commitment]:
    """Key and row commitments of the golden set in `golden_file` (sorted by key), streamed through `con`;
    writes them to `out` (the file ``night.commitments.golden_commitment`` reads) and returns (keys, rows)."""
    import pyarrow.parquet as pq

    from ratchet_assets.night import sql_str, stream_batches

    src = f"read_parquet({sql_str(str(golden_file))})"
    tasks = [r[0] for r in con.execute(f"SELECT DISTINCT task FROM {src} ORDER BY 1").fetchall()]
    labelled = "label_source" in pq.read_schema(golden_file).names
    keys, rows = KeyTree(), RowTree()
    sql = f"SELECT example_key, encode({golden_row_leaf_sql(tasks, labelled)}) AS leaf FROM {src}"
    for batch in stream_batches(con, sql):
        keys.add(batch.column(0).to_pylist())
        leaves = batch.column(1)
        if leaves.null_count:  # a NULL part: the row is not what the examples step writes
            raise ValueError(f"{golden_file}: a golden row has an empty column; rebuild it with golden_split")
        rows.add(pa.array(leaves).to_pylist())
    kc, rc = keys.finish(), rows.finish()
    by_label: dict[str, int] = {}
    if labelled:
        counts = con.execute(f"SELECT label_source, count(*) FROM {src} GROUP BY 1 ORDER BY 1").fetchall()
        by_label = {str(k): int(n) for k, n in counts}
    write_golden_commitment(out, day, kc, rc, by_label)
    return kc, rc


def write_golden_commitment(
    out: Path, day: str, keys: Commitment, rows: Commitment, labels: dict[str, int] | None = None
) -> None:
    """Write ``golden/day=D/commitment.json`` (read by ``night.commitments.golden_commitment``); `labels`: golden
    rows per label source (teacher | people | import), when the rows record it."""
    from ratchet_core.lake import atomic_write_bytes

    document: dict = {
        "day": day,
        "keys": {**keys.to_dict(), "leaf": "example key ASCII, sorted ascending"},
        "rows": {**rows.to_dict(), "leaf": "GoldenRow.leaf(): canonical_json of the row, key order"},
        "tree": "RFC 9162 SHA-256",
    }
    if labels:
        document["labels"] = labels
    atomic_write_bytes(out, json.dumps(document, indent=2, sort_keys=True).encode())
