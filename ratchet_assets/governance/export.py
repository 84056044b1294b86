"""``ratchet export``: requests, examples, golden rows, receipt rows and feedback of a task, client and time range,
verifiable.

Each kind becomes one file (``requests``, ``examples``, ``golden``, ``receipts``, ``feedback``: the control DB's
feedback items, ``ratchet_core.feedback``, by the time they were received; JSONL or Parquet, through
``ratchet_core.layout.DataExport``) and ``manifest.json`` says what was exported::

    {"format": "jsonl"|"parquet", "filters": {...}, "created_at": ...,
     "files": {kind: {"path", "rows", "sha256", "root"}}, "root": hex, "tree": "RFC 9162 SHA-256"}

A file's ``root`` is the Merkle root (``ratchet_stats.merkle``) of its rows in file order, each leaf the canonical
JSON (``ratchet_stats.canonical``) of the row with every value as written (times as ISO 8601 text); the manifest's
``root`` is the Merkle root of the canonical JSON of ``{"kind", "rows", "root"}`` of each file, by kind. So the
export verifies offline (:func:`verify_export`): re-read each file, recompute its leaves and root, then the whole.
A JSONL file's lines are exactly its leaves. When a signing key is given the manifest is also signed
(``manifest.dsse.json``, predicate :data:`PREDICATE_TYPE`, subject the root).

The transforms are Polars (lazy frames over the lake's and the artifacts' Parquet: filter, join, select): a
DataFrame pipeline per kind reads better here than four SQL strings. Erased requests are left out.

Refused before anything is written (:class:`ExportError`): an output folder inside the Ratchet home, the lake or
the artifacts (an export is for outside them: keys and the control DB live there), ``since`` not before
``until`` (it would export nothing, silently).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from ratchet_core.lake import Lake, atomic_write_bytes, is_url
from ratchet_core.layout import EXAMPLES, GOLDEN, ArtifactLayout, DataExport
from ratchet_stats import merkle
from ratchet_stats.canonical import canonical_json, sha256_hex

PREDICATE_TYPE = "https://ratchet.dev/export/v1"
KINDS = ("requests", "examples", "golden", "receipts", "feedback")
FEEDBACK_COLUMNS = [
    "received_at", "client", "feedback_id", "target", "request_id", "episode", "task", "metric", "kind", "value",
    "text", "state", "error", "example_key", "request_day", "served_by", "version", "agrees", "settled_at",
]  # fmt: skip
FORMATS = ("jsonl", "parquet")
REQUEST_COLUMNS = [
    "request_id", "ts", "day", "client", "task", "model_requested", "served_by", "version", "messages", "tools",
    "response_format", "params", "answer", "tool_calls", "finish_reason", "status_code", "prompt_tokens",
    "completion_tokens",
]  # fmt: skip
TS_FORMAT = "%Y-%m-%dT%H:%M:%S%.6f+00:00"


class ExportError(ValueError):
    """An export that cannot be made or does not verify; the message names the file and the check."""


@dataclass(frozen=True)
class ExportFilters:
    task: str | None = None
    client: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def check(self) -> None:
        if self.since and self.until and self.since >= self.until:
            raise ExportError(
                f"--since {self.since.isoformat()} is not before --until {self.until.isoformat()}: the export "
                "would be empty; swap them or widen the range"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "client": self.client,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }


def _texts(frame: pl.DataFrame) -> pl.DataFrame:
    """Times as ISO 8601 UTC text, so a row is the same in JSONL and Parquet."""
    return frame.with_columns(
        pl.col(c).dt.convert_time_zone("UTC").dt.strftime(TS_FORMAT)
        for c, t in frame.schema.items()
        if isinstance(t, pl.Datetime)
    )


def _time_filter(frame: pl.LazyFrame, f: ExportFilters, ts: str = "ts") -> pl.LazyFrame:
    if f.since:
        frame = frame.filter(pl.col(ts) >= f.since)
    if f.until:
        frame = frame.filter(pl.col(ts) < f.until)
    return frame


def _requests(lake: Lake, f: ExportFilters, erased: frozenset[str]) -> pl.DataFrame:
    parts = [
        pl.from_arrow(lake.read_table(seg.rel, columns=["kind", *REQUEST_COLUMNS])).lazy()
        for day in lake.days()
        for seg in lake.segments(day)
    ]
    if not parts:
        return pl.DataFrame(schema=dict.fromkeys(REQUEST_COLUMNS, pl.String))
    frame = pl.concat(parts, how="diagonal_relaxed").filter(pl.col("kind") == "request")
    if f.task:
        frame = frame.filter(pl.col("task") == f.task)
    if f.client:
        frame = frame.filter(pl.col("client") == f.client)
    frame = _time_filter(frame, f).filter(~pl.col("request_id").is_in(sorted(erased)))
    return frame.unique("request_id", keep="first").sort("ts", "request_id").select(REQUEST_COLUMNS).collect()


def _examples(
    files: list[Path], f: ExportFilters, ids: pl.Series | None, erased: frozenset[str]
) -> pl.DataFrame:
    if not files:
        return pl.DataFrame()
    frame = pl.scan_parquet([str(p) for p in files])
    if f.task:
        frame = frame.filter(pl.col("task") == f.task)
    if ids is not None:  # a client's rows: examples of its own requests only
        frame = frame.filter(pl.col("request_id").is_in(ids.to_list()))
    frame = _time_filter(frame, f).filter(~pl.col("request_id").is_in(sorted(erased)))
    return frame.sort("example_key", "day").collect()


def _receipts(layout: ArtifactLayout, f: ExportFilters) -> pl.DataFrame:
    frames = []
    for day in layout.receipt_days():
        if (f.since and day < f.since.date().isoformat()) or (f.until and day > f.until.date().isoformat()):
            continue
        rows = pl.read_parquet(layout.receipt_rows(day), columns=["index", "request_id", "client", "leaf"])
        frames.append(rows.with_columns(pl.lit(day).alias("day")))
    if not frames:
        return pl.DataFrame()
    frame = pl.concat(frames).with_columns(
        pl.col("leaf").str.json_path_match("$.task").alias("task"),
        pl.col("leaf").str.json_path_match("$.ts").alias("ts"),
    )
    if f.task:
        frame = frame.filter(pl.col("task") == f.task)
    if f.client:
        frame = frame.filter(pl.col("client") == f.client)
    if f.since:
        frame = frame.filter(pl.col("ts") >= f.since.isoformat())
    if f.until:
        frame = frame.filter(pl.col("ts") < f.until.isoformat())
    return frame.select("day", "index", "request_id", "client", "leaf").sort("day", "index")


def _feedback(engine: Any, f: ExportFilters, erased: frozenset[str]) -> pl.DataFrame:
    """The feedback items of the filters (time: when received), erased requests' left out, oldest first."""
    from ratchet_core import feedback

    items = [
        {c: r[c] for c in FEEDBACK_COLUMNS}
        for r in (feedback.rows(engine) if engine is not None else [])
        if r["request_id"] not in erased
        and (not f.task or r["task"] == f.task)
        and (not f.client or r["client"] == f.client)
        and (not f.since or datetime.fromisoformat(r["received_at"]) >= f.since)
        and (not f.until or datetime.fromisoformat(r["received_at"]) < f.until)
    ]
    schema = {c: pl.String for c in FEEDBACK_COLUMNS} | {"value": pl.Float64, "agrees": pl.Boolean}
    return pl.DataFrame(items, schema=schema)


