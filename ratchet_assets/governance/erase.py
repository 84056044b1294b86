"""Erasure that reaches every byte: by request id, client, end user, time range and text (``ratchet erase``).

An erasure's scope (request ids, clients, the request's ``user`` field inside ``params``, ``since <= ts < until``,
a case-insensitive text match in the prompt, answer or tool calls; all given criteria must hold) becomes a
``ratchet_core.erasure_scope.ScopeMatcher`` (end user and text only as SHA-256; only rows written before the
erasure), the one predicate every store applies. It is first **resolved** against every sealed lake segment and
every day's consolidated traffic; every row of a matched request (its request row and its pair rows) is erased.
Then each store is rewritten:

- **lake segments** holding such rows: republished under the same name with the content columns
  (``ratchet_core.schema.CONTENT_COLUMNS``) blanked, every other column kept — the rewrite goes through
  ``Lake.publish_table`` (temp file + fsync + atomic rename locally, one write-once PUT on an object store);
- **artifacts**: each day's ``traffic.parquet`` (blanked the same way), ``examples.parquet`` and ``golden.parquet``
  (rows dropped), ``train.jsonl`` + ``keys.txt`` + ``labels.txt`` (lines of the erased examples' keys dropped);
- **feedback** (``ratchet_core.feedback``): the items on erased requests, of erased clients, and those whose
  text (a comment, a demonstration) the erased text matches are deleted from the control DB;
- **gateway ledgers and journals**: the request ids go to the control DB's ``erasures`` table and the matcher to
  ``erasure_scopes``; each replica applies both to its own DuckDB file and journal on its poll, rows not sealed
  yet included (``ratchet_gateway.ledger``: the loader's erasure hook), and records what it scrubbed in
  ``erasure_applied``; a segment sealed after the erasure began is blanked by :func:`sweep` (the night's
  ``traffic`` step), its ids added to ``erasures``;
- **commitments**: a rewritten golden or training set gets its ``commitment.json`` recomputed (golden
  ``keys.txt`` trimmed too), the roots the signed certificate and BOM of that day commit to kept under
  ``rewritten_by_erasure`` (:func:`recommit`);
- **every future night**: the same ``erasures`` rows (request ids and the erased examples' keys) keep them out of
  the examples, golden and training sets from now on.

Receipts stay verifiable: a receipt's leaf is ``RECEIPT_LEAF_FIELDS`` (ids, client, task, tokens, costs), none of
which an erasure touches, so the erased row keeps its leaf hash (a tombstone): old receipts, proofs and a rebuilt
receipt of the day still give the signed root. Adapters whose BOM lists an erased example key are named (retrain
to remove their influence). Each erasure is logged in the control DB's ``erasure_log``, signed (DSSE, predicate
:data:`PREDICATE_TYPE`): who, why, the scope (end user and text only as SHA-256), counts per store and when.
``dry_run`` counts per store and changes nothing.

Refused, changing nothing: a lake segment the erasure cannot read (a ``*.parquet`` entry that is a symlink or not a
regular file, a file Parquet cannot open) fails the erasure with :class:`ErasureError` naming it, since a row it
holds could not be erased. A scope that matches no sealed row is no error: its log entry says ``requests: 0``
(``request_ids`` lists only what matched; ids given with ``--request-id`` that no sealed row has are signed apart,
as ``request_ids_not_found``) and is still written, because gateway replicas apply the scope to rows they have
not sealed yet.
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

from ratchet_core.erasure_scope import SCOPE_COLUMNS, ScopeMatcher, record_applied
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

    def matcher(self, ts_before: datetime) -> ScopeMatcher:
        """The predicate as stored and applied everywhere (``ratchet_core.erasure_scope``): rows before ``ts_before``."""
        return ScopeMatcher.build(
            ts_before=ts_before,
            request_ids=self.request_ids,
            clients=self.clients,
            users=self.users,
            since=self.since,
            until=self.until,
            text=self.text,
        )


@dataclass
class ErasureReport:
    """What an erasure matched and changed (or would change: ``dry_run``), per store."""

    dry_run: bool
    request_ids: list[str]
    example_keys: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # every file rewritten (or that would be)
    adapters_trained_on_erased: list[str] = field(default_factory=list)
    request_ids_not_found: list[str] = field(default_factory=list)  # given ids no sealed row has (yet)
    golden_days: list[str] = field(default_factory=list)  # golden sets rewritten (their commitment too)
    train_days: list[str] = field(default_factory=list)  # training sets rewritten (their commitment too)
    log_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Resolving the scope -------------------------------------------------------------------------------------------
def _unreadable(where: str, exc: BaseException) -> ErasureError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return ErasureError(
        f"{where} cannot be read ({first}): nothing was erased. Its rows could not be checked; restore or move "
        "the file, then erase again"
    )


def check_lake_readable(lake: Lake) -> None:
    """ErasureError naming the first ``*.parquet`` entry of the lake that is not a regular file (a symlink...)."""
    for day in lake.days():
        for rel in lake.unreadable_entries(day):
            raise ErasureError(
                f"lake entry {lake.uri(rel)} is not a regular file (a symlink?): nothing was erased. The "
                "erasure cannot vouch for rows it cannot read; replace it with the segment itself or move it "
                "out of the lake, then erase again"
            )


def resolve(matcher: ScopeMatcher, lake: Lake, layout: ArtifactLayout) -> list[str]:
    """Request ids with a row matching ``matcher`` in a sealed segment or a day's consolidated traffic, sorted.

    ErasureError for a lake entry or file that cannot be read (see the module docstring)."""
    check_lake_readable(lake)
    ids: set[str] = set()
    for day in lake.days():
        for seg in lake.segments(day):
            try:
                table = lake.read_table(seg.rel, columns=SCOPE_COLUMNS)
            except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                raise _unreadable(f"lake segment {lake.uri(seg.rel)}", exc) from None
            ids |= matcher.matched_request_ids(table)
    for day in layout.days(TRAFFIC):
        if (path := layout.traffic_file(day)).exists():
            try:
                table = pq.read_table(path, columns=SCOPE_COLUMNS)
            except (OSError, ValueError) as exc:
                raise _unreadable(f"traffic file {path}", exc) from None
            ids |= matcher.matched_request_ids(table)
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


def _erase_lake(
    lake: Lake, ids: set[str], dry_run: bool, report: ErasureReport, segments_of: Iterable[Any] | None = None
) -> None:
    rows = segments = 0
    for seg in segments_of if segments_of is not None else _all_segments(lake):
        table, hit = blank_rows(lake.read_table(seg.rel), ids)
        if hit:
            rows += hit
            segments += 1
            report.files.append(lake.uri(seg.rel))
            if not dry_run:
                lake.publish_table(seg.rel, table)
    report.counts["lake_rows"] = rows
    report.counts["lake_segments"] = segments


def _all_segments(lake: Lake) -> list[Any]:
    return [seg for day in lake.days() for seg in lake.segments(day)]


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
    golden_days: list[str] = []
    train_days: list[str] = []
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
                if kind == GOLDEN:
                    golden_days.append(day)
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
        labels_path = layout.train_labels(day)  # absent in a training set written before label sources
        label_lines = labels_path.read_bytes().splitlines() if labels_path.exists() else None
        if not dry_run:
            atomic_write_bytes(lines_path, b"".join(lines[i] + b"\n" for i in keep))
            atomic_write_bytes(keys_path, "".join(day_keys[i] + "\n" for i in keep).encode("ascii"))
            if label_lines is not None:
                atomic_write_bytes(labels_path, b"".join(label_lines[i] + b"\n" for i in keep))
        if label_lines is not None:
            report.files.append(str(labels_path))
        train_days.append(day)
    report.counts.update(counts)
    report.golden_days, report.train_days = golden_days, train_days
    return keys


# Commitments of rewritten data sets ------------------------------------------------------------------------------
def _recommit(path: Path, fresh: dict[str, Any], at: str) -> None:
    """Rewrite ``commitment.json`` with the roots of the rewritten data set; the roots it had (the ones the signed
    certificate and BOM of that day commit to) move to ``rewritten_by_erasure`` with the erasure's time."""
    old = json.loads(path.read_text()) if path.exists() else {}
    history = [*old.get("rewritten_by_erasure", [])]
    history.append({"at": at, "previous": {"keys": old.get("keys"), "rows": old.get("rows")}})
    doc = {
        **old,
        "keys": {**old.get("keys", {}), **fresh["keys"]},
        "rows": {**old.get("rows", {}), **fresh["rows"]},
    }
    if "labels" in fresh and "labels" in old:
        doc["labels"] = {**old["labels"], **fresh["labels"]}
        history[-1]["previous"]["labels"] = {k: old["labels"].get(k) for k in ("root", "size")}
    doc["rewritten_by_erasure"] = history
    atomic_write_bytes(path, json.dumps(doc, indent=2, sort_keys=True).encode())


