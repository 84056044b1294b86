"""The night's logic as plain functions over paths (no Dagster): the assets in ``ratchet_assets.defs`` call
them, and so do ``ratchet sim`` and the benchmarks. DuckDB (in-memory connections) does the heavy lifting.

Layout under the artifacts root (D = YYYY-MM-DD):

- ``traffic/day=D/traffic.parquet`` (+ ``segments.json``): the day's validated, deduplicated ledger rows;
- ``examples/day=D/examples.parquet``: teacher-labelled examples, one per example key;
- ``golden/registry.parquet``: permanent key -> golden/train assignment (only grows);
  ``golden/day=D/golden.parquet`` + ``keys.txt``: golden examples to date;
- ``train/day=D/train.jsonl`` + ``keys.txt`` + ``commitment.json``: the training set;
- ``receipts/D/receipt.dsse.json`` + ``rows.parquet``: the signed daily receipt and its leaves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb

from ratchet_stats.canonical import canonical_json


def day_dir(root: str | Path, kind: str, day: str) -> Path:
    """``<root>/<kind>/day=<day>``."""
    return Path(root) / kind / f"day={day}"


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (a query engine over files; nothing persisted)."""
    con = duckdb.connect(":memory:")
    con.execute("SET preserve_insertion_order = true")
    return con


def sql_str(value: str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_list(paths: list[Path] | list[str]) -> str:
    """A DuckDB list literal of file paths."""
    return "[" + ", ".join(sql_str(str(p)) for p in paths) + "]"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary name then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


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


def loads_strict(text: str) -> Any:
    """json.loads that refuses NaN/Infinity (not JSON; canonical JSON cannot carry them)."""
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
