"""The ``examples`` step: the day's teacher-labelled examples, one per example key.

A teacher label is a complete teacher answer:

- a ``request`` row served by the teacher with HTTP 200, ``finish_reason`` not ``length``/``error``/
  ``content_filter``, not truncated, no error; or
- a ``pair`` row with ``pair_role='audit'`` (the teacher's answer to a student-served request) whose outcome is
  not ``error`` under the same conditions; its request fields come from the request row when the pair row
  leaves them empty.

Rows are keyed by ``ratchet_core.example_key`` over (task, redacted messages, tools, response_format); the
earliest answer (ts, request_id) wins a key. Erased keys and request ids are left out.
Output ``examples/day=D/examples.parquet`` sorted by key, with canonical JSON text columns ``messages``,
``tools``, ``response_format`` (``null`` when absent) and ``answer`` (the assistant message).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ratchet_assets.night import (
    ChunkedParquetWriter,
    canonical_fixups,
    canonical_json_text,
    canonical_text,
    loads_strict,
    sql_list,
    sql_str,
    stream_batches,
)
from ratchet_assets.night.budget import Budget, resolve, run_shards, shard_sql
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.traffic import traffic_path
from ratchet_core.example_key import split_tools_column
from ratchet_core.layout import ArtifactLayout
from ratchet_stats.canonical import sha256_hex

EXAMPLES_SCHEMA = pa.schema(
    [
        ("example_key", pa.string()),
        ("task", pa.string()),
        ("day", pa.string()),
        ("request_id", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("source", pa.string()),
        ("messages", pa.string()),
        ("tools", pa.string()),
        ("response_format", pa.string()),
        ("answer", pa.string()),
    ]
)

_COMPLETE = """status_code = 200 AND NOT coalesce(truncated, false) AND coalesce(error, '') = ''
  AND finish_reason NOT IN ('length', 'error', 'content_filter')"""

CANDIDATES_SQL = f"""
SELECT request_id, ts, task, messages, tools, response_format, answer, tool_calls, 'request' AS source,
       file_row_number AS _row, NULL::BIGINT AS _row2
FROM t WHERE kind = 'request' AND served_by = 'teacher' AND messages <> '' AND {_COMPLETE}
UNION ALL
SELECT p.request_id, p.ts,
       coalesce(nullif(p.task, ''), r.task) AS task,
       coalesce(nullif(p.messages, ''), r.messages) AS messages,
       CASE WHEN p.messages <> '' THEN p.tools ELSE coalesce(r.tools, '') END AS tools,
       CASE WHEN p.messages <> '' THEN p.response_format ELSE coalesce(r.response_format, '') END
         AS response_format,
       p.answer, p.tool_calls, 'audit' AS source, p.file_row_number AS _row, r.file_row_number AS _row2
FROM (SELECT * FROM t WHERE kind = 'pair' AND pair_role = 'audit' AND pair_outcome <> 'error'
        AND NOT coalesce(truncated, false) AND coalesce(error, '') = ''
        AND finish_reason NOT IN ('length', 'error', 'content_filter')
        AND status_code IN (0, 200)) p
LEFT JOIN (SELECT * FROM t WHERE kind = 'request') r USING (request_id)
WHERE coalesce(nullif(p.messages, ''), r.messages, '') <> ''
"""


@dataclass
class ExamplesResult:
    day: str
    path: str
    examples: int
    candidates: int
    duplicates: int
    erased: int
    by_task: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)
    worker_peak_rss_mb: float = 0.0  # the key-range workers' largest peak RSS (0: no worker processes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Keyer:
    """Example keys for ledger rows, memoising the few distinct tools / response_format / answer texts."""

    def __init__(self) -> None:
        self._tools: dict[str, str] = {}
        self._rf: dict[str, str] = {}
        self._task: dict[str, str] = {}

    def tools(self, text: str) -> str:
        if text not in self._tools:
            self._tools[text] = canonical_text(split_tools_column(text)[0])
        return self._tools[text]

    def rf(self, text: str) -> str:
        if text not in self._rf:
            self._rf[text] = canonical_text((loads_strict(text) if text else None) or None)
        return self._rf[text]

    def parts(self, task: str, messages: str, tools: str, response_format: str) -> tuple[str, str, str, str]:
        """(example key, canonical messages, canonical tools or 'null', canonical response_format or 'null').

        The key document is assembled from canonical parts in sorted key order (messages < response_format <
        task < tools): the same bytes as ``ratchet_core.example_key.key_document`` (the ledger's messages are
        already redacted).
        """
        c_msgs = canonical_text(loads_strict(messages))
        c_tools, c_rf = self.tools(tools), self.rf(response_format)
        c_task = self._task.get(task) or self._task.setdefault(task, canonical_text(task))
        doc = f'{{"messages":{c_msgs},"response_format":{c_rf},"task":{c_task},"tools":{c_tools}}}'
        return sha256_hex(doc.encode("utf-8")), c_msgs, c_tools, c_rf


def key_parts(task: str, messages: str, tools: str, response_format: str) -> tuple[str, str, str, str]:
    """``_Keyer().parts`` for one row."""
    return _Keyer().parts(task, messages, tools, response_format)


def assistant_message(answer: str, tool_calls: str) -> str:
    """Canonical JSON of the assistant message a ledger row's answer columns describe."""
    calls = loads_strict(tool_calls) if tool_calls else None
    return canonical_text({"role": "assistant", "content": answer or None, "tool_calls": calls or None})


