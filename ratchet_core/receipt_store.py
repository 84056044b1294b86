"""A day's receipt files, read for one row: inclusion proofs in milliseconds at any day size.

The ``daily_receipt`` step (``ratchet_assets.night.receipts``) writes under ``<artifacts>/receipts/<day>/``:

- ``receipt.dsse.json``: the signed receipt;
- ``rows.parquet``: the leaves in tree order (= sorted by ``request_id``), columns ``index``, ``request_id``,
  ``client``, ``leaf``, in row groups of ``ROW_GROUP_ROWS`` rows with ``request_id`` statistics;
- ``tree.bin``: the day's RFC 9162 tree as ``ratchet_stats.merkle_store`` stores it (base ``TREE_BASE``).

A proof (``receipt_proof``) finds the row's row group by the groups' smallest ``request_id`` (binary search over
the footer's statistics, cached per file), reads that one group, and takes the audit path from ``tree.bin``: the
nodes below the stored base come from the row's ``2**TREE_BASE``-leaf block, which lies inside the same row group
(``ROW_GROUP_ROWS`` is a multiple of it). That is one row-group read (~1 ms for 4096 rows) plus ``O(log n)``
32-byte reads, at any number of rows. The document is byte for byte ``ratchet_stats.receipt.make_proof``'s. A
day written before ``tree.bin`` existed is proven the old way (every leaf read, the tree rebuilt).

The gateway (``GET /ratchet/receipts/{day}/proof/{request_id}``) and the night's ``receipt_proof`` both call it.
"""

from __future__ import annotations

import bisect
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_core.layout import RECEIPT_ENVELOPE_FILE, RECEIPT_ROWS_FILE, RECEIPT_TREE_FILE
from ratchet_stats.merkle_store import StoredTree
from ratchet_stats.receipt import envelope_digest, make_proof, make_stored_proof

# The folder's file names are the artifact layout's (ratchet_core.layout).
ENVELOPE_FILE, ROWS_FILE, TREE_FILE = RECEIPT_ENVELOPE_FILE, RECEIPT_ROWS_FILE, RECEIPT_TREE_FILE
TREE_BASE = 6
ROW_GROUP_ROWS = 4096  # a multiple of 2**TREE_BASE: a proof's leaf block never straddles two row groups
assert ROW_GROUP_ROWS % (1 << TREE_BASE) == 0


@dataclass(frozen=True)
class _RowsIndex:
    """What a lookup needs from the rows file's footer: each row group's first row and smallest request_id."""

    metadata: pq.FileMetaData
    starts: list[int]
    first_ids: list[str] | None  # None: no statistics (an older file); the request_id column is scanned


_CACHE: dict[tuple[str, str], tuple[tuple[int, int], Any]] = {}
_LOCK = threading.Lock()


def _cached(kind: str, path: Path, load: Any) -> Any:
    """`load(path)`, remembered per (file, size, mtime): a receipt's files are rewritten only by a rerun."""
    st = path.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    key = (kind, str(path))
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    value = load(path)
    with _LOCK:
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = (stamp, value)
    return value


def _load_rows_index(path: Path) -> _RowsIndex:
    md = pq.ParquetFile(path).metadata
    col = md.schema.names.index("request_id")
    starts, first_ids, total = [], [], 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        starts.append(total)
        total += rg.num_rows
        stats = rg.column(col).statistics
        if first_ids is not None and stats is not None and stats.has_min_max:
            first_ids.append(stats.min)
        else:
            first_ids = None
    return _RowsIndex(md, starts, first_ids)


def _envelope_digest(path: Path) -> str:
    return envelope_digest(json.loads(path.read_bytes()))


def find_row(folder: str | Path, request_id: str) -> tuple[int, str, bytes, pa.Table, int] | None:
    """(index, client, leaf, its row group's table, the group's first index) of `request_id`, or None."""
    rows_path = Path(folder) / ROWS_FILE
    index = _cached("rows", rows_path, _load_rows_index)
    pf = pq.ParquetFile(rows_path, metadata=index.metadata)
    columns = ["request_id", "client", "leaf"]
    if index.first_ids is None:  # no statistics: scan the ids (slow, correct)
        ids = pf.read(columns=["request_id"])["request_id"].to_pylist()
        i = bisect.bisect_left(ids, request_id)
        if i == len(ids) or ids[i] != request_id:
            return None
        groups = [bisect.bisect_right(index.starts, i) - 1]
    else:
        # The first group that may hold the id, and the next one (an id equal to a group's smallest may also
        # end the group before).
        g = max(bisect.bisect_left(index.first_ids, request_id) - 1, 0)
        groups = [g, g + 1] if g + 1 < len(index.starts) else [g]
    for g in groups:
        table = pf.read_row_group(g, columns=columns)
        ids = table["request_id"].to_pylist()
        i = bisect.bisect_left(ids, request_id)
        if i < len(ids) and ids[i] == request_id:
            client = table["client"][i].as_py()
            leaf = table["leaf"][i].as_py().encode("utf-8")
            return index.starts[g] + i, client, leaf, table, index.starts[g]
    return None


def receipt_proof(
    folder: str | Path, day: str, request_id: str, client: str | None = None
) -> dict[str, Any] | None:
    """The inclusion proof document of `request_id` in the day's receipt (``ratchet_stats.receipt.make_proof``'s
    bytes), or None when the day has no such request or (with `client`) it is another client's."""
    folder = Path(folder)
    found = find_row(folder, request_id)
    if found is None:
        return None
    index, owner, leaf, table, start = found
    if client is not None and owner != client:
        return None
    digest = _cached("envelope", folder / ENVELOPE_FILE, _envelope_digest)
    tree_path = folder / TREE_FILE
    if not tree_path.exists():  # a day signed before stored trees: rebuild from every leaf
        leaves = [
            s.encode("utf-8") for s in pq.read_table(folder / ROWS_FILE, columns=["leaf"])["leaf"].to_pylist()
        ]
        return make_proof(day, request_id, index, leaves, json.loads((folder / ENVELOPE_FILE).read_bytes()))
    with StoredTree(tree_path) as tree:
        lo, hi = tree.block_range(index)
        if start <= lo and hi <= start + table.num_rows:
            block = table["leaf"].slice(lo - start, hi - lo).to_pylist()
        else:  # row groups not aligned to the tree's blocks (a file written by other settings)
            block = _read_leaves(folder / ROWS_FILE, lo, hi)
        return make_stored_proof(
            day, request_id, index, leaf, tree, [s.encode("utf-8") for s in block], digest
        )


def _read_leaves(rows_path: Path, lo: int, hi: int) -> list[str]:
    index = _cached("rows", rows_path, _load_rows_index)
    pf = pq.ParquetFile(rows_path, metadata=index.metadata)
    first = bisect.bisect_right(index.starts, lo) - 1
    last = bisect.bisect_right(index.starts, hi - 1) - 1
    table = pf.read_row_groups(list(range(first, last + 1)), columns=["leaf"])
    return table["leaf"].slice(lo - index.starts[first], hi - lo).to_pylist()
