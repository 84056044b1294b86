"""Row schemas shared by the gateway (writer) and the Dagster assets (readers).

The ledger holds one row per event, append-only. ``kind`` says which event:

- ``request``: a client request and the answer it got. Receipts count these rows, and only these.
- ``pair``: the other model's answer to an earlier request, produced off the request path — the teacher's
  answer to an audited student-served request (``pair_role='audit'``) or the student's answer to a
  shadowed teacher-served request (``pair_role='shadow'``). ``request_id`` is the request it pairs with;
  ``pair_outcome`` is ``agree`` | ``disagree`` | ``error`` by the task's comparator.

Sealed segments live at ``<lake>/traffic/day=YYYY-MM-DD/<replica>-<seq>.parquet`` with exactly this schema.
Text columns holding structured values (messages, tools, tool calls, params) hold canonical JSON.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ratchet_stats.receipt import LEAF_FIELDS

SCHEMA_VERSION = 1

SERVED_BY = ("teacher", "student")
STAGES = ("teacher", "shadow", "canary", "live")
KINDS = ("request", "pair")

LEDGER_COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("request_id", pa.string(), "Ratchet's id of the request (x-ratchet-request-id)."),
    ("kind", pa.string(), "request | pair."),
    ("ts", pa.timestamp("us", tz="UTC"), "When the gateway received the request (UTC)."),
    ("day", pa.string(), "UTC day of ts, YYYY-MM-DD: the Dagster partition."),
    ("replica", pa.string(), "Gateway replica (worker process) that wrote the row."),
    ("seq", pa.int64(), "Per-replica sequence number, gap-free, starting at 1."),
    ("client", pa.string(), "API key name of the caller (never the key)."),
    ("task", pa.string(), "metadata.ratchet_task or X-Ratchet-Task; default 'default'."),
    ("model_requested", pa.string(), "Model name the client sent."),
    ("stage", pa.string(), "Release stage of the task when routed: teacher|shadow|canary|live."),
    ("version", pa.string(), "Adapter version that answered or was eligible ('' when none)."),
    ("served_by", pa.string(), "teacher | student: who produced `answer`."),
    ("stream", pa.bool_(), "Whether the client asked for SSE streaming."),
    ("messages", pa.string(), "Canonical JSON of the redacted request messages."),
    ("tools", pa.string(), "Canonical JSON of tools + tool_choice ('' when none)."),
    ("response_format", pa.string(), "Canonical JSON of response_format ('' when none)."),
    (
        "params",
        pa.string(),
        "Canonical JSON of sampling parameters (temperature, top_p, max_tokens, stop, seed).",
    ),
    ("answer", pa.string(), "Redacted assistant content ('' when only tool calls)."),
    ("tool_calls", pa.string(), "Canonical JSON list of tool calls ('' when none)."),
    ("finish_reason", pa.string(), "stop | length | tool_calls | content_filter | error."),
    ("prompt_tokens", pa.int64(), "Usage reported by the model that served."),
    ("completion_tokens", pa.int64(), ""),
    ("reasoning_tokens", pa.int64(), ""),
    ("total_tokens", pa.int64(), ""),
    ("teacher_cost_usd", pa.float64(), "What the teacher would have charged for this request."),
    (
        "actual_cost_usd",
        pa.float64(),
        "What serving it cost (teacher price, or the student's configured price).",
    ),
    ("latency_ms", pa.float64(), "Wall time from request received to response complete."),
    ("upstream_ms", pa.float64(), "Time spent waiting on the model(s) that served."),
    ("overhead_ms", pa.float64(), "Gateway's own time: latency_ms - upstream_ms."),
    ("confidence", pa.float64(), "Student confidence from logprobs (NULL when the student did not answer)."),
    ("threshold", pa.float64(), "Calibrated threshold the confidence was compared to (NULL when none)."),
    (
        "pair_role",
        pa.string(),
        "'' | audit | shadow (on both the request row that has a pair and the pair row).",
    ),
    ("pair_outcome", pa.string(), "On pair rows: agree | disagree | error."),
    ("truncated", pa.bool_(), "A stream that broke before its end; never training data."),
    ("status_code", pa.int32(), "HTTP status returned to the client."),
    ("error_type", pa.string(), "OpenAI error type when the request failed ('' otherwise)."),
    ("error", pa.string(), "Redacted error message, no secrets ('' otherwise)."),
    ("schema_version", pa.int32(), "Version of this schema."),
]

LEDGER_SCHEMA = pa.schema([pa.field(name, typ, nullable=True) for name, typ, _ in LEDGER_COLUMNS])
COLUMN_NAMES = [name for name, _, _ in LEDGER_COLUMNS]

# Fields of a request row a receipt commits to (its Merkle leaves); costs are included so totals are provable.
# Defined once, in the verifier kit, so the auditor's definition is the one the pipeline signs.
RECEIPT_LEAF_FIELDS = LEAF_FIELDS


def duckdb_ddl(table: str = "ledger") -> str:
    """CREATE TABLE statement for the gateway's DuckDB ledger with the same columns as LEDGER_SCHEMA."""
    types = {
        pa.string(): "VARCHAR",
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
    }
    cols = ",\n  ".join(f"{name} {types[typ]}" for name, typ, _ in LEDGER_COLUMNS)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols}\n)"


def empty_row(**values: Any) -> dict[str, Any]:
    """A row with every column present (defaults: '' for text, 0 for counts, NULL otherwise)."""
    row: dict[str, Any] = {}
    for name, typ, _ in LEDGER_COLUMNS:
        if typ == pa.string():
            row[name] = ""
        elif typ in (pa.int64(), pa.int32()):
            row[name] = 0
        elif typ == pa.bool_():
            row[name] = False
        else:
            row[name] = None
    row["schema_version"] = SCHEMA_VERSION
    unknown = set(values) - set(row)
    if unknown:
        raise KeyError(f"not ledger columns: {sorted(unknown)}")
    row.update(values)
    return row


def segment_relpath(day: str, replica: str, seq: int) -> str:
    """Lake-relative path of a sealed segment: traffic/day=YYYY-MM-DD/<replica>-<seq:08d>.parquet."""
    return f"traffic/day={day}/{replica}-{seq:08d}.parquet"
