"""Erasure that reaches every byte: by request id, client, end user, time range and text (``ratchet erase``).

An erasure first **resolves its scope** to request ids: every sealed lake segment and every day's consolidated
traffic is searched (DuckDB) for rows matching all the given criteria (request ids, clients, the request's ``user``
field inside ``params``, ``since <= ts < until``, a case-insensitive text match in the prompt, answer or tool calls).
Every row of a matched request (its request row and its pair rows) is erased. Then each store is rewritten:

- **lake segments** holding such rows: republished under the same name with the content columns
  (``ratchet_core.schema.CONTENT_COLUMNS``) blanked, every other column kept — the rewrite goes through
  ``Lake.publish_table`` (temp file + fsync + atomic rename locally, one write-once PUT on an object store);
- **artifacts**: each day's ``traffic.parquet`` (blanked the same way), ``examples.parquet`` and ``golden.parquet``
  (rows dropped), ``train.jsonl`` + ``keys.txt`` (lines of the erased examples' keys dropped);
- **gateway ledgers and journals**: the request ids go to the control DB's ``erasures`` table; each replica applies
  them to its own DuckDB file and journal (``ratchet_gateway.ledger``: the loader's erasure hook);
- **every future night**: the same ``erasures`` rows (request ids and the erased examples' keys) keep them out of
  the examples, golden and training sets from now on.

Receipts stay verifiable: a receipt's leaf is ``RECEIPT_LEAF_FIELDS`` (ids, client, task, tokens, costs), none of
which an erasure touches, so the erased row keeps its leaf hash (a tombstone): old receipts, proofs and a rebuilt
receipt of the day still give the signed root. Adapters whose BOM lists an erased example key are named (retrain
to remove their influence). Each erasure is logged in the control DB's ``erasure_log``, signed (DSSE, predicate
:data:`PREDICATE_TYPE`): who, why, the scope (end user and text only as SHA-256), counts per store and when.
``dry_run`` counts per store and changes nothing.
"""

from __future__ import annotations

import getpass
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ratchet_core.lake import Lake, atomic_write_bytes
from ratchet_core.layout import EXAMPLES, GOLDEN, TRAFFIC, TRAIN, ArtifactLayout
from ratchet_core.schema import CONTENT_COLUMNS

PREDICATE_TYPE = "https://ratchet.dev/erasure/v1"


class ErasureError(ValueError):
    """An erasure that cannot run (empty scope, bad time range); the message says what to give."""


@dataclass(frozen=True)
class ErasureScope:
    """What to erase: rows matching every given criterion (each list matches any of its values)."""

    request_ids: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None

    def check(self) -> None:
        if not (self.request_ids or self.clients or self.users or self.since or self.until or self.text):
            raise ErasureError(
                "give at least one of --request-id, --client, --user, --since/--until, --text (an empty scope "
                "would erase everything)"
            )
        if self.since and self.until and self.since >= self.until:
            raise ErasureError(f"--since {self.since} is not before --until {self.until}")
        if self.text is not None and len(self.text.strip()) < 3:
            raise ErasureError("--text must hold at least 3 characters")

    def describe(self) -> dict[str, Any]:
        """The scope as logged: end users and text only as SHA-256 (the log must not keep what it erased)."""
        return {
            "request_ids": sorted(self.request_ids),
            "clients": sorted(self.clients),
            "users_sha256": sorted(_sha(u) for u in self.users),
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "text_sha256": _sha(self.text) if self.text else None,
        }

    def where_sql(self) -> tuple[str, list[Any]]:
        conds, params = [], []
        if self.request_ids:
            conds.append(f"request_id IN ({', '.join('?' for _ in self.request_ids)})")
            params += list(self.request_ids)
        if self.clients:
            conds.append(f"client IN ({', '.join('?' for _ in self.clients)})")
            params += list(self.clients)
        if self.users:
            # the gateway stores `user` redacted (an e-mail becomes its placeholder): match either form
            from ratchet_core.redact import redact_text

            users = sorted({*self.users, *(redact_text(u) for u in self.users)})
            conds.append(
                f"json_extract_string(NULLIF(params, ''), '$.user') IN ({', '.join('?' for _ in users)})"
            )
            params += users
        if self.since:
            conds.append("ts >= ?")
            params.append(self.since)
        if self.until:
            conds.append("ts < ?")
            params.append(self.until)
        if self.text:
            conds.append(
                "(contains(lower(messages), ?) OR contains(lower(answer), ?) OR contains(lower(tool_calls), ?))"
            )
            params += [self.text.lower()] * 3
        return " AND ".join(conds), params