def _register_small_columns(con: duckdb.DuckDBPyConnection, keyer: _Keyer) -> None:
    """Register ``tools_c``, ``rf_c``, ``task_c`` (raw, c): the canonical part of each distinct value (few)."""
    combos = con.execute("SELECT DISTINCT task, tools, response_format FROM cand").fetchall()
    for name, i, fn in (
        ("task_c", 0, canonical_text),
        ("tools_c", 1, lambda v: keyer.tools(v or "")),
        ("rf_c", 2, lambda v: keyer.rf(v or "")),
    ):
        values = sorted({c[i] for c in combos}, key=lambda v: (v is None, v or ""))
        con.register(name, pa.table({"raw": pa.array(values, pa.string()), "c": [fn(v) for v in values]}))


def _answers(answer: list[str | None], tool_calls: list[str | None]) -> list[str]:
    """``assistant_message`` per row, with tool calls taken through the fast canonical check."""
    out = []
    for a, tc in zip(answer, tool_calls, strict=True):
        calls = "null"
        if tc:
            fixed = canonical_json_text(tc.encode("utf-8"))
            calls = tc if fixed is None else fixed
            if not calls.startswith("[") or calls == "[]":  # falsy or not a list: the definition decides
                out.append(assistant_message(a, tc))
                continue
        content = encode_basestring(a) if a else "null"
        out.append(f'{{"content":{content},"role":"assistant","tool_calls":{calls}}}')
    return out


def _sorted_counts(counts: dict[Any, int]) -> dict[Any, int]:
    """Counts ordered as SQL ``ORDER BY`` orders them (NULLs last)."""
    return dict(sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))


KEY_DOC_SQL = """'{"messages":' || c_messages || ',"response_format":' || c_rf || ',"task":' || c_task
  || ',"tools":' || c_tools || '}'"""


def build_examples(
    artifacts_root: str | Path,
    day: str,
    erasures: Erasures | None = None,
    budget: Budget | int | None = None,
) -> ExamplesResult:
    """Extract the day's examples from ``traffic/day=D/traffic.parquet`` into ``examples/day=D``.

    Set-wise: DuckDB assembles each candidate's key document from canonical parts and hashes it (the bytes of
    ``ratchet_core.example_key.key_document``: the ledger's texts are checked to be canonical JSON, and the few
    that are not are replaced by their canonical form, computed by the Python definition), deduplicates and
    sorts; rows stream to Parquet in row groups.

    In a memory budget (`budget`, ``ratchet_assets.night.budget``): a day with more winners than one key range
    holds (``Budget.shards_for``) is split by example-key range: ``prepare_examples`` writes the winners' rows
    into one file set per range, ``examples_shard`` sorts and finishes one range (in ``Budget.workers``
    processes at once; the Dagster asset maps them as dynamic outputs), ``merge_examples`` concatenates the ranges
    in key order. The file is the same bytes either way (the writer's row groups do not depend on its input).
    """
    b = resolve(budget)
    plan = prepare_examples(artifacts_root, day, erasures, b)
    if plan.direct is not None:
        return plan.direct
    parts = run_shards(examples_shard, plan, b)
    return merge_examples(plan, parts)


@dataclass
class ExamplesPlan:
    """What ``prepare_examples`` left for the key-range shards (``work``: their input files)."""

    artifacts_root: str
    day: str
    shards: int
    work: str
    candidates: int
    erased: int
    direct: ExamplesResult | None = None  # set when the day fitted one range and was written directly
    peak_rss_mb: float = 0.0  # set by whoever measures it (the Dagster op)