def recommit(
    layout: ArtifactLayout, golden_days: Iterable[str], train_days: Iterable[str], at: str
) -> list[str]:
    """Recompute the key and row trees of each rewritten golden set (its ``keys.txt`` trimmed to the rows left) and
    training set, and rewrite their ``commitment.json`` (:func:`_recommit`); return the files written."""
    import duckdb

    from ratchet_assets.night.streamed import KeyTree, RowTree, stream_golden_commitment

    written = []
    for day in sorted(set(golden_days)):
        golden = layout.golden_file(day)
        left = set(pq.read_table(golden, columns=["example_key"]).column("example_key").to_pylist())
        keys_path = layout.golden_keys(day)
        if keys_path.exists():
            kept = [k for k in keys_path.read_text().split() if k in left]
            atomic_write_bytes(keys_path, "".join(k + "\n" for k in kept).encode("ascii"))
        path = layout.golden_commitment(day)
        before = path.read_bytes() if path.exists() else None
        con = duckdb.connect()
        try:
            kc, rc = stream_golden_commitment(con, golden, path, day)  # writes the fresh document
        finally:
            con.close()
        if before is not None:
            atomic_write_bytes(path, before)
        _recommit(path, {"keys": kc.to_dict(), "rows": rc.to_dict()}, at)
        written.append(str(path))
    for day in sorted(set(train_days)):
        keys_tree, row_tree = KeyTree(), RowTree()
        keys_tree.add(layout.train_keys(day).read_text().split())
        row_tree.add(layout.train_jsonl(day).read_bytes().splitlines())
        fresh = {"keys": keys_tree.finish().to_dict(), "rows": row_tree.finish().to_dict()}
        if layout.train_labels(day).exists():
            label_tree = RowTree()
            lines = layout.train_labels(day).read_bytes().splitlines()
            label_tree.add(lines)
            counts: dict[str, int] = {}
            for line in lines:
                source = line.decode("ascii").split(" ", 1)[1]
                counts[source] = counts.get(source, 0) + 1
            fresh["labels"] = {**label_tree.finish().to_dict(), "counts": dict(sorted(counts.items()))}
        _recommit(layout.train_commitment(day), fresh, at)
        written.append(str(layout.train_commitment(day)))
    return written


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
    from ratchet_core.clock import now as clock_now

    lake, layout = Lake(lake_root), ArtifactLayout(artifacts_root)
    # Taken before the lake is read: a segment sealed from now on is the night's sweep's (:func:`sweep`).
    at = datetime.now(UTC).isoformat(timespec="microseconds")
    matcher = scope.matcher(clock_now())
    ids = resolve(matcher, lake, layout)
    report = ErasureReport(dry_run=dry_run, request_ids=ids, example_keys=[])
    # Ids given explicitly but in no sealed row are not counted as erased; they are still recorded (a replica may
    # hold them unsealed, and blanks them when it applies the scope).
    report.request_ids_not_found = sorted(set(scope.request_ids) - set(ids))
    if ids:
        idset = set(ids)
        _erase_lake(lake, idset, dry_run, report)
        keys = _erase_artifacts(layout, idset, dry_run, report)
        report.example_keys = sorted(keys)
        report.adapters_trained_on_erased = adapters_trained_on(layout, keys)
        if not dry_run:
            report.files += recommit(layout, report.golden_days, report.train_days, at)
    report.counts["feedback_items"] = _erase_feedback(engine, scope, matcher, ids, report, dry_run)
    report.counts["requests"] = len(ids)
    report.counts["example_keys"] = len(report.example_keys)
    if dry_run:
        return report
    report.log_id = _record(
        engine, scope, matcher, report, reason, private_key, actor or getpass.getuser(), at
    )
    return report


