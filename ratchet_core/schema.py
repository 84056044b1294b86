"""The ledger row: its schema and its only builders, shared by the gateway (writer) and the night (readers).

Every ledger row is built here: :func:`request_row` and :func:`pair_row` (every column, defaults filled, column
names checked) for the gateway, the simulator, fixtures and tests; :func:`request_table` / :func:`pair_table`, their
columnar forms, for benchmarks that synthesise millions of rows.

The ledger holds one row per event, append-only. ``kind`` says which event:

- ``request``: a client request and the answer it got. Receipts count these rows, and only these.
- ``pair``: the other model's answer to an earlier request, produced off the request path — the teacher's
  answer to an audited student-served request (``pair_role='audit'``) or the student's answer to a
  shadowed teacher-served request (``pair_role='shadow'``), or the candidate's answer to a request the live
  version served, compared with live's answer (``pair_role='mirror'``: free evidence, issue 35; read only by the
  release sensor), or, where that candidate answer differed from live's and the request fell in the targeted
  audit stream, the teacher's answer compared with the candidate's (``pair_role='targeted'``, after the mirror
  row; read only by the release sensor). ``request_id`` is the request it pairs with; ``pair_outcome`` is ``agree`` | ``disagree`` |
  ``error`` by the task's comparator.

Sealed segments live at ``<lake>/traffic/day=YYYY-MM-DD/<replica>-<seq>.parquet`` with exactly this schema (the
names are built and parsed by ``ratchet_core.lake``, which also reads and publishes them).
Text columns holding structured values (messages, tools, tool calls, params) hold canonical JSON.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ratchet_stats.receipt.v2 import LEAF_FIELDS as LEAF_FIELDS_V2

SCHEMA_VERSION = 6

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
    ("prompt_tokens", pa.int64(), "Usage of the model that served, as reported or counted (usage_source)."),
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
    # Added in schema version 2 (last, so an older ledger file gains it with ADD COLUMN: see ADDED_COLUMNS).
    (
        "teacher_prompt_tokens",
        pa.int64(),
        "The prompt counted as the teacher bills it: the teacher's own usage when it served, else "
        "litellm.token_counter for the teacher model (ratchet_core.pricing); receipts price student-served rows "
        "with it (ratchet_stats.teacher_equivalent). 0 when unknown.",
    ),
    # Added in schema version 3.
    (
        "contract_violation",
        pa.string(),
        "Kind of the answer-contract violation (ratchet_core.contract.VIOLATION_KINDS) of a student answer that "
        "was confident but broke its request's contract, so the teacher answered instead (request rows), or "
        "would have (shadow pair rows); '' otherwise.",
    ),
    # Added in schema version 4.
    (
        "api",
        pa.string(),
        "The API the request came in through: chat.completions | responses | messages | embeddings (API_NAMES). "
        "A responses or messages request is stored as its chat translation (messages, tools, response_format, "
        "params as POST /v1/chat/completions would carry them) and its answer as a chat message; an embeddings "
        "row stores no content and is never an example. NULL in segments sealed before version 4 (all chat).",
    ),
    # Added in schema version 5.
    (
        "episode",
        pa.string(),
        "metadata.ratchet_episode: the client's own id grouping its requests into one episode (feedback may "
        "name it, ratchet_core.feedback); '' when none, NULL in segments sealed before version 5.",
    ),
    # Added in schema version 6.
    (
        "usage_source",
        pa.string(),
        "Where the row's token counts come from (USAGE_SOURCES): 'reported' by the model that served (its usage "
        "object), or 'counted' by Ratchet with the teacher's tokenizer (ratchet_core.pricing) when that model "
        "reported none: a stream the client abandoned or that broke before the usage chunk (the prompt plus the "
        "completion tokens received so far), or an upstream that sends no usage. Costs are priced from the "
        "counts either way. NULL in segments sealed before version 6.",
    ),
]
# Columns added after version 1, with the version that added them (older rows and ledger files lack them).
ADDED_COLUMNS = {
    "teacher_prompt_tokens": 2,
    "contract_violation": 3,
    "api": 4,
    "episode": 5,
    "usage_source": 6,
}
# The values of ``api`` (ratchet_gateway.chat.formats and ratchet_gateway.apis name them).
API_NAMES = ("chat.completions", "responses", "messages", "embeddings")
# The values of ``usage_source``: the serving model's report, or Ratchet's own count (the column's description).
USAGE_SOURCES = ("reported", "counted")

# What a row says (the prompt, the answer and what the client sent with them): an erasure blanks these to '' and
# keeps every other column, so the row's receipt leaf (RECEIPT_LEAF_FIELDS, none of these) and hash stay
# (ratchet_assets.governance.erase).
CONTENT_COLUMNS = ("messages", "tools", "response_format", "params", "answer", "tool_calls", "error")

LEDGER_SCHEMA = pa.schema([pa.field(name, typ, nullable=True) for name, typ, _ in LEDGER_COLUMNS])
COLUMN_NAMES = [name for name, _, _ in LEDGER_COLUMNS]

# Fields of a request row a receipt commits to (its Merkle leaves); costs and the teacher-tokenizer prompt are
# included so totals are provable. Defined once, in the verifier kit, so the auditor's definition is the one the
# pipeline signs (receipt v2).
RECEIPT_LEAF_FIELDS = LEAF_FIELDS_V2


_DUCKDB_TYPES = {
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
}


def duckdb_type(column: str) -> str:
    """The DuckDB type of a ledger column (e.g. for a NULL of an added column an older segment lacks)."""
    return _DUCKDB_TYPES[LEDGER_SCHEMA.field(column).type]


def duckdb_ddl(table: str = "ledger") -> str:
    """CREATE TABLE statement for the gateway's DuckDB ledger with the same columns as LEDGER_SCHEMA, followed by
    ``ADD COLUMN IF NOT EXISTS`` for each of ``ADDED_COLUMNS`` so a ledger file made by an older version gains them
    (in schema order: they are the last columns, and rows are inserted by position)."""
    types = _DUCKDB_TYPES
    cols = ",\n  ".join(f"{name} {types[typ]}" for name, typ, _ in LEDGER_COLUMNS)
    added = "".join(
        f";\nALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {types[typ]}"
        for name, typ, _ in LEDGER_COLUMNS
        if name in ADDED_COLUMNS
    )
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols}\n){added}"


PAIR_ROLES = ("audit", "shadow", "mirror", "targeted")
PAIR_OUTCOMES = ("agree", "disagree", "error")

_COLUMN_SET = frozenset(COLUMN_NAMES)


def _default(typ: pa.DataType) -> Any:
    """A column's default: '' for text, 0 for counts, False for flags, NULL otherwise (ts, costs, scores)."""
    if typ == pa.string():
        return ""
    if typ in (pa.int64(), pa.int32()):
        return 0
    if typ == pa.bool_():
        return False
    return None


