"""The night's logic as plain functions over paths (no Dagster): the assets in ``ratchet_assets.defs`` only wire
them to Dagster (config, resources, metadata, checks), and ``ratchet sim`` and the benchmarks call them directly.
DuckDB (in-memory connections) does the heavy lifting.

One module per step, named after its asset: ``traffic``, ``examples``, ``split`` (``golden_split``),
``training_set``, ``adapter`` (``lora_adapter``; the training process itself is ``train_job``, running
``lora_trainer``), ``certificate`` (``evaluation_certificate``, with ``evaluate``), ``bom_writer`` (``bom``, with
``bom_document``) and ``receipts`` (``daily_receipt``). ``commitments`` reads the data-set roots a step wrote once
for the steps after it.

Every file they read and write under the artifacts root is named by ``ratchet_core.layout.ArtifactLayout``
(traffic, examples, golden, train, adapters, certificates, BOMs, receipts); the lake is read through
``ratchet_core.lake``, and files are published whole with its ``atomic_write_bytes``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from ratchet_stats.canonical import canonical_json, loads_strict


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (a query engine over files; nothing persisted)."""
    con = duckdb.connect(":memory:")
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET enable_progress_bar = false")  # a terminal's bar in logs (Dagster's, the benchmark's)
    return con


def sql_str(value: str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_list(paths: list[Path] | list[str]) -> str:
    """A DuckDB list literal of file paths."""
    return "[" + ", ".join(sql_str(str(p)) for p in paths) + "]"


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A short markdown table (metadata previews in the Dagster UI)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def canonical_text(obj: Any) -> str:
    """``ratchet_stats.canonical.canonical_json(obj)`` as text, fast for values parsed from JSON.

    The night canonicalises millions of JSON-parsed values (only dict/list/str/int/float/bool/None, string
    keys), for which canonical_json's type walk is redundant: the same encoder settings give the same bytes.
    Object keys with characters above U+FFFF sort differently in RFC 8785 (UTF-16 order), so any text with
    such a character is handed to canonical_json itself.
    """
    text = _ENCODE(obj)
    if not text.isascii() and _ASTRAL.search(text):
        return canonical_json(obj).decode("utf-8")
    return text


# Fast canonical check ------------------------------------------------------------------------------------------
# A float token of compact JSON (after ':', ',' or '['; before ',', ']' or '}'): orjson and Python spell some
# floats differently (1e-05 vs 0.00001), so texts with one (or with text that looks like one) take the slow path.
# a number with a fraction or exponent, as a value (after `:`, `,`, `[`) or as the whole document
_FLOAT_TOKEN = re.compile(rb"(?:^|[:,\[])-?[0-9]+(?:\.[0-9]+|(?:\.[0-9]+)?[eE][-+]?[0-9]+)(?:$|[,\]}])")
_ASTRAL_UTF8 = re.compile(rb"[\xf0-\xf4]")
_MAX_NESTING = 256


def canonical_json_text(data: bytes, prechecked: bool = False) -> str | None:
    """``canonical_text(loads_strict(text))`` for JSON text given as UTF-8 bytes, or None when it equals the text.

    Fast path (the ledger's text columns are canonical JSON already): the text is its own canonical form when
    orjson's sorted-key round trip reproduces it byte for byte and it holds no float token (orjson and Python
    spell some floats differently: ``0.00001`` vs ``1e-05``), no character above U+FFFF (RFC 8785 orders such
    keys by UTF-16) and little nesting (Python's parser has a recursion limit). A round trip can only reproduce
    text without duplicate keys, whitespace or big integers, and on str/int/bool/null values orjson writes
    exactly the bytes of Python's encoder (the same escapes, checked for every code point in the tests).
    Everything else takes the definition itself. ``prechecked``: the caller already ruled out float tokens,
    astral characters and deep nesting (``FAST_CHECK_SQL``).
    """
    if prechecked or (
        (data.isascii() or not _ASTRAL_UTF8.search(data))
        and data.count(b"[") + data.count(b"{") <= _MAX_NESTING
        and not _FLOAT_TOKEN.search(data)
    ):
        try:
            if orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS) == data:
                return None
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            pass
    text = canonical_text(loads_strict(data.decode("utf-8")))
    return None if text.encode("utf-8") == data else text


