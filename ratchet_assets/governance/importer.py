"""``ratchet import``: labelled chat examples for a task, as golden-only rows or as training rows, with provenance.

Input: JSONL (one object a line, UTF-8) or Parquet with ``messages`` (a list of chat messages, or its JSON text)
and the correct answer as ``answer`` (text, or an assistant message ``{"content", "tool_calls"}``; ``expected`` is
read as ``answer``), optionally ``tools`` and ``response_format``. JSONL is parsed line by line (strict JSON),
Parquet read with Polars.

Bad input is refused before anything is written, with one :class:`ImportRowError` line naming the file and the
line (JSONL) or row (Parquet): an empty file, bytes that are not UTF-8, a line that is not a JSON object, a file
that is not Parquet, a row without messages or answer. The task and the day follow the one name rule
(``ratchet_core.names``: ``--task '../../evil'`` and ``--day 2026-13-45`` are refused).

Each row becomes an example (its key from ``ratchet_core.example_key``'s document, exactly as a request's) in
``imports/<id>/examples.parquet`` (the examples file's columns, ``source`` = ``import``), where ``<id>`` is
``<day>-<task>-<role>-<digest>`` (the day the rows join the night, the task, ``golden`` or ``train``, then the
first 12 hex of the file's content digest: the same file imported for two tasks, or as both kinds, keeps both),
with ``provenance.json`` (source, licence, role, task, label source, counts, sha256 of the input). The label
source says who labelled the rows (``--label-source``: ``people``, ``teacher`` or ``import``, the default): the
night records it for every row it uses (``ratchet_assets.night.labels``), and golden rows people labelled count
with people's labels in the certificate (v2). The keys enter the golden
registry under the registry's lock with reason ``import``:

- ``golden``: golden for good — the night's golden set (``golden_split``) carries them from ``day`` on, so they
  certify a task before it has traffic (or strengthen its certificate), and the training set never takes them:
  the registry is what the disjointness proof checks, so imported golden rows are covered by it;
- ``train``: training rows for the night's training set from ``day`` on (within its window).

A key the registry already holds keeps its assignment: an imported golden row whose key was assigned to training
(it may have been trained on) is refused, and so is a training row whose key is golden; both are counted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_core.lake import atomic_write_bytes
from ratchet_core.layout import ArtifactLayout
from ratchet_core.names import NameRuleError, check
from ratchet_stats.canonical import loads_strict

ROLES = ("golden", "train")
LABEL_SOURCES = ("import", "people", "teacher")


class ImportRowError(ValueError):
    """An input that cannot be imported; the message names the row or the field."""


@dataclass
class ImportResult:
    import_id: str
    task: str
    role: str
    day: str
    rows: int  # rows read
    imported: int  # new examples written
    duplicates: int  # same example key twice in the input
    refused: int  # keys the registry holds with the other assignment
    path: str
    provenance: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COLUMNS = ("messages", "answer", "tools", "response_format")


def _row(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The columns of one input row (``expected`` read as ``answer``); ImportRowError naming `where`."""
    if "answer" not in row and "expected" in row:
        row = {**row, "answer": row["expected"]}
    missing = sorted({"messages", "answer"} - set(row))
    if missing:
        raise ImportRowError(f"{where}: missing {' and '.join(missing)} (each row needs messages and answer)")
    return {name: row.get(name) for name in COLUMNS}


def _read_jsonl(path: Path, data: bytes) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for n, line in enumerate(data.splitlines(), 1):
        where = f"{path.name} line {n}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ImportRowError(
                f"{where}: not UTF-8 (byte {exc.start + 1}); save the file as UTF-8"
            ) from None
        if not text.strip():
            continue
        try:
            row = loads_strict(text)
        except (ValueError, RecursionError) as exc:
            raise ImportRowError(
                f"{where}: not JSON ({str(exc)[:120]}); write one JSON object a line"
            ) from None
        if not isinstance(row, dict):
            raise ImportRowError(
                f"{where}: not a JSON object; write one object with messages and answer a line"
            )
        rows.append((where, _row(row, where)))
    return rows


