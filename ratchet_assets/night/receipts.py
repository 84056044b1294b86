"""The ``daily_receipt`` step: commit to the day's request rows, price them as the teacher would, sign once.

Files (D = YYYY-MM-DD), under ``<artifacts>/receipts/D/`` (``ratchet_core.layout.ArtifactLayout.receipt_*``):

- ``receipt.dsse.json``: canonical JSON of the DSSE envelope (so the file's SHA-256 is the chain digest); a v3
  receipt (``ratchet_stats.receipt.v3``; v2 before it) signs the request root, the client root, the estimate root
  and the pair root, no client's name or totals;
- ``rows.parquet``: the leaves in tree order — columns ``index`` (int64), ``request_id``, ``client``, ``leaf``
  (the canonical JSON text that is hashed), in row groups of ``ratchet_core.receipt_store.ROW_GROUP_ROWS``. The
  gateway serves a client its own rows from it and proofs with ``receipt_proof``;
- ``tree.bin``: the RFC 9162 tree over the leaves, built streaming batch by batch and stored
  (``ratchet_stats.merkle_store``), so a proof reads ``O(log n)`` hashes instead of rebuilding the tree;
- ``clients.jsonl`` / ``estimates.jsonl``: the client lines and the per-task estimate lines, one canonical JSON
  leaf a line, in tree order (the auditor's files; the gateway gives each client only its own, proven);
- ``pairs.jsonl``: the day's audit and shadow pair calls (``ratchet_stats.receipt.v3.PAIR_LEAF_FIELDS``), in tree order: their
  cost (``actual_cost_usd``: the teacher's price on audits, the student's on shadows) is in each client's paid
  (``pair_cost_micro_usd``) and so subtracted from its savings. Streamed like the rows (``pair_batches``: DuckDB
  sorts the pair rows by request_id, the lines are built and tie-sorted per batch, hashed into the pair root and
  written under a temporary name that becomes ``pairs.jsonl`` only for the predicate signed), never held whole.

Teacher-equivalent cost (``ratchet_stats.teacher_equivalent``): teacher-served rows are measured; a student-served
row is priced at the teacher's prices with its prompt counted by the teacher's tokenizer (``teacher_prompt_tokens``,
recorded by the gateway) and the task's completion estimated from the teacher's own answers that day (teacher-served
rows and audit pairs), else the previous receipt's estimate (chained), else not counted.

Signing goes through the effect ledger (``receipt.sign``, key ``receipt:D``, fingerprint = digest of the
predicate, which holds the roots, the prices and the chain link). A rerun with the same predicate reuses the
stored envelope byte for byte; a different predicate for a signed day is refused (``ReceiptConflict``), never
signed twice.
"""

from __future__ import annotations

import base64
import json
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC
from hashlib import sha256 as _sha256
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ratchet_assets.effects import EffectLedger, EffectRecord
from ratchet_assets.night import (
    ChunkedParquetWriter,
    canonical_text,
    connect,
    sql_str,
    stream_batches,
)
from ratchet_assets.night.budget import Budget
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.traffic import traffic_path
from ratchet_core import receipt_store
from ratchet_core.lake import atomic_write_bytes
from ratchet_core.layout import ArtifactLayout
from ratchet_core.schema import RECEIPT_LEAF_FIELDS
from ratchet_stats import teacher_equivalent as te
from ratchet_stats.canonical import canonical_json, digest
from ratchet_stats.dsse import make_statement, parse_statement, sign_statement, verify_statement
from ratchet_stats.merkle_store import TreeBuilder
from ratchet_stats.receipt import FORMATS, envelope_digest, micro, v2, v3
from ratchet_stats.receipt.common import client_salt

EFFECT_TYPE = "receipt.sign"
ROWS_SCHEMA = pa.schema(
    [("index", pa.int64()), ("request_id", pa.string()), ("client", pa.string()), ("leaf", pa.string())]
)


class ReceiptConflict(RuntimeError):
    """The day was already signed with different content; the message says what to do."""