def leaves(frame: pl.DataFrame) -> list[bytes]:
    """The leaves of a file's rows: canonical JSON of each row, in order."""
    return [canonical_json(row) for row in frame.to_dicts()]


def _write(frame: pl.DataFrame, path: Path, fmt: str) -> list[bytes]:
    rows = leaves(frame)
    if fmt == "jsonl":
        atomic_write_bytes(path, b"".join(r + b"\n" for r in rows))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        frame.write_parquet(tmp)
        tmp.replace(path)
    return rows


def _read(path: Path, fmt: str) -> list[bytes]:
    if fmt == "jsonl":
        return path.read_bytes().splitlines()
    return leaves(pl.read_parquet(path))


def _summary_leaf(kind: str, entry: dict[str, Any]) -> bytes:
    return canonical_json({"kind": kind, "rows": entry["rows"], "root": entry["root"]})


def _root(items: list[bytes]) -> str:
    return merkle.root(items).hex()


def check_out_folder(out: str | Path, protected: dict[str, str | Path | None]) -> None:
    """ExportError when `out` is one of the `protected` folders (name -> folder: the home, the lake, the artifacts)
    or inside one; object-store URLs are skipped (a local folder cannot be inside them)."""
    target = Path(out).expanduser().resolve()
    for name, root in protected.items():
        if root is None or is_url(root):
            continue
        folder = Path(root).expanduser().resolve()
        if target == folder or folder in target.parents:
            raise ExportError(
                f"--out {out} is inside the {name} ({folder}): an export is for outside it (keys, the control DB "
                "and the lake live there); choose a folder outside it"
            )