def _erase_feedback(
    engine: Any,
    scope: ErasureScope,
    matcher: ScopeMatcher,
    ids: list[str],
    report: ErasureReport,
    dry_run: bool,
) -> int:
    """Delete the feedback of the erased requests (those found and those named but not sealed yet), of erased
    clients when the scope names clients alone, and whose text the erased text matches."""
    from ratchet_core import feedback

    if engine is None:
        return 0
    only_clients = scope.clients and not (
        scope.request_ids or scope.users or scope.since or scope.until or scope.text
    )
    return feedback.delete(
        engine,
        request_ids=[*ids, *report.request_ids_not_found],
        clients=scope.clients if only_clients else (),
        text_matches=matcher.matches_text if scope.text else None,
        text_clients=scope.clients,
        dry_run=dry_run,
    )


def _record(
    engine: Any,
    scope: ErasureScope,
    matcher: ScopeMatcher,
    report: ErasureReport,
    reason: str,
    key: Any,
    actor: str,
    scope_at: str,
) -> int:
    from ratchet_core.control_db import ensure_schema, erasure_log, erasure_scopes, erasures
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
        "request_ids_not_found": report.request_ids_not_found,
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
        # the predicate every replica applies to its unsealed rows, and each night to rows sealed after scope_at
        conn.execute(erasure_scopes.insert().values(log_id=log_id, at=scope_at, matcher=matcher.to_json()))
        rows = [
            {"request_id": r, "example_key": None}
            for r in (*report.request_ids, *report.request_ids_not_found)
        ]
        rows += [{"request_id": None, "example_key": k} for k in report.example_keys]
        if rows:
            conn.execute(
                erasures.insert(), [{**r, "reason": f"#{log_id}: {note}"[:500], "at": at} for r in rows]
            )
    return int(log_id)