# Every column with its default, in schema order; copied per row (building it per call costs ~50 us, a copy ~1 us:
# the gateway builds one per request on the hot path).
_DEFAULTS: dict[str, Any] = {name: _default(typ) for name, typ, _ in LEDGER_COLUMNS}
_DEFAULTS["schema_version"] = SCHEMA_VERSION
_DEFAULTS["usage_source"] = (
    "reported"  # every builder's rows carry the model's usage unless the gateway counted
)


def _row(kind: str, values: dict[str, Any]) -> dict[str, Any]:
    # a subset test builds no set (the gateway builds a row per request); the difference only to name the culprits
    if not _COLUMN_SET.issuperset(values):
        raise KeyError(f"not ledger columns: {sorted(values.keys() - _COLUMN_SET)}")
    if "kind" in values:
        raise KeyError(f"'kind' is set by {kind}_row itself; do not pass it")
    row = dict(_DEFAULTS)
    row.update(values)
    row["kind"] = kind
    return row


def request_row(**values: Any) -> dict[str, Any]:
    """A ``request`` ledger row: every column, ``values`` over the defaults ('' text, 0 counts, NULL others).

    The one builder of request rows (gateway, simulator, fixtures, tests); unknown column names raise KeyError.
    ``seq`` and ``replica`` are assigned by the ledger when the gateway appends the row.
    """
    return _row("request", values)


def pair_row(*, pair_role: str, pair_outcome: str, **values: Any) -> dict[str, Any]:
    """A ``pair`` ledger row: the other model's answer to request ``request_id`` (module docstring).

    ``pair_role`` is audit | shadow | mirror and ``pair_outcome`` agree | disagree | error (ValueError otherwise); the
    other columns as :func:`request_row`.
    """
    if pair_role not in PAIR_ROLES:
        raise ValueError(f"pair_role must be one of {PAIR_ROLES}, not {pair_role!r}")
    if pair_outcome not in PAIR_OUTCOMES:
        raise ValueError(f"pair_outcome must be one of {PAIR_OUTCOMES}, not {pair_outcome!r}")
    return _row("pair", {**values, "pair_role": pair_role, "pair_outcome": pair_outcome})


def _table(kind: str, n: int, columns: dict[str, Any]) -> pa.Table:
    unknown = columns.keys() - _COLUMN_SET
    if unknown:
        raise KeyError(f"not ledger columns: {sorted(unknown)}")
    if "kind" in columns:
        raise KeyError(f"'kind' is set by {kind}_table itself; do not pass it")
    arrays = []
    for name, typ, _ in LEDGER_COLUMNS:
        if name == "kind":
            value: Any = pa.repeat(pa.scalar(kind, typ), n)
        elif name in columns:
            value = columns[name]
            value = value.cast(typ) if isinstance(value, pa.Array | pa.ChunkedArray) else pa.array(value, typ)
        else:
            value = pa.repeat(pa.scalar(_DEFAULTS[name], typ), n)
        if len(value) != n:
            raise ValueError(f"column {name} has {len(value)} values, not {n}")
        arrays.append(value)
    return pa.Table.from_arrays(arrays, schema=LEDGER_SCHEMA)


def request_table(n: int, **columns: Any) -> pa.Table:
    """``n`` request rows as an Arrow table with LEDGER_SCHEMA: the columnar :func:`request_row` (benchmarks).

    ``columns`` are arrays (or sequences) of n values; absent columns get :func:`request_row`'s defaults.
    """
    return _table("request", n, columns)


def pair_table(n: int, **columns: Any) -> pa.Table:
    """``n`` pair rows as an Arrow table: the columnar :func:`pair_row` (``pair_role``/``pair_outcome`` required
    and checked)."""
    for name, allowed in (("pair_role", PAIR_ROLES), ("pair_outcome", PAIR_OUTCOMES)):
        if name not in columns:
            raise KeyError(f"pair_table needs column {name}")
        bad = set(pa.array(columns[name], pa.string()).to_pylist()) - set(allowed)
        if bad:
            raise ValueError(f"{name} must be one of {allowed}, not {sorted(map(str, bad))}")
    return _table("pair", n, columns)