@dataclass
class ReceiptResult:
    day: str
    path: str
    rows_path: str
    root: str
    size: int
    envelope_digest: str
    outcome: str  # execute | duplicate
    previous: dict[str, str] | None
    totals: dict[str, Any]
    clients: dict[str, dict[str, Any]]
    estimates: list[dict[str, Any]] = field(default_factory=list)
    prices: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ts_text(ts: Any) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def leaf_rows(traffic_file: str | Path) -> list[dict[str, Any]]:
    """Request rows' receipt fields, sorted by request_id, ``ts`` as ISO 8601 UTC text."""
    con = connect()
    cols = ", ".join(RECEIPT_LEAF_FIELDS)
    table = con.sql(
        f"SELECT {cols} FROM read_parquet({sql_str(str(traffic_file))}) WHERE kind = 'request' "
        "ORDER BY request_id"
    ).to_arrow_table()
    con.close()
    columns = {name: table[name].to_pylist() for name in RECEIPT_LEAF_FIELDS}
    columns["ts"] = [_ts_text(t) for t in columns["ts"]]
    for name in _INT_FIELDS:
        columns[name] = [int(v or 0) for v in columns[name]]
    for name in ("teacher_cost_usd", "actual_cost_usd"):
        columns[name] = [float(v or 0.0) for v in columns[name]]
    return [
        dict(zip(RECEIPT_LEAF_FIELDS, values, strict=True)) for values in zip(*columns.values(), strict=True)
    ]


_NEEDS_ESCAPE = r'["\\\x00-\x1f]'  # RE2: a character JSON escapes (a quote, a backslash, a control character)