@dataclass
class ErasureReport:
    """What an erasure matched and changed (or would change: ``dry_run``), per store."""

    dry_run: bool
    request_ids: list[str]
    example_keys: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # every file rewritten (or that would be)
    adapters_trained_on_erased: list[str] = field(default_factory=list)
    log_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Resolving the scope -------------------------------------------------------------------------------------------
def _traffic_sources(lake: Lake, layout: ArtifactLayout) -> list[tuple[str, str]]:
    """(kind, path) of every sealed segment and every consolidated traffic file."""
    out = [("lake", seg.rel) for day in lake.days() for seg in lake.segments(day)]
    out += [("traffic", str(p)) for d in layout.days(TRAFFIC) if (p := layout.traffic_file(d)).exists()]
    return out


def resolve(scope: ErasureScope, lake: Lake, layout: ArtifactLayout) -> list[str]:
    """Request ids with a row matching ``scope`` in the lake or the consolidated traffic, sorted."""
    import duckdb

    scope.check()
    where, params = scope.where_sql()
    con = duckdb.connect()
    lake.attach(con)
    ids: set[str] = set()
    for kind, path in _traffic_sources(lake, layout):
        src = lake.duckdb_path(path) if kind == "lake" else path
        rows = con.execute(
            f"SELECT DISTINCT request_id FROM read_parquet(?) WHERE {where}", [src, *params]
        ).fetchall()
        ids.update(r[0] for r in rows)
    con.close()
    return sorted(ids)


# Rewriting each store --------------------------------------------------------------------------------------------
def blank_rows(table: pa.Table, request_ids: set[str]) -> tuple[pa.Table, int]:
    """``table`` with the content columns of rows of ``request_ids`` set to '' (schema and metadata kept)."""
    mask = pc.is_in(table.column("request_id"), value_set=pa.array(sorted(request_ids), pa.string()))
    hit = int(pc.sum(mask).as_py() or 0)
    if not hit:
        return table, 0
    for name in CONTENT_COLUMNS:
        if name in table.column_names:
            i = table.column_names.index(name)
            col = table.column(i)
            table = table.set_column(i, table.field(i), pc.if_else(mask, pa.scalar("", col.type), col))
    return table, hit


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _erase_lake(lake: Lake, ids: set[str], dry_run: bool, report: ErasureReport) -> None:
    rows = segments = 0
    for day in lake.days():
        for seg in lake.segments(day):
            table = lake.read_table(seg.rel)
            table, hit = blank_rows(table, ids)
            if hit:
                rows += hit
                segments += 1
                report.files.append(lake.uri(seg.rel))
                if not dry_run:
                    lake.publish_table(seg.rel, table)
    report.counts["lake_rows"] = rows
    report.counts["lake_segments"] = segments


