"""Example-key ranges for the steps after ``examples`` (``golden_split``, ``training_set``), in bounded memory.

The examples files are sorted by ``example_key`` (SHA-256 hex) with row-group statistics, and so is the golden
registry, so ``lo <= example_key < hi`` (``budget.key_ranges``) prunes their row groups: a step that writes its
output in key order can produce it one key range at a time and concatenate, the same bytes as one pass over the
day. Each range's DuckDB query runs in a background thread (DuckDB releases the GIL) while the caller writes and
hashes the range before it (``prefetched``), so the two cores are busy without worker processes; what is held is
two ranges' results, each ``1/ranges`` of the day's.

Helpers that keep Python's per-row work small: ``range_sql`` (the WHERE clause of a range), ``Values`` (an Arrow
binary/string column's values as one view of its buffer, written in runs of kept rows (``kept_runs``) with no copy,
and their RFC 9162 leaf hashes with ``hashlib``, ~2x faster than DuckDB's ``sha256``) and ``in_key_order`` (a
range's rows checked, or put, in ascending unique key order).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ratchet_assets.night.budget import Budget, key_ranges

# Rows of the input a range aims for (about one row group of an examples file, 256,000 rows); its result is held
# twice (being written, being computed): ~0.25 GB each for the training set's lines.
RANGE_ROWS = 262_144
T = TypeVar("T")
R = TypeVar("R")
_sha256 = hashlib.sha256


def input_rows(files: list[Path]) -> int:
    """Rows in the Parquet files, from their footers (nothing is scanned)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def plan_ranges(budget: Budget, files: list[Path], main: Path) -> list[tuple[str, str | None]]:
    """The key ranges for a step over `files`: ``budget.shards`` forces ``key_ranges(shards)``; else about
    ``rows / RANGE_ROWS`` ranges whose bounds are the first keys of row groups of `main` (the day's examples file,
    sorted by key), so each of its row groups is read by one range only (a range cut inside a row group would
    make two ranges decode it). Without usable statistics: ``key_ranges(n)``."""
    if budget.shards:
        return key_ranges(budget.shards)
    n = max(1, min(256, -(-input_rows(files) // RANGE_ROWS)))
    if n == 1:
        return key_ranges(1)
    meta = pq.ParquetFile(main).metadata
    col = meta.schema.to_arrow_schema().get_field_index("example_key")
    starts: list[str] = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max or not isinstance(stats.min, str):
            return key_ranges(n)
        starts.append(stats.min)
    if starts != sorted(starts) or len(set(starts)) != len(starts) or len(starts) < n:
        return key_ranges(n)
    cuts = sorted({starts[(i * len(starts)) // n] for i in range(1, n)})
    bounds = ["", *cuts]
    return [(bounds[i], bounds[i + 1] if i + 1 < len(bounds) else None) for i in range(len(bounds))]


def range_sql(column: str, lo: str, hi: str | None) -> str:
    """SQL: `column` in the half-open text range ``[lo, hi)`` (TRUE for the one range of an unsplit run)."""
    conds = [f"{column} >= '{lo}'"] if lo.strip("0") else []
    if hi is not None:
        conds.append(f"{column} < '{hi}'")
    return " AND ".join(conds) or "TRUE"


class Values:
    """A binary/string column (one Arrow array, no nulls) seen as bytes: ``view`` (its values, concatenated; a view of
    the Arrow buffer, no copy) and ``offsets`` (value i is ``view[offsets[i]:offsets[i + 1]]``)."""

    def __init__(self, array: pa.Array) -> None:
        if array.null_count:
            raise ValueError("a column of values has nulls")
        t = array.type
        if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
            array, t = array.cast(pa.large_binary()), pa.large_binary()
        n = len(array)
        fmt = "q" if pa.types.is_large_binary(t) or pa.types.is_large_string(t) else "i"
        offsets = (
            memoryview(array.buffers()[1]).cast(fmt)[array.offset : array.offset + n + 1].tolist()
            if n
            else [0]
        )
        base = offsets[0]
        self.offsets = [o - base for o in offsets] if base else offsets
        self.view = memoryview(array.buffers()[2])[base : base + self.offsets[-1]] if n else memoryview(b"")

    def span(self, a: int, b: int) -> memoryview:
        """Values a..b-1, concatenated."""
        return self.view[self.offsets[a] : self.offsets[b]]

    def leaf_hashes(self, runs: list[tuple[int, int]], strip: int = 0) -> bytes:
        """RFC 9162 leaf hashes ``SHA-256(0x00 || value)`` of the values in `runs` (without their last `strip`
        bytes, e.g. a line's newline), concatenated."""
        zero, view, off = _sha256(b"\x00"), self.view, self.offsets
        out = []
        for a, b in runs:
            for i in range(a, b):
                h = zero.copy()
                h.update(view[off[i] : off[i + 1] - strip])
                out.append(h.digest())
        return b"".join(out)


def kept_runs(keep: pa.BooleanArray) -> list[tuple[int, int]]:
    """The maximal runs ``[a, b)`` of rows where `keep` is true (no nulls)."""
    runs, start = [], 0
    for d in pc.indices_nonzero(pc.invert(keep)).to_pylist():
        if d > start:
            runs.append((start, d))
        start = d + 1
    if start < len(keep):
        runs.append((start, len(keep)))
    return runs


def in_key_order(table: pa.Table, after: str, column: str = "example_key") -> pa.Table:
    """`table` with its rows in ascending `column` order (sorted here when a query gave them in another order),
    checked: every key a 64-hex example key, no repeats, all greater than `after` (the previous range's last)."""
    if table.num_rows == 0:
        return table
    keys = table.column(column)
    if table.num_rows > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
        table = table.take(pc.sort_indices(table, [(column, "ascending")]))
        keys = table.column(column)
        if not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
            raise ValueError(
                f"example keys repeat in a range of {table.num_rows} rows; expected one row per key"
            )
    if keys.null_count or not pc.all(pc.match_substring_regex(keys, r"^[0-9a-f]{64}$")).as_py():
        raise ValueError("not an example key in the rows; expected 64 lowercase hex characters")
    if keys[0].as_py() <= after:
        raise ValueError(f"example keys must ascend across ranges; {keys[0].as_py()!r} follows {after!r}")
    return table


def snapshot(con: Any, path: Path) -> Path:
    """`path` as it is now, for reads spread over many range queries while another process may rename a new
    version over it (the golden registry): a hard link (a copy across file systems) in the connection's spill
    folder (``budget.connect``), which goes with the connection."""
    folder = Path(con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0])
    snap = folder / f"snapshot-{path.name}"
    snap.unlink(missing_ok=True)
    try:
        os.link(path, snap)
    except OSError:
        shutil.copyfile(path, snap)
    return snap


def check_key_order(keys: pa.Array | pa.ChunkedArray, after: str) -> pa.Array | pa.ChunkedArray:
    """`keys` checked (not sorted): 64-hex example keys, ascending, no repeats, all greater than `after`."""
    if len(keys) == 0:
        return keys
    if len(keys) > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
        raise ValueError(f"example keys of a range are not ascending and unique ({len(keys)} rows)")
    if keys.null_count or not pc.all(pc.match_substring_regex(keys, r"^[0-9a-f]{64}$")).as_py():
        raise ValueError("not an example key in the rows; expected 64 lowercase hex characters")
    if keys[0].as_py() <= after:
        raise ValueError(f"example keys must ascend across ranges; {keys[0].as_py()!r} follows {after!r}")
    return keys


def prefetched_chunks(items: list[T], produce: Callable[[T], Iterable[R]], ahead: int = 8) -> Iterator[R]:
    """Every chunk ``produce(item)`` yields, item after item, produced up to `ahead` chunks ahead in a thread."""

    out: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            for item in items:
                for chunk in produce(item):
                    if stop.is_set():
                        return
                    out.put((True, chunk))
            out.put((True, done))
        except BaseException as exc:  # handed to the consumer, raised there
            out.put((False, exc))

    thread = threading.Thread(target=work, name="night-range-chunks", daemon=True)
    thread.start()
    try:
        while True:
            ok, value = out.get()
            if not ok:
                raise value
            if value is done:
                return
            yield value
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue, then let it finish
            with contextlib.suppress(queue.Empty):
                out.get(timeout=0.1)
        thread.join()


def prefetched(items: list[T], fetch: Callable[[T], R], ahead: int = 1) -> Iterator[R]:
    """``fetch(item)`` for each item, in order, computed `ahead` items ahead in a background thread."""
    if len(items) <= 1 or ahead < 1:
        for item in items:
            yield fetch(item)
        return
    yield from prefetched_chunks(items, lambda item: (fetch(item),), ahead)