@dataclass
class ExamplesPart:
    """One key range's finished rows (``path``) and their counts."""

    shard: int
    path: str
    rows: int
    by_task: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)
    peak_rss_mb: float = 0.0


_WINNER_ROWS_SQL = """
SELECT w.example_key, c.task, {day} AS day, c.request_id, c.ts, c.source,
       coalesce(f.canonical, c.messages) AS messages, tl.c AS tools, rf.c AS response_format,
       c.answer, c.tool_calls{extra}
FROM winners w JOIN cand c
  ON c.source = w.source AND c._row = w._row AND c._row2 IS NOT DISTINCT FROM w._row2
LEFT JOIN msg_fix f ON f.raw = c.messages
LEFT JOIN tools_c tl ON tl.raw IS NOT DISTINCT FROM c.tools
LEFT JOIN rf_c rf ON rf.raw IS NOT DISTINCT FROM c.response_format
"""


def prepare_examples(
    artifacts_root: str | Path, day: str, erasures: Erasures | None = None, budget: Budget | int | None = None
) -> ExamplesPlan:
    """Key every candidate and pick each key's winner (out of core); then either write the examples directly (one
    key range) or write the winners' rows into ``shards`` key-range file sets for ``examples_shard``."""
    b = resolve(budget)
    erasures = erasures or Erasures()
    con = budget_connect(b, artifacts_root, f"examples-{day}")
    con.execute(
        f"CREATE TEMP VIEW t AS SELECT * FROM read_parquet({sql_str(str(traffic_path(artifacts_root, day)))}, file_row_number = true)"
    )
    con.execute(f"CREATE TEMP VIEW cand AS {CANDIDATES_SQL}")
    keyer = _Keyer()
    _register_small_columns(con, keyer)
    con.register("msg_fix", canonical_fixups(con, "SELECT messages AS text FROM cand"))
    con.register("erased_keys", pa.table({"k": pa.array(sorted(erasures.example_keys), pa.string())}))
    con.register("erased_ids", pa.table({"r": pa.array(sorted(erasures.request_ids), pa.string())}))
    # Narrow pass: every candidate's key and erasure flag (the wide columns are read again only for winners).
    con.execute(
        f"""
        CREATE TEMP TABLE keyed AS
        SELECT sha256({KEY_DOC_SQL}) AS example_key, request_id, ts, source, _row, _row2
        FROM (
          SELECT c.request_id, c.ts, c.source, c._row, c._row2,
                 coalesce(f.canonical, c.messages) AS c_messages, tl.c AS c_tools, rf.c AS c_rf, tk.c AS c_task
          FROM cand c
          LEFT JOIN msg_fix f ON f.raw = c.messages
          LEFT JOIN tools_c tl ON tl.raw IS NOT DISTINCT FROM c.tools
          LEFT JOIN rf_c rf ON rf.raw IS NOT DISTINCT FROM c.response_format
          LEFT JOIN task_c tk ON tk.raw IS NOT DISTINCT FROM c.task
        )
        """
    )
    candidates, erased = con.execute(
        """
        SELECT count(*), count(*) FILTER (WHERE example_key IN (SELECT k FROM erased_keys)
                                          OR request_id IN (SELECT r FROM erased_ids))
        FROM keyed
        """
    ).fetchall()[0]
    con.execute(
        """
        CREATE TEMP TABLE winners AS
        SELECT example_key, source, _row, _row2 FROM (
          SELECT *, row_number() OVER (PARTITION BY example_key ORDER BY ts, request_id, source) AS rn
          FROM keyed
          WHERE example_key NOT IN (SELECT k FROM erased_keys) AND request_id NOT IN (SELECT r FROM erased_ids)
        ) WHERE rn = 1
        """
    )
    con.execute("DROP TABLE keyed")
    shards = b.shards_for(con.execute("SELECT count(*) FROM winners").fetchall()[0][0])
    work = ArtifactLayout(artifacts_root).examples_file(day).parent / ".shards"
    plan = ExamplesPlan(str(artifacts_root), day, shards, str(work), int(candidates), int(erased))
    if shards == 1:
        rows = stream_batches(
            con, _WINNER_ROWS_SQL.format(day=sql_str(day), extra="") + " ORDER BY w.example_key"
        )
        part = _finish_rows(rows, ArtifactLayout(artifacts_root).examples_file(day), 0, ChunkedParquetWriter)
        con.close()
        plan.direct = _result(plan, part.path, part.rows, part.by_task, part.by_source)
        return plan
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # One pass over the wide rows, each to its key range's files (small row groups: one open writer per range).
    con.execute(
        f"""COPY ({_WINNER_ROWS_SQL.format(day=sql_str(day), extra=", " + shard_sql("w.example_key", shards))})
        TO {sql_str(str(work / "rows"))} (FORMAT parquet, PARTITION_BY (shard), ROW_GROUP_SIZE 8192)"""
    )
    con.close()
    return plan