def _json_strs(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A text column as canonical JSON texts where no character needs escaping, 'null' for NULL, else NULL
    (the row is built by the definition). Computed on the sorted batches, so DuckDB sorts only the raw columns."""
    col = pc.cast(column, pa.string())
    escape = pc.fill_null(pc.match_substring_regex(col, _NEEDS_ESCAPE), False)
    quoted = pc.if_else(escape, pa.scalar(None, pa.string()), pc.binary_join_element_wise('"', col, '"', ""))
    return pc.if_else(pc.is_null(col), "null", quoted)


def _json_ints(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An integer column as ``int(v or 0)``'s JSON text."""
    return pc.cast(pc.fill_null(pc.cast(column, pa.int64()), 0), pa.string())


def _field_texts(table: pa.Table, strs: tuple[str, ...], ints: tuple[str, ...]) -> dict[str, Any]:
    """Each field's canonical JSON text (NULL where Python must decide): text and integer columns here, the
    costs per distinct value (``_float_texts``), ``ts`` from DuckDB's ``j_ts``."""
    texts: dict[str, Any] = {c: _json_strs(table[c]) for c in strs}
    texts.update({c: _json_ints(table[c]) for c in ints})
    texts.update({c: _float_texts(table[c]) for c in _COST_FIELDS})
    texts["ts"] = table["j_ts"]
    return texts


_INT_FIELDS = (
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "status_code",
    "teacher_prompt_tokens",
)
_COST_FIELDS = ("teacher_cost_usd", "actual_cost_usd")
_STR_FIELDS = ("request_id", "client", "task", "served_by", "version")


def _leaf_parts_sql(traffic_file: str | Path) -> str:
    """Request rows in leaf order with ``ts``'s canonical JSON text (NULL where Python must decide); the other
    fields' texts are made from the sorted batches (``_field_texts``): half the payload DuckDB sorts."""
    ts = "timezone('UTC', ts)"
    j_ts = (
        f"CASE WHEN year({ts}) BETWEEN 1000 AND 9999 "
        f"THEN '\"' || strftime({ts}, '%Y-%m-%dT%H:%M:%S.%fZ') || '\"' END AS j_ts"
    )
    cols = ", ".join(RECEIPT_LEAF_FIELDS)
    return (
        f"SELECT {cols}, {j_ts} FROM read_parquet({sql_str(str(traffic_file))}) "
        "WHERE kind = 'request' ORDER BY request_id"
    )


def _per_value(column: pa.Array | pa.ChunkedArray, fn: Any, type_: pa.DataType) -> pa.Array:
    """``[fn(v) for v in column]`` (a float column, NULL as None) as an Arrow array, `fn` called once per distinct
    value: the day's costs repeat (prices times token counts), so a batch needs far fewer calls than rows (at
    worst one a row, as before). Values are told apart by their bits, so the result is exactly the per-row one."""
    arr = pc.cast(column, pa.float64())
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    bits = arr.view(pa.int64())
    distinct = pc.unique(bits)
    mapped = pa.array([fn(v) for v in distinct.view(pa.float64()).to_pylist()], type_)
    return mapped.take(pc.index_in(bits, value_set=distinct))


def _float_text(v: float | None) -> str | None:
    """``float(v or 0.0)`` as canonical JSON text; None for a value canonical JSON refuses (NaN, infinity)."""
    f = float(v or 0.0)
    return repr(f) if math.isfinite(f) else None


def _float_texts(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return _per_value(column, _float_text, pa.string())


def _micro(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``micro(v)`` of each value (call it once the leaves are built: a non-finite cost raises there first)."""
    return _per_value(column, micro, pa.int64())


def receipt_leaves(traffic_file: str | Path, con: Any = None) -> Iterator[pa.Table]:
    """The receipt's leaves in batches, set-wise: tables (request_id, client, task, leaf, served, status,
    completion, teacher_prompt, teacher_micro, actual_micro) in leaf order (NULL client/task read "None", as
    ``str()`` of the leaf's null).

    Each leaf is ``canonical_text`` of the row ``leaf_rows`` gives, assembled from per-field JSON texts (keys in
    sorted order); a row with a field that needs escaping, a NULL ``ts`` or a non-finite cost is built by the
    definition itself (``canonical_text(leaf_rows-style dict)``), which also raises what it raised before.
    `con`: the DuckDB connection to sort with (a budgeted one, ``night.budget.connect``); default a plain one.
    """
    con = con or connect()
    rows = stream_batches(con, _leaf_parts_sql(traffic_file))
    for batch in rows:
        table = pa.Table.from_batches([batch])
        j = _field_texts(table, _STR_FIELDS, _INT_FIELDS)
        pieces: list[Any] = []
        for i, name in enumerate(sorted(RECEIPT_LEAF_FIELDS)):
            pieces += [("{" if i == 0 else ",") + f'"{name}":', j[name]]
        pieces.append("}")
        leaf = pc.binary_join_element_wise(*pieces, "")
        if leaf.null_count:
            slow = pc.is_null(leaf).to_pylist()
            fields = {c: table[c].to_pylist() for c in RECEIPT_LEAF_FIELDS}
            fixed = leaf.to_pylist()
            for i, is_slow in enumerate(slow):
                if is_slow:
                    fixed[i] = canonical_text(_leaf_row({c: fields[c][i] for c in RECEIPT_LEAF_FIELDS}))
            leaf = pa.array(fixed, pa.string())
        client = table["client"]
        served = pc.if_else(
            pc.fill_null(pc.not_equal(table["served_by"], ""), False), table["served_by"], "teacher"
        )
        yield pa.table(
            {
                "request_id": table["request_id"],
                "client": client,
                "task": pc.cast(table["task"], pa.string()).fill_null("None"),
                "leaf": leaf,
                "served": served,
                "status": pc.cast(table["status_code"], pa.int64()).fill_null(0),
                "completion": pc.cast(table["completion_tokens"], pa.int64()).fill_null(0),
                "teacher_prompt": pc.cast(table["teacher_prompt_tokens"], pa.int64()).fill_null(0),
                "teacher_micro": _micro(table["teacher_cost_usd"]),
                "actual_micro": _micro(table["actual_cost_usd"]),
            }
        )
    con.close()


def _leaf_row(raw: dict[str, Any]) -> dict[str, Any]:
    """One leaf row as ``leaf_rows`` builds it from the traffic file's values."""
    return _typed_row(raw, _INT_FIELDS, null_ts=False)


def _typed_row(raw: dict[str, Any], ints: tuple[str, ...], null_ts: bool) -> dict[str, Any]:
    """A leaf or pair row's values typed as the definitions type them: ``ts`` as ISO 8601 UTC text (``null_ts``:
    a missing ts stays None), `ints` as int, the costs as float (NULL as 0)."""
    row = dict(raw)
    row["ts"] = None if null_ts and row["ts"] is None else _ts_text(row["ts"])
    for name in ints:
        row[name] = int(row[name] or 0)
    for name in _COST_FIELDS:
        row[name] = float(row[name] or 0.0)
    return row


class _DayTotals:
    """Per-client totals of the day's leaves, batch by batch and set-wise (``v2.totals_from_rows``'s
    numbers): measured and paid amounts summed per (client, served); student-served rows with status 200 counted
    per (client, task, teacher_prompt_tokens) and priced once the task estimates are known; the teacher's request
    answers per task; each client's first request_id (its salt)."""

    def __init__(self) -> None:
        self.clients: dict[str, dict[str, Any]] = {}
        self.estimated: dict[tuple[str, str, int], int] = {}
        self.answers: dict[str, tuple[int, int]] = {}
        self.first: dict[str, str] = {}

    def add(self, table: pa.Table) -> None:
        client = pc.cast(table["client"], pa.string()).fill_null("None")
        student = pc.equal(table["served"], "student")
        measured = pc.if_else(student, 0, table["teacher_micro"])
        grouped = (
            pa.table({"client": client, "served": table["served"], "t": measured, "a": table["actual_micro"]})
            .group_by(["client", "served"])
            .aggregate([("t", "count"), ("t", "sum"), ("a", "sum")])
        )
        for g in grouped.to_pylist():
            totals = self.clients.setdefault(g["client"], v2.empty_totals())
            v2.add(totals, g["served"], int(g["t_count"]), int(g["t_sum"]), 0, int(g["a_sum"]))
        ok = pc.equal(table["status"], 200)
        est = pa.table({"client": client, "task": table["task"], "tp": table["teacher_prompt"]}).filter(
            pc.and_(student, ok)
        )
        for g in est.group_by(["client", "task", "tp"]).aggregate([("tp", "count")]).to_pylist():
            key = (g["client"], g["task"], int(g["tp"]))
            self.estimated[key] = self.estimated.get(key, 0) + int(g["tp_count"])
        answer = pc.and_(
            pc.and_(pc.equal(table["served"], "teacher"), ok), pc.greater(table["completion"], 0)
        )
        ans = pa.table({"task": table["task"], "c": table["completion"]}).filter(answer)
        for g in ans.group_by(["task"]).aggregate([("c", "count"), ("c", "sum")]).to_pylist():
            k, c = self.answers.get(g["task"], (0, 0))
            self.answers[g["task"]] = (k + int(g["c_count"]), c + int(g["c_sum"]))
        firsts = (
            pa.table({"client": client, "r": table["request_id"]})
            .group_by(["client"])
            .aggregate([("r", "min")])
        )
        for g in firsts.to_pylist():
            if g["client"] not in self.first or g["r_min"] < self.first[g["client"]]:
                self.first[g["client"]] = g["r_min"]

    def student_tasks(self) -> set[str]:
        return {task for _, task, _ in self.estimated}

    def tasks(self, client: str) -> list[str]:
        """The tasks of the client's estimated rows (``receipt.v3`` client line ``tasks``)."""
        return sorted({task for c, task, _ in self.estimated if c == client})

    def add_pairs(self, pairs: _DayPairs) -> dict[str, dict[str, Any]]:
        """Per-client v3 TOTALS (sorted by client): the priced request totals plus the client's pair calls in
        what was paid; a pair's request_id counts towards the client's salt like a request's."""
        out = {name: {**t, "pairs": 0, "pair_cost_micro_usd": 0} for name, t in self.clients.items()}
        for name, (n, cost) in pairs.clients.items():
            v3.add_pairs(out.setdefault(name, v3.empty_totals()), n, cost)
        for name, rid in pairs.first.items():
            if name not in self.first or rid < self.first[name]:
                self.first[name] = rid
        return dict(sorted(out.items()))

    def price(self, estimates: dict[str, dict[str, Any]], prices: dict[str, Any]) -> None:
        """Add the estimated amounts (each distinct prompt length priced once, exactly as per row)."""
        for (client, task, tp), n in sorted(self.estimated.items()):
            amount = te.estimated_micro(tp, te.completion_estimate(estimates[task]), prices)
            totals = self.clients[client]
            totals["teacher_cost_estimated_micro_usd"] += n * amount
            totals["teacher_cost_micro_usd"] += n * amount
            totals["saved_micro_usd"] += n * amount


_PAIR_INTS = ("prompt_tokens", "completion_tokens", "status_code")
_PAIR_STRS = ("request_id", "client", "task", "pair_role", "pair_outcome", "served_by", "version")


def _pair_row(raw: dict[str, Any]) -> dict[str, Any]:
    """One pair row as ``pair_leaves`` builds it from the traffic file's values."""
    return _typed_row(raw, _PAIR_INTS, null_ts=True)


def pair_leaves(traffic_file: str | Path, con: Any = None) -> tuple[list[bytes], list[dict[str, Any]]]:
    """The day's pair lines (``receipt.v3``: audit and shadow calls) in tree order, and their rows, in memory:
    the definition ``pair_batches`` streams (kept for tests and small days)."""
    con = con or connect()
    cols = ", ".join(v3.PAIR_LEAF_FIELDS)
    rows: list[dict[str, Any]] = []
    for batch in stream_batches(
        con, f"SELECT {cols} FROM read_parquet({sql_str(str(traffic_file))}) WHERE kind = 'pair'"
    ):
        rows += [_pair_row(row) for row in batch.to_pylist()]
    con.close()
    # Tree order (v3.pair_order): by request_id, then by the line's bytes (UTF-8 sorts as its text).
    keyed = sorted((r["request_id"] or "", canonical_text(r), i) for i, r in enumerate(rows))
    return [text.encode("utf-8") for _, text, _ in keyed], [rows[i] for _, _, i in keyed]


def _pair_parts_sql(traffic_file: str | Path) -> str:
    """Pair rows sorted by request_id (NULL as ''), ``ts``'s canonical JSON text (NULL where Python must
    decide) and whether the row is an audit answer (``v3.is_audit_answer``)."""
    ts = "timezone('UTC', ts)"
    j_ts = (
        f"CASE WHEN ts IS NULL THEN 'null' WHEN year({ts}) BETWEEN 1000 AND 9999 "
        f"THEN '\"' || strftime({ts}, '%Y-%m-%dT%H:%M:%S.%fZ') || '\"' END AS j_ts"
    )
    audit = (
        "coalesce(pair_role = 'audit' AND coalesce(served_by, '') <> 'student' AND coalesce(status_code, 0) = 200 "
        "AND coalesce(completion_tokens, 0) > 0 AND pair_outcome IS NOT NULL AND pair_outcome <> 'error', false)"
    )
    cols = ", ".join(v3.PAIR_LEAF_FIELDS)
    return (
        f"SELECT coalesce(request_id, '') AS sort_key, {cols}, {j_ts}, {audit} AS audit_answer "
        f"FROM read_parquet({sql_str(str(traffic_file))}) WHERE kind = 'pair' ORDER BY sort_key"
    )


def _pair_lines(table: pa.Table) -> pa.Table:
    """One batch of ``_pair_parts_sql`` rows as (sort_key, line, request_id, client, task, audit_answer,
    completion, actual_micro); each line is ``canonical_text`` of the row ``pair_leaves`` gives."""
    j = _field_texts(table, _PAIR_STRS, _PAIR_INTS)
    pieces: list[Any] = []
    for i, name in enumerate(sorted(v3.PAIR_LEAF_FIELDS)):
        pieces += [("{" if i == 0 else ",") + f'"{name}":', j[name]]
    pieces.append("}")
    line = pc.binary_join_element_wise(*pieces, "")
    if line.null_count:
        slow = pc.is_null(line).to_pylist()
        fields = {c: table[c].to_pylist() for c in v3.PAIR_LEAF_FIELDS}
        fixed = line.to_pylist()
        for i, is_slow in enumerate(slow):
            if is_slow:
                fixed[i] = canonical_text(_pair_row({c: fields[c][i] for c in v3.PAIR_LEAF_FIELDS}))
        line = pa.array(fixed, pa.string())
    return pa.table(
        {
            "sort_key": table["sort_key"],
            "line": pc.cast(line, pa.binary()),
            "request_id": table["request_id"],
            "client": pc.cast(table["client"], pa.string()).fill_null("None"),
            "task": pc.cast(table["task"], pa.string()).fill_null("None"),
            "audit_answer": table["audit_answer"],
            "completion": pc.cast(table["completion_tokens"], pa.int64()).fill_null(0),
            "actual_micro": _micro(table["actual_cost_usd"]),
        }
    )


def pair_batches(traffic_file: str | Path, con: Any = None, rows: int = 65_536) -> Iterator[pa.Table]:
    """The day's pair lines in tree order (``pair_leaves``'s), batch by batch, in bounded memory: DuckDB sorts
    the pair rows by request_id (out of core with a budgeted `con`), each batch's lines are sorted by (request_id,
    line bytes), and the rows of a batch's last request_id are held back until the next batch, since its ties may
    continue there. Tables as ``_pair_lines`` gives them."""
    con = con or connect()
    held: pa.Table | None = None
    order = [("sort_key", "ascending"), ("line", "ascending")]
    for batch in stream_batches(con, _pair_parts_sql(traffic_file), rows):
        if not batch.num_rows:
            continue
        table = _pair_lines(pa.Table.from_batches([batch]))
        if held is not None:
            table = pa.concat_tables([held, table])
        table = table.take(pc.sort_indices(table, sort_keys=order))
        keys = table["sort_key"]
        n_last = pc.sum(pc.equal(keys, keys[-1])).as_py()
        held = table.slice(table.num_rows - n_last)
        if table.num_rows > n_last:
            yield table.slice(0, table.num_rows - n_last)
    if held is not None:
        yield held
    con.close()


class _DayPairs:
    """The day's pair lines streamed into ``pairs.jsonl`` under a temporary name beside it (renamed by
    ``publish`` once the ledger says the predicate is the one signed), their RFC 9162 root, and per batch what
    the predicate needs from them: per-client count and cost, per-client least request_id, audit answers."""

    def __init__(self, final: Path) -> None:
        self.final = final
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
        self.tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self.tree = TreeBuilder()
        self.clients: dict[str, tuple[int, int]] = {}
        self.first: dict[str, str] = {}
        self.audits: dict[str, tuple[int, int]] = {}
        self.root, self.size = "", 0

    def add(self, table: pa.Table) -> None:
        lines = table["line"].to_pylist()
        self._file.write(b"".join([b + b"\n" for b in lines]))
        self.tree.add_hashes(b"".join([_sha256(b"\x00" + b).digest() for b in lines]))
        by_client = (
            pa.table({"client": table["client"], "a": table["actual_micro"], "r": table["request_id"]})
            .group_by(["client"])
            .aggregate([("a", "count"), ("a", "sum"), ("r", "min")])
        )
        for g in by_client.to_pylist():
            n, cost = self.clients.get(g["client"], (0, 0))
            self.clients[g["client"]] = (n + int(g["a_count"]), cost + int(g["a_sum"]))
            r = g["r_min"]
            if r is not None and (g["client"] not in self.first or r < self.first[g["client"]]):
                self.first[g["client"]] = r
        ans = pa.table({"task": table["task"], "c": table["completion"]}).filter(table["audit_answer"])
        for g in ans.group_by(["task"]).aggregate([("c", "count"), ("c", "sum")]).to_pylist():
            k, c = self.audits.get(g["task"], (0, 0))
            self.audits[g["task"]] = (k + int(g["c_count"]), c + int(g["c_sum"]))

    def finish(self) -> None:
        """Close the temporary file and the pair tree (``root``: hex, ``size``)."""
        self._file.close()
        self.root, self.size = self.tree.finish().hex(), self.tree.size

    def publish(self) -> None:
        """The temporary file becomes ``pairs.jsonl`` (the same bytes when the day was signed already)."""
        os.replace(self.tmp, self.final)

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.tmp.unlink(missing_ok=True)


def previous_estimates(artifacts_root: str | Path, link: dict[str, str] | None) -> dict[str, dict[str, Any]]:
    """The previous receipt's estimate lines by task ({} for none, or for a format that signs none: v1); its file
    must match the root it signed, else the chain is refused."""
    if link is None:
        return {}
    layout = ArtifactLayout(artifacts_root)
    envelope = json.loads(layout.receipt_envelope(link["day"]).read_bytes())
    statement = parse_statement(base64.b64decode(envelope["payload"]))
    fmt = FORMATS.get(statement.get("predicateType"))
    if fmt is None or fmt.check_estimates is None:
        return {}
    path = layout.receipt_estimates(link["day"])
    leaves = path.read_bytes().splitlines() if path.exists() else []
    try:
        lines = fmt.check_estimates(statement["predicate"], leaves)
    except Exception as exc:
        raise ReceiptConflict(
            f"the previous receipt's estimates ({path}) do not match the root it signed ({exc}); restore the file "
            f"from a backup before signing {link['day']}'s successor"
        ) from None
    return lines


def _jsonl(leaves: list[bytes]) -> bytes:
    return b"".join(leaf + b"\n" for leaf in leaves)


def previous_link(artifacts_root: str | Path, day: str) -> dict[str, str] | None:
    """The latest receipt before ``day`` ({day, digest}), or None for the first receipt."""
    layout = ArtifactLayout(artifacts_root)
    days = [d for d in layout.receipt_days() if d < day]
    if not days:
        return None
    envelope = json.loads(layout.receipt_envelope(days[-1]).read_bytes())
    return {"day": days[-1], "digest": envelope_digest(envelope)}


def build_receipt(
    artifacts_root: str | Path,
    day: str,
    private_key: Any,
    ledger: EffectLedger,
    lease_seconds: float = 300.0,
    teacher_model: str | None = None,
    budget: Budget | int | None = None,
) -> ReceiptResult:
    """Compute, sign (at most once per day) and write the day's receipt; `teacher_model` (default: the settings')
    names the prices the student-served rows are estimated at (``ratchet_core.pricing.model_prices``)."""
    from ratchet_core.pricing import model_prices

    if teacher_model is None:
        from ratchet_core.settings import load_settings

        teacher_model = load_settings().teacher_model
    p = model_prices(teacher_model)
    prices = te.prices_doc(teacher_model, p.input_per_token, p.output_per_token)
    layout = ArtifactLayout(artifacts_root)
    out_dir = layout.receipt_dir(day)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_path = layout.receipt_rows(day)
    writer = ChunkedParquetWriter(
        rows_path,
        ROWS_SCHEMA,
        row_group_size=receipt_store.ROW_GROUP_ROWS,
        compression="zstd",
        write_statistics=["request_id"],
    )
    tree = TreeBuilder(layout.receipt_tree(day), base=receipt_store.TREE_BASE)
    day_totals = _DayTotals()
    traffic = traffic_path(artifacts_root, day)
    # Sorted by request_id out of core, in the memory budget (ratchet_assets.night.budget).
    for table in receipt_leaves(traffic, budget_connect(budget, artifacts_root, f"receipt-{day}")):
        start = tree.size
        tree.add_hashes(
            b"".join([_sha256(b"\x00" + b).digest() for b in table["leaf"].cast(pa.binary()).to_pylist()])
        )
        index = pa.array(range(start, tree.size), pa.int64())
        writer.write(
            pa.table(
                {
                    "index": index,
                    "request_id": table["request_id"],
                    "client": table["client"],
                    "leaf": table["leaf"],
                }
            )
        )
        day_totals.add(table)
    writer.close()
    root_hex = tree.finish().hex()
    size = tree.size
    pairs = _DayPairs(layout.receipt_pairs(day))
    try:
        for table in pair_batches(traffic, budget_connect(budget, artifacts_root, f"receipt-pairs-{day}")):
            pairs.add(table)
        pairs.finish()
        return _sign(
            layout, day, private_key, ledger, lease_seconds, prices, day_totals, pairs, root_hex, size
        )
    finally:
        pairs.discard()


def _sign(
    layout: ArtifactLayout,
    day: str,
    private_key: Any,
    ledger: EffectLedger,
    lease_seconds: float,
    prices: dict[str, Any],
    day_totals: _DayTotals,
    pairs: _DayPairs,
    root_hex: str,
    size: int,
) -> ReceiptResult:
    """The day's client and estimate lines from the request totals and the pairs, the predicate, and its
    signature through the effect ledger (at most once per day); the line files are written only for the
    predicate being signed (or already signed)."""
    link = previous_link(layout.root, day)
    estimate_lines = te.day_estimates(
        day,
        day_totals.answers,
        pairs.audits,
        day_totals.student_tasks(),
        previous_estimates(layout.root, link),
    )
    estimates = {line["task"]: line for line in estimate_lines}
    day_totals.price(estimates, prices)
    clients = day_totals.add_pairs(pairs)
    client_leaves = [
        v3.client_leaf(name, client_salt(day, name, day_totals.first[name]), day_totals.tasks(name), totals)
        for name, totals in clients.items()
    ]
    estimate_leaves = [canonical_json(line) for line in estimate_lines]
    predicate = v3.make_predicate_from_root(
        day, root_hex, size, client_leaves, estimate_leaves, pairs.root, pairs.size, prices, link
    )

    envelope_path = layout.receipt_envelope(day)
    fingerprint = digest(predicate)
    key = f"receipt:{day}"
    public_key = private_key.public_key()

    def probe(_record: EffectRecord) -> dict[str, Any] | None:
        # A holder that vanished may have written the envelope before it could report.
        if not envelope_path.exists():
            return None
        try:
            envelope = json.loads(envelope_path.read_bytes())
            statement = verify_statement(envelope, public_key, v3.PREDICATE_TYPE)
        except Exception:
            return None
        if digest(statement["predicate"]) != fingerprint:
            return None
        return {"envelope": envelope, "digest": envelope_digest(envelope), "root": root_hex}

    begin = ledger.begin(EFFECT_TYPE, key, fingerprint, lease_seconds=lease_seconds, probe=probe)

    def write_lines() -> None:
        # Only for the predicate being signed (or already signed): a refused rerun leaves the signed day's lines.
        atomic_write_bytes(layout.receipt_clients(day), _jsonl(client_leaves))
        atomic_write_bytes(layout.receipt_estimates(day), _jsonl(estimate_leaves))
        pairs.publish()  # streamed under a temporary name beside it

    if begin.outcome == "execute":
        statement = make_statement(v3.PREDICATE_TYPE, predicate, v3.subjects(day, predicate))
        try:
            write_lines()
            envelope = sign_statement(statement, private_key)
            atomic_write_bytes(envelope_path, canonical_json(envelope))
        except Exception as exc:
            ledger.fail(begin.token, f"{exc.__class__.__name__}: {exc}")
            raise
        result = {"envelope": envelope, "digest": envelope_digest(envelope), "root": root_hex}
        ledger.report(begin.token, result)
    elif begin.outcome == "duplicate":
        write_lines()  # the same bytes (same predicate digest); restores deleted files
        assert begin.result is not None
        envelope = begin.result["envelope"]
        data = canonical_json(envelope)
        if not envelope_path.exists() or envelope_path.read_bytes() != data:
            atomic_write_bytes(envelope_path, data)  # restore the one signed envelope
    elif begin.outcome == "denied":
        signed_root = (begin.result or {}).get("root", "?")
        raise ReceiptConflict(
            f"the receipt for {day} is already signed (request root {signed_root}); recomputing it now gives "
            f"root {root_hex} with different totals or chain — the day's traffic changed after signing (a late "
            f"segment?). Ratchet never signs a day twice. Inspect with `ratchet admin effects show {EFFECT_TYPE} "
            f"{key}`; restore the day's segments, or record the late rows in a later day's receipt."
        )
    elif begin.outcome == "in_flight":
        raise ReceiptConflict(
            f"another run is signing the receipt for {day} right now; wait for it (or for its lease to lapse, "
            f"then rerun)"
        )
    else:  # blocked
        raise ReceiptConflict(
            f"signing the receipt for {day} is blocked ({begin.detail}); resolve it with `ratchet admin effects "
            f"resolve {EFFECT_TYPE} {key} done|failed --reason ...` and rerun"
        )
    return ReceiptResult(
        day=day,
        path=str(envelope_path),
        rows_path=str(layout.receipt_rows(day)),
        root=root_hex,
        size=size,
        envelope_digest=envelope_digest(envelope),
        outcome="execute" if begin.outcome == "execute" else "duplicate",
        previous=predicate["previous"],
        totals=v3.sum_totals(clients.values()),
        clients=clients,
        estimates=estimate_lines,
        prices=prices,
    )


def receipt_proof(day: str, request_id: str, artifacts_root: str | Path | None = None) -> dict[str, Any]:
    """Inclusion proof of one request row in the day's receipt: {day, index, size, leaf, proof[hex], root}."""
    if artifacts_root is None:
        from ratchet_core.settings import load_settings

        artifacts_root = load_settings().artifacts_root
    layout = ArtifactLayout(artifacts_root)
    folder, rows_path = layout.receipt_dir(day), layout.receipt_rows(day)
    if not rows_path.exists():
        raise FileNotFoundError(
            f"no receipt rows for {day} at {rows_path}: materialise `daily_receipt` first"
        )
    proof = receipt_store.receipt_proof(folder, day, request_id)
    if proof is None:
        raise KeyError(f"request {request_id} is not in the receipt for {day}")
    return proof


def export_rows_jsonl(artifacts_root: str | Path, day: str, out: str | Path) -> Path:
    """Write the day's leaves as JSON lines (for ``ratchet verify receipt --rows``)."""
    table = pq.read_table(ArtifactLayout(artifacts_root).receipt_rows(day), columns=["leaf"])
    data = "".join(s + "\n" for s in table["leaf"].to_pylist()).encode("utf-8")
    atomic_write_bytes(Path(out), data)
    return Path(out)