def _erase_artifacts(layout: ArtifactLayout, ids: set[str], dry_run: bool, report: ErasureReport) -> set[str]:
    """Blank traffic rows, drop example and golden rows, drop training lines; return the erased example keys."""
    counts = dict.fromkeys(("traffic_rows", "examples_rows", "golden_rows", "training_rows"), 0)
    for day in layout.days(TRAFFIC):
        path = layout.traffic_file(day)
        if path.exists():
            table = pq.read_table(path)
            table, hit = blank_rows(table, ids)
            if hit:
                counts["traffic_rows"] += hit
                report.files.append(str(path))
                if not dry_run:
                    atomic_write_bytes(path, _parquet_bytes(table))
    keys: set[str] = set()
    value_set = pa.array(sorted(ids), pa.string())
    for kind, file_of, count in (
        (EXAMPLES, layout.examples_file, "examples_rows"),
        (GOLDEN, layout.golden_file, "golden_rows"),
    ):
        for day in layout.days(kind):
            path = file_of(day)
            if not path.exists():
                continue
            table = pq.read_table(path)
            mask = pc.is_in(table.column("request_id"), value_set=value_set)
            gone = table.filter(mask)
            if gone.num_rows:
                keys.update(gone.column("example_key").to_pylist())
                counts[count] += gone.num_rows
                report.files.append(str(path))
                if not dry_run:
                    atomic_write_bytes(path, _parquet_bytes(table.filter(pc.invert(mask))))
    for day in layout.days(TRAIN):
        lines_path, keys_path = layout.train_jsonl(day), layout.train_keys(day)
        if not (lines_path.exists() and keys_path.exists()):
            continue
        lines = lines_path.read_bytes().splitlines()
        day_keys = keys_path.read_text().split()
        keep = [i for i, k in enumerate(day_keys) if k not in keys]
        if len(keep) == len(day_keys):
            continue
        counts["training_rows"] += len(day_keys) - len(keep)
        report.files += [str(lines_path), str(keys_path)]
        if not dry_run:
            atomic_write_bytes(lines_path, b"".join(lines[i] + b"\n" for i in keep))
            atomic_write_bytes(keys_path, "".join(day_keys[i] + "\n" for i in keep).encode("ascii"))
    report.counts.update(counts)
    return keys


def adapters_trained_on(layout: ArtifactLayout, keys: set[str]) -> list[str]:
    """Versions whose BOM lists one of ``keys`` among its training keys (their weights saw erased rows)."""
    out = []
    for bom in layout.bom_files():
        version = bom.parent.name
        train_keys = layout.bom_train_keys(version)
        if train_keys.exists() and keys & set(train_keys.read_text().split()):
            out.append(version)
    return sorted(out)


# The erasure ---------------------------------------------------------------------------------------------------
def erase(
    scope: ErasureScope,
    *,
    lake_root: str,
    artifacts_root: str,
    engine: Any,
    reason: str,
    private_key: Any = None,
    actor: str | None = None,
    dry_run: bool = False,
) -> ErasureReport:
    """Erase ``scope`` from every store (module docstring); with ``dry_run`` only count.

    Not dry: records the request ids and the erased examples' keys in ``erasures`` (replicas and future nights),
    and a signed ``erasure_log`` row (``private_key`` required)."""
    from ratchet_core.reasons import check_reason

    reason = check_reason(reason)
    scope.check()
    if not dry_run and private_key is None:
        raise ErasureError("an erasure is signed: no signing key given (ratchet init makes one)")
    lake, layout = Lake(lake_root), ArtifactLayout(artifacts_root)
    # Ids given explicitly are erased even when no sealed row has them yet (still in a replica's ledger).
    ids = sorted(set(resolve(scope, lake, layout)) | set(scope.request_ids))
    report = ErasureReport(dry_run=dry_run, request_ids=ids, example_keys=[])
    if ids:
        idset = set(ids)
        _erase_lake(lake, idset, dry_run, report)
        keys = _erase_artifacts(layout, idset, dry_run, report)
        report.example_keys = sorted(keys)
        report.adapters_trained_on_erased = adapters_trained_on(layout, keys)
    report.counts["requests"] = len(ids)
    report.counts["example_keys"] = len(report.example_keys)
    if dry_run:
        return report
    report.log_id = _record(engine, scope, report, reason, private_key, actor or getpass.getuser())
    return report