def examples_shard(plan: ExamplesPlan, shard: int, budget: Budget | int | None = None) -> ExamplesPart:
    """Sort one key range's rows by key and finish them (the assistant message); write them to a part file."""
    work = Path(plan.work)
    out = work / f"part-{shard:04d}.parquet"
    files = sorted((work / "rows" / f"shard={shard}").glob("*.parquet"))
    if not files:
        return ExamplesPart(shard, "", 0)
    con = budget_connect(budget, plan.artifacts_root, f"examples-{plan.day}-{shard}")
    rows = stream_batches(
        con,
        f"SELECT * FROM read_parquet({sql_list(files)}, hive_partitioning = false) ORDER BY example_key",
    )
    part = _finish_rows(rows, out, shard, _PartWriter)
    con.close()
    return part


def merge_examples(plan: ExamplesPlan, parts: list[ExamplesPart]) -> ExamplesResult:
    """Concatenate the key ranges' parts, in key order, into the day's examples file; remove the work files."""
    import pyarrow.parquet as pq

    out = ArtifactLayout(plan.artifacts_root).examples_file(plan.day)
    writer = ChunkedParquetWriter(out, EXAMPLES_SCHEMA, compression="zstd")
    by_task: dict[str, int] = {}
    by_source: dict[str, int] = {}
    for part in sorted(parts, key=lambda p: p.shard):
        for counts, add in ((by_task, part.by_task), (by_source, part.by_source)):
            for k, v in add.items():
                counts[k] = counts.get(k, 0) + v
        if part.path:
            for batch in pq.ParquetFile(part.path).iter_batches(batch_size=65_536):
                writer.write(batch)
    writer.close()
    shutil.rmtree(plan.work, ignore_errors=True)
    result = _result(plan, str(out), writer.rows, by_task, by_source)
    result.worker_peak_rss_mb = max([0.0, *(p.peak_rss_mb for p in parts)])
    return result


def _result(plan: ExamplesPlan, path: str, n: int, by_task: dict, by_source: dict) -> ExamplesResult:
    return ExamplesResult(
        day=plan.day,
        path=str(path),
        examples=n,
        candidates=plan.candidates,
        duplicates=plan.candidates - plan.erased - n,
        erased=plan.erased,
        by_task=_sorted_counts(by_task),
        by_source=_sorted_counts(by_source),
    )


class _PartWriter:
    """A part file: plain Parquet, row groups as they come (the merge re-chunks them)."""

    def __init__(self, path: Path, schema: pa.Schema, **_: Any) -> None:
        import pyarrow.parquet as pq

        self.path, self.schema, self.rows = path, schema, 0
        self._writer = pq.ParquetWriter(path, schema, compression="lz4")

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table.select(self.schema.names).cast(self.schema))
        self.rows += table.num_rows

    def close(self) -> None:
        self._writer.close()


def _finish_rows(rows: Any, out: Path, shard: int, writer_cls: Any) -> ExamplesPart:
    """Assistant messages for sorted winner rows, written with `writer_cls`; counts by task and source."""
    writer = writer_cls(out, EXAMPLES_SCHEMA, compression="zstd")
    by_task: dict[str, int] = {}
    by_source: dict[str, int] = {}
    for batch in rows:
        answers = _answers(batch.column("answer").to_pylist(), batch.column("tool_calls").to_pylist())
        table = pa.Table.from_batches([batch]).drop_columns(["answer", "tool_calls"])
        table = table.append_column("answer", pa.array(answers, pa.string()))
        for counts, column in ((by_task, "task"), (by_source, "source")):
            for item in pc.value_counts(table[column]).to_pylist():
                counts[item["values"]] = counts.get(item["values"], 0) + int(item["counts"])
        writer.write(table)
    writer.close()
    return ExamplesPart(shard, str(out), writer.rows, by_task, by_source)


def examples_path(artifacts_root: str | Path, day: str) -> Path:
    path = ArtifactLayout(artifacts_root).examples_file(day)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: materialise `examples` for {day} first")
    return path