def _read_parquet(path: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # Polars and Arrow raise many kinds for a file that is not Parquet
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ImportRowError(f"{path.name}: not a readable Parquet file ({first})") from None
    if "answer" not in frame.columns and "expected" in frame.columns:
        frame = frame.rename({"expected": "answer"})
    missing = sorted({"messages", "answer"} - set(frame.columns))
    if missing:
        raise ImportRowError(f"{path.name}: missing columns {missing} (need messages and answer)")
    wheres = (f"{path.name} row {n}" for n in range(1, frame.height + 1))
    return [(where, _row(row, where)) for where, row in zip(wheres, frame.to_dicts(), strict=True)]


def _read(path: Path, data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each input row (``where`` names the file and its line or row)."""
    if not data.strip():
        raise ImportRowError(f"{path.name}: the file is empty; give a JSONL or Parquet file of labelled rows")
    rows = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path, data)
    if not rows:
        raise ImportRowError(f"{path.name}: no rows; give a JSONL or Parquet file of labelled rows")
    return rows


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _clean(value: Any) -> Any:
    """Polars fills absent struct fields with None: drop them (a message has no ``tool_calls: null``)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _example(task: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        return _shaped(task, row, where)
    except ImportRowError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a shape the checks did not foresee
        raise ImportRowError(
            f"{where}: cannot be read as a chat example ({type(exc).__name__}: {exc})"
        ) from None


def _shaped(task: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    from ratchet_assets.night import canonical_text
    from ratchet_assets.night.examples import key_parts

    messages = _clean(_json(row["messages"]))
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise ImportRowError(
            f"{where}: messages must be a non-empty list of chat messages (each with a role)"
        )
    answer = _json(row["answer"])
    if isinstance(answer, dict):
        answer = _clean(answer)
        content, calls = answer.get("content"), answer.get("tool_calls")
    else:
        content, calls = (None if answer in (None, "") else str(answer)), None
    if not content and not calls:
        raise ImportRowError(f"{where}: empty answer")
    tools = _clean(_json(row["tools"])) or None
    rf = _clean(_json(row["response_format"])) or None
    ledger_tools = canonical_text({"tools": tools, "tool_choice": None}) if tools else ""
    key, c_msgs, c_tools, c_rf = key_parts(
        task, canonical_text(messages), ledger_tools, canonical_text(rf) if rf else ""
    )
    return {
        "example_key": key,
        "messages": c_msgs,
        "tools": c_tools,
        "response_format": c_rf,
        "answer": canonical_text({"role": "assistant", "content": content, "tool_calls": calls or None}),
    }


def import_examples(
    path: str | Path,
    *,
    artifacts_root: str,
    task: str,
    role: str,
    source: str,
    license: str,
    day: str | None = None,
    label_source: str = "import",
) -> ImportResult:
    """Import ``path`` (module docstring); return what was written and refused."""
    from ratchet_assets.night.examples import EXAMPLES_SCHEMA
    from ratchet_assets.night.split import REGISTRY_SCHEMA, registry_lock

    if role not in ROLES:
        raise ImportRowError(f"role {role!r}: use golden or train")
    if label_source not in LABEL_SOURCES:
        raise ImportRowError(f"label source {label_source!r}: use {', '.join(LABEL_SOURCES)}")
    if not task or not source.strip() or not license.strip():
        raise ImportRowError("give --task, --source and --license (they travel to the BOM and NOTICE)")
    try:
        task = check("task", task, "--task")
        day = check("day", day or datetime.now(UTC).date().isoformat(), "--day")
    except NameRuleError as exc:
        raise ImportRowError(exc.message) from None
    path = Path(path)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    import_id = f"{day}-{task}-{role}-{digest[:12]}"
    examples = pl.DataFrame([_example(task, row, where) for where, row in _read(path, data)])
    rows = examples.height
    examples = examples.unique("example_key", keep="first", maintain_order=True)
    duplicates = rows - examples.height
    now = datetime.now(UTC)
    examples = examples.with_row_index("n").with_columns(
        pl.lit(task).alias("task"),
        pl.lit(day).alias("day"),
        pl.format("import:{}:{}", pl.lit(import_id), pl.col("n")).alias("request_id"),
        pl.lit(now).dt.cast_time_unit("us").dt.replace_time_zone("UTC").alias("ts"),
        pl.lit("import").alias("source"),
    )
    layout = ArtifactLayout(artifacts_root)
    reg_path = layout.golden_registry()
    with registry_lock(artifacts_root):
        reg = pl.read_parquet(reg_path) if reg_path.exists() else pl.from_arrow(REGISTRY_SCHEMA.empty_table())
        held = examples.join(reg.select("example_key", "golden"), on="example_key", how="inner")
        refused_keys = held.filter(pl.col("golden") != (role == "golden"))["example_key"]
        examples = examples.filter(~pl.col("example_key").is_in(refused_keys.to_list()))
        new = examples.filter(~pl.col("example_key").is_in(reg["example_key"].to_list()))
        if new.height:
            added = new.select(
                "example_key",
                "task",
                pl.lit(role == "golden").alias("golden"),
                pl.lit("import").alias("reason"),
                pl.lit(day).alias("first_day"),
            )
            merged = pl.concat([reg, added]).sort("example_key").to_arrow().cast(REGISTRY_SCHEMA)
            sink = pa.BufferOutputStream()
            pq.write_table(merged, sink, compression="zstd")
            atomic_write_bytes(reg_path, sink.getvalue().to_pybytes())
    out = layout.import_examples(import_id)
    table = examples.select(EXAMPLES_SCHEMA.names).sort("example_key").to_arrow().cast(EXAMPLES_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(out, sink.getvalue().to_pybytes())
    provenance = {
        "import_id": import_id,
        "source": source,
        "license": license,
        "role": role,
        "task": task,
        "day": day,
        "label_source": label_source,
        "input": {"name": path.name, "sha256": digest},
        "rows": rows,
        "imported": table.num_rows,
        "duplicates": duplicates,
        "refused": int(refused_keys.len()),
        "imported_at": now.isoformat(timespec="seconds"),
    }
    atomic_write_bytes(
        layout.import_provenance(import_id), json.dumps(provenance, indent=2, sort_keys=True).encode()
    )
    return ImportResult(
        import_id,
        task,
        role,
        day,
        rows,
        table.num_rows,
        duplicates,
        int(refused_keys.len()),
        str(out),
        provenance,
    )