def export_data(
    out: str | Path,
    *,
    lake_root: str,
    artifacts_root: str,
    filters: ExportFilters,
    fmt: str = "jsonl",
    kinds: tuple[str, ...] = KINDS,
    engine: Any = None,
    private_key: Any = None,
    home: str | Path | None = None,
) -> dict[str, Any]:
    """Write the export and its manifest (module docstring); return the manifest. `home`: the Ratchet home, which
    the export must stay out of (as it must stay out of the lake and the artifacts)."""
    check_out_folder(out, {"Ratchet home": home, "lake": lake_root, "artifacts": artifacts_root})
    filters.check()
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ExportError(f"unknown kinds {sorted(unknown)}: use {', '.join(KINDS)}")
    from ratchet_assets.night.erasures import load_erasures

    erased = load_erasures(engine).request_ids
    lake, layout, target = Lake(lake_root), ArtifactLayout(artifacts_root), DataExport(Path(out))
    requests = _requests(lake, filters, erased)
    ids = requests["request_id"] if filters.client else None
    golden_days = [d for d in layout.days(GOLDEN) if layout.golden_file(d).exists()]
    frames = {
        "requests": lambda: requests,
        "examples": lambda: _examples(
            [layout.examples_file(d) for d in layout.days(EXAMPLES) if layout.examples_file(d).exists()],
            filters,
            ids,
            erased,
        ),
        "golden": lambda: _examples(
            [layout.golden_file(golden_days[-1])] if golden_days else [], filters, ids, erased
        ),
        "receipts": lambda: _receipts(layout, filters),
        "feedback": lambda: _feedback(engine, filters, erased),
    }
    files: dict[str, Any] = {}
    for kind in kinds:
        path = target.file(kind, fmt)
        rows = _write(_texts(frames[kind]()), path, fmt)
        files[kind] = {
            "path": path.name,
            "rows": len(rows),
            "sha256": sha256_hex(path.read_bytes()),
            "root": _root(rows),
        }
    manifest = {
        "format": fmt,
        "filters": filters.to_dict(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": files,
        "root": _root([_summary_leaf(k, files[k]) for k in sorted(files)]),
        "tree": "RFC 9162 SHA-256",
        "leaf": "canonical_json(row), file order; root over canonical_json({kind, rows, root}) by kind",
    }
    atomic_write_bytes(target.manifest, json.dumps(manifest, indent=2, sort_keys=True).encode())
    if private_key is not None:
        from ratchet_stats.dsse import make_statement, sign_statement

        statement = make_statement(
            PREDICATE_TYPE, manifest, [{"name": "export", "digest": {"sha256": manifest["root"]}}]
        )
        atomic_write_bytes(
            target.manifest.with_name("manifest.dsse.json"),
            canonical_json(sign_statement(statement, private_key)),
        )
    return manifest


def verify_export(folder: str | Path, public_keys: Any = None) -> dict[str, Any]:
    """Recompute every file's rows, sha256 and root and the manifest's root; ExportError names what differs.

    With ``public_keys``, ``manifest.dsse.json`` must verify too and sign this manifest's root."""
    target = DataExport(Path(folder))
    manifest = json.loads(target.manifest.read_bytes())
    fmt = manifest["format"]
    for kind, entry in manifest["files"].items():
        path = target.file(kind, fmt)
        if not path.exists():
            raise ExportError(f"{kind}: {path} is missing")
        if sha256_hex(path.read_bytes()) != entry["sha256"]:
            raise ExportError(f"{kind}: {path.name} sha256 differs from the manifest")
        rows = _read(path, fmt)
        if len(rows) != entry["rows"] or _root(rows) != entry["root"]:
            raise ExportError(f"{kind}: {path.name} rows or Merkle root differ from the manifest")
    files = manifest["files"]
    if _root([_summary_leaf(k, files[k]) for k in sorted(files)]) != manifest["root"]:
        raise ExportError("root: the manifest's root is not the root of its files")
    if public_keys is not None:
        from ratchet_stats.dsse import verify_statement

        signed = target.manifest.with_name("manifest.dsse.json")
        statement = verify_statement(signed.read_bytes(), public_keys, PREDICATE_TYPE)
        if statement["predicate"]["root"] != manifest["root"]:
            raise ExportError("signature: the signed manifest has another root")
    return manifest