def fast_check_sql(column: str) -> str:
    """SQL: may `column` take the fast path of ``canonical_json_text`` (no float token, astral char, deep nesting)?"""
    return (
        f"NOT (regexp_matches({column}, '{_FLOAT_TOKEN.pattern.decode()}')"
        f" OR regexp_matches({column}, '[\\x{{10000}}-\\x{{10FFFF}}]')"
        f" OR length({column}) - length(replace(replace({column}, '[', ''), '{{', '')) > {_MAX_NESTING})"
    )


def canonical_fixups(con: duckdb.DuckDBPyConnection, texts_sql: str) -> pa.Table:
    """(raw, canonical) for every distinct non-empty text of query `texts_sql` (column ``text``) that is not its
    own canonical form. Ledger texts are canonical already, so the result is usually empty; errors (not JSON,
    NaN) propagate from ``loads_strict`` as before. DuckDB screens the texts; Python round-trips them, a batch of
    screened texts at once (``all_canonical``), one by one only in a batch where that fails.
    """
    raw: list[bytes] = []
    fixed: list[str] = []
    sql = (
        f"SELECT encode(text) AS text, {fast_check_sql('text')} AS fast, json_valid(text) AS single "
        f"FROM (SELECT DISTINCT text FROM ({texts_sql}) WHERE text <> '')"
    )
    for batch in stream_batches(con, sql):
        texts, fast = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        bulk = [f and s for f, s in zip(fast, batch.column(2).to_pylist(), strict=True)]
        if all_canonical([t for t, b in zip(texts, bulk, strict=True) if b]):
            keep = [i for i, b in enumerate(bulk) if not b]
            texts, fast = [texts[i] for i in keep], [fast[i] for i in keep]
        for data, ok in zip(texts, fast, strict=True):
            if (text := canonical_json_text(data, prechecked=ok)) is not None:
                raw.append(data)
                fixed.append(text)
    return pa.table(
        {"raw": pa.array(raw, pa.binary()).cast(pa.string()), "canonical": pa.array(fixed, pa.string())}
    )


def all_canonical(texts: list[bytes]) -> bool:
    """Is every one of these texts its own canonical form? Each is screened (``fast_check_sql``) and one whole
    JSON document (DuckDB's ``json_valid``: ``1,2`` or ``[3`` is not). One orjson round trip of the array
    ``[t1,t2,...]``: compact output is ``[`` + the items' outputs joined by ``,`` + ``]``, each text is exactly
    one item, so the array reproduces itself byte for byte iff every item does (``canonical_json_text``'s fast
    path, item by item)."""
    if not texts:
        return True
    doc = b"[" + b",".join(texts) + b"]"
    try:
        return orjson.dumps(orjson.loads(doc), option=orjson.OPT_SORT_KEYS) == doc
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return False


def stream_batches(con: duckdb.DuckDBPyConnection, sql: str, rows: int = 65_536) -> Any:
    """Record batches of a query, streamed (the whole result is never held in Python)."""
    reader = con.sql(sql).to_arrow_reader(rows)
    yield from reader


class ChunkedParquetWriter:
    """``pq.write_table(table, path, row_group_size=R, **kw)`` fed batch by batch: row groups of exactly R rows.

    Each row group is written from one contiguous (combined) table, so the file does not depend on how the
    input was batched. Written under a temporary name and renamed on ``close()``.
    """

    def __init__(self, path: Path, schema: pa.Schema, row_group_size: int = 256_000, **kw: Any) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.schema = schema
        self.row_group_size = row_group_size
        self.rows = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = path.with_name(f".{path.name}.tmp")
        self._writer = pq.ParquetWriter(self._tmp, schema, **kw)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        table = table.select(self.schema.names).cast(self.schema)
        self._pending.extend(table.to_batches())
        self._pending_rows += table.num_rows
        while self._pending_rows >= self.row_group_size:
            self._flush(self.row_group_size)

    def _flush(self, n: int) -> None:
        table = pa.Table.from_batches(self._pending, self.schema)
        head, tail = table.slice(0, n), table.slice(n)
        self._writer.write_table(head.combine_chunks(), row_group_size=self.row_group_size)
        self.rows += head.num_rows
        self._pending = tail.to_batches()
        self._pending_rows = tail.num_rows

    def close(self) -> None:
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._writer.close()
        self._tmp.replace(self.path)

    def abort(self) -> None:
        """Drop what was written (the file at ``path`` is left as it was)."""
        self._writer.close()
        self._tmp.unlink(missing_ok=True)