def _record(
    engine: Any, scope: ErasureScope, report: ErasureReport, reason: str, key: Any, actor: str
) -> int:
    from ratchet_core.control_db import ensure_schema, erasure_log, erasures
    from ratchet_stats.canonical import canonical_json, sha256_hex
    from ratchet_stats.dsse import make_statement, sign_statement

    ensure_schema(engine)
    at = datetime.now(UTC).isoformat(timespec="seconds")
    predicate = {
        "at": at,
        "actor": actor,
        "reason": reason,
        "scope": scope.describe(),
        "counts": dict(sorted(report.counts.items())),
        "request_ids": report.request_ids,
        "example_keys": report.example_keys,
        "adapters_trained_on_erased": report.adapters_trained_on_erased,
    }
    subject = {"name": f"erasure:{at}", "digest": {"sha256": sha256_hex(canonical_json(predicate))}}
    envelope = sign_statement(make_statement(PREDICATE_TYPE, predicate, [subject]), key)
    note = f"{reason} (erasure log)"
    with engine.begin() as conn:
        log_id = conn.execute(
            erasure_log.insert().values(
                at=at,
                actor=actor,
                reason=reason,
                scope=json.dumps(predicate["scope"], sort_keys=True),
                counts=json.dumps(predicate["counts"], sort_keys=True),
                envelope=json.dumps(envelope, sort_keys=True),
            )
        ).inserted_primary_key[0]
        rows = [{"request_id": r, "example_key": None} for r in report.request_ids]
        rows += [{"request_id": None, "example_key": k} for k in report.example_keys]
        if rows:
            conn.execute(
                erasures.insert(), [{**r, "reason": f"#{log_id}: {note}"[:500], "at": at} for r in rows]
            )
    return int(log_id)


def read_log(engine: Any, public_keys: Iterable[Any]) -> list[dict[str, Any]]:
    """Every erasure log row with its signed predicate, verified (a row whose signature fails raises)."""
    import sqlalchemy as sa

    from ratchet_core.control_db import ensure_schema, erasure_log
    from ratchet_stats.dsse import verify_statement

    ensure_schema(engine)
    keys = list(public_keys)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(erasure_log).order_by(erasure_log.c.id)).mappings().all()
    out = []
    for row in rows:
        statement = verify_statement(json.loads(row["envelope"]), keys, PREDICATE_TYPE)
        out.append({"id": row["id"], **statement["predicate"]})
    return out


def erased_request_ids(engine: Any) -> frozenset[str]:
    """Every erased request id (the gateway ledger's erasure hook polls this)."""
    from ratchet_assets.night.erasures import load_erasures

    return load_erasures(engine).request_ids


def scope_from_options(
    request_ids: Iterable[str] = (),
    clients: Iterable[str] = (),
    users: Iterable[str] = (),
    since: str | None = None,
    until: str | None = None,
    text: str | None = None,
) -> ErasureScope:
    """An :class:`ErasureScope` from CLI text (ISO dates or times; a naive time is UTC)."""

    def when(value: str | None, what: str) -> datetime | None:
        if not value:
            return None
        try:
            t = datetime.fromisoformat(value)
        except ValueError:
            raise ErasureError(
                f"--{what} {value!r} is not an ISO date or time (2026-01-31 or 2026-01-31T12:00)"
            ) from None
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    scope = ErasureScope(
        tuple(request_ids),
        tuple(clients),
        tuple(users),
        when(since, "since"),
        when(until, "until"),
        text or None,
    )
    scope.check()
    return scope


def ledger_files(home: Path) -> list[Path]:
    """The gateway replicas' own files under ``home/ledger`` (what their erasure hook rewrites)."""
    folder = Path(home) / "ledger"
    return sorted(p for p in folder.glob("*") if p.suffix in (".duckdb", ".journal"))