def sweep(engine: Any, lake_root: str, artifacts_root: str, day: str) -> dict[str, int]:
    """Apply every stored scope to the day's segments sealed after its erasure began (a replica sealed them
    before it applied the scope): blank them in the lake and the artifacts, record their request ids in
    ``erasures`` (so examples, golden and training sets leave them out) and what was scrubbed in
    ``erasure_applied`` (store ``lake:<day>``). The night's ``traffic`` step runs it before consolidating."""
    import sqlalchemy as sa

    from ratchet_assets.night.erasures import load_erasures
    from ratchet_core.control_db import ensure_schema, erasure_scopes, erasures

    if engine is None:
        return {}
    ensure_schema(engine)
    with engine.connect() as conn:
        scopes = conn.execute(sa.select(erasure_scopes).order_by(erasure_scopes.c.log_id)).mappings().all()
    lake, layout = Lake(lake_root), ArtifactLayout(artifacts_root)
    segments = lake.segments(day) if scopes else []
    totals: dict[str, int] = {}
    for row in scopes:
        matcher = ScopeMatcher.from_json(row["matcher"])
        since = datetime.fromisoformat(row["at"])
        if day > matcher.before.date().isoformat():
            continue  # the day began after the erasure: none of its rows is in scope
        late = [seg for seg in segments if seg.mtime >= since]
        if not late:
            continue
        already = load_erasures(engine).request_ids
        ids: set[str] = set()
        for seg in late:
            ids |= matcher.matched_request_ids(lake.read_table(seg.rel, columns=SCOPE_COLUMNS))
        ids -= already
        if not ids:
            continue
        report = ErasureReport(dry_run=False, request_ids=sorted(ids), example_keys=[])
        _erase_lake(lake, ids, False, report, late)
        keys = _erase_artifacts(layout, ids, False, report)
        from ratchet_core import feedback

        report.counts["feedback_items"] = feedback.delete(engine, request_ids=ids)
        recommit(layout, report.golden_days, report.train_days, datetime.now(UTC).isoformat())
        at = datetime.now(UTC).isoformat(timespec="seconds")
        note = f"#{row['log_id']}: sealed after the erasure ({day})"
        with engine.begin() as conn:
            conn.execute(
                erasures.insert(),
                [{"request_id": r, "example_key": None, "reason": note, "at": at} for r in sorted(ids)]
                + [{"request_id": None, "example_key": k, "reason": note, "at": at} for k in sorted(keys)],
            )
        counts = {k: v for k, v in report.counts.items() if v} | {"requests": len(ids)}
        record_applied(engine, row["log_id"], f"lake:{day}", counts)
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
    return totals


def read_applied(engine: Any) -> dict[int, list[dict[str, Any]]]:
    """What each replica and night scrubbed, per erasure log id (``erasure_applied``; not signed: replicas hold
    no signing key)."""
    import sqlalchemy as sa

    from ratchet_core.control_db import ensure_schema, erasure_applied

    ensure_schema(engine)
    out: dict[int, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for r in conn.execute(sa.select(erasure_applied).order_by(erasure_applied.c.id)).mappings():
            out.setdefault(int(r["log_id"]), []).append(
                {"store": r["store"], "at": r["at"], "counts": json.loads(r["counts"])}
            )
    return out


def read_log(engine: Any, public_keys: Iterable[Any]) -> list[dict[str, Any]]:
    """Every erasure log row with its signed predicate, verified (a row whose signature fails raises), and what
    each replica and night scrubbed for it since (``applied``, from :func:`read_applied`)."""
    import sqlalchemy as sa

    from ratchet_core.control_db import ensure_schema, erasure_log
    from ratchet_stats.dsse import verify_statement

    ensure_schema(engine)
    keys = list(public_keys)
    applied = read_applied(engine)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(erasure_log).order_by(erasure_log.c.id)).mappings().all()
    out = []
    for row in rows:
        statement = verify_statement(json.loads(row["envelope"]), keys, PREDICATE_TYPE)
        out.append({"id": row["id"], **statement["predicate"], "applied": applied.get(int(row["id"]), [])})
    return out


def scope_from_options(
    request_ids: Iterable[str] = (),
    clients: Iterable[str] = (),
    users: Iterable[str] = (),
    since: str | None = None,
    until: str | None = None,
    text: str | None = None,
) -> ErasureScope:
    """An :class:`ErasureScope` from CLI text (ISO dates or times; a naive time is UTC)."""

    from ratchet_assets.governance.when import parse_when

    def when(value: str | None, what: str) -> datetime | None:
        try:
            return parse_when(value, f"--{what}")
        except ValueError as exc:
            raise ErasureError(str(exc)) from None

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
