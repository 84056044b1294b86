"""Ledger rows as Arrow tables of ``LEDGER_SCHEMA`` (``ratchet_core.schema``): what the loader inserts into
DuckDB and what erasure scopes are matched against."""

from __future__ import annotations

from typing import Any

from ratchet_core.schema import LEDGER_SCHEMA


def rows_to_arrow(rows: list[dict[str, Any]], chunk: int = 64, encoded: list[bytes] | None = None):
    """The rows as one Arrow table (a missing key is a null).

    With `encoded` (each row's journal JSON, as the writer encoded it) Arrow's JSON reader builds the table: C++
    that releases the GIL, ~6x less of the loader's GIL time than converting the dicts, which the event loop
    would otherwise wait for. Otherwise (or if the reader refuses the batch) the dicts are converted `chunk` rows
    at a time, so the loader lets the event loop in between chunks."""
    import pyarrow as pa

    if encoded is not None:
        table = _json_to_arrow(encoded)
        if table is not None:
            return table

    if len(rows) <= chunk:
        return pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)
    parts = [
        pa.Table.from_pylist(rows[i : i + chunk], schema=LEDGER_SCHEMA) for i in range(0, len(rows), chunk)
    ]
    return pa.concat_tables(parts)


_JSON_OPTIONS: list = []


def _json_to_arrow(encoded: list[bytes]):
    """The journal JSON of rows as a table of LEDGER_SCHEMA, or None when Arrow's JSON reader cannot read it."""
    import pyarrow as pa
    import pyarrow.json as pj

    if not _JSON_OPTIONS:  # timestamps are integers (microseconds) in the journal: read int64, then cast
        fields = [pa.field(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f for f in LEDGER_SCHEMA]
        _JSON_OPTIONS.append(
            pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
        )
        _JSON_OPTIONS.append(pj.ReadOptions(use_threads=False, block_size=1 << 24))
    try:
        table = pj.read_json(
            pa.BufferReader(b"\n".join(encoded)),
            read_options=_JSON_OPTIONS[1],
            parse_options=_JSON_OPTIONS[0],
        )
        table = table.select(LEDGER_SCHEMA.names).cast(LEDGER_SCHEMA)
    except (pa.ArrowException, ValueError, TypeError):
        return None
    return table if table.num_rows == len(encoded) else None


def pa_int64(values: list[int]):
    import pyarrow as pa

    return pa.array(values, type=pa.int64())
