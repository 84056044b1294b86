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

import dataclasses
import hashlib
import shutil
from collections.abc import Generator, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ratchet_assets.night import (
    ChunkedParquetWriter,
    all_canonical,
    canonical_fixups,
    canonical_json_text,
    canonical_text,
    fast_check_sql,
    sql_str,
)
from ratchet_assets.night.budget import Budget, iter_shards, resolve, shard_of
from ratchet_assets.night.budget import connect as budget_connect
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.ranges import prefetched_chunks
from ratchet_assets.night.traffic import traffic_path
from ratchet_core.example_key import split_tools_column
from ratchet_core.layout import ArtifactLayout
from ratchet_stats.canonical import loads_strict, sha256_hex

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

# A teacher asked for a json_schema answer with ``json_object`` and the schema in its system message (``ratchet
# doctor teacher --apply``) may answer outside the schema; the gateway notes that in the row's params
# (``ratchet_teacher_schema.violation``, ratchet_gateway/chat/rows.py) and such an answer is never a label. The LIKE
# keeps the JSON read off every other row.
_TEACHER_IN_SCHEMA = """(coalesce(params, '') NOT LIKE '%"ratchet_teacher_schema"%'
  OR coalesce(json_extract_string(params, '$.ratchet_teacher_schema.violation'), '') = '')"""

_AUDIT_PAIR = """kind = 'pair' AND pair_role = 'audit' AND pair_outcome <> 'error'
  AND NOT coalesce(truncated, false) AND coalesce(error, '') = ''
  AND finish_reason NOT IN ('length', 'error', 'content_filter') AND status_code IN (0, 200)"""

# Narrow: each qualifying audit pair (file row) with its request row(s) (LEFT JOIN: none gives one NULL row), the
# request's task, and whether the pair left its messages empty (then its request fields come from the request).
LINK_SQL = f"""
SELECT p._row, p.empty, r._row AS _row2, r.task AS r_task
FROM (SELECT request_id, file_row_number AS _row, coalesce(messages, '') = '' AS empty FROM t WHERE {_AUDIT_PAIR}) p
LEFT JOIN (SELECT request_id, file_row_number AS _row, task FROM t WHERE kind = 'request') r USING (request_id)
"""

# Every teacher answer: complete teacher-served requests, and audit pairs (through the narrow link, so the wide
# request rows are never joined unless a pair left its messages empty: ``_FROM_REQUEST``).
CANDIDATES_SQL = f"""
SELECT request_id, ts, task, messages, tools, response_format, answer, tool_calls, 'request' AS source,
       file_row_number AS _row, NULL::BIGINT AS _row2
FROM t WHERE kind = 'request' AND served_by = 'teacher' AND messages <> '' AND {_COMPLETE}
  AND {_TEACHER_IN_SCHEMA}
UNION ALL
SELECT p.request_id, p.ts, coalesce(nullif(p.task, ''), l.r_task) AS task, p.messages, p.tools,
       p.response_format, p.answer, p.tool_calls, 'audit' AS source, p.file_row_number AS _row, l._row2
FROM (SELECT * FROM t WHERE {_AUDIT_PAIR} AND messages <> '') p
JOIN plink l ON l._row = p.file_row_number
"""

_FROM_REQUEST = f"""
UNION ALL
SELECT p.request_id, p.ts, coalesce(nullif(p.task, ''), l.r_task) AS task, r.messages,
       coalesce(r.tools, '') AS tools, coalesce(r.response_format, '') AS response_format,
       p.answer, p.tool_calls, 'audit' AS source, p.file_row_number AS _row, l._row2
FROM (SELECT * FROM t WHERE {_AUDIT_PAIR} AND coalesce(messages, '') = '') p
JOIN plink l ON l._row = p.file_row_number
JOIN (SELECT file_row_number AS _row2, messages, tools, response_format FROM t
      WHERE kind = 'request' AND messages <> '' AND file_row_number IN (SELECT _row2 FROM plink WHERE empty)) r
  USING (_row2)
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
    key_ranges: int = 1

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


def _register_small_columns(con: duckdb.DuckDBPyConnection, keyer: _Keyer) -> tuple[list[bytes], pa.Table]:
    """Register ``small_c``: each distinct (task, tools, response_format) of the candidates (few), numbered
    (``combo``). Return each combo's key document after the messages (``_key_batch``) and the columns an
    example row takes from its combo: ``task`` (as written), ``tools`` and ``response_format`` (canonical key
    parts). Candidate rows carry only the combo number until they are written."""
    combos = con.execute("SELECT DISTINCT task, tools, response_format FROM cand").fetchall()
    combos.sort(key=lambda c: tuple((v is None, v or "") for v in c))
    task = pa.array([c[0] for c in combos], pa.string())
    c_task = [canonical_text(c[0]) for c in combos]
    c_tools = [keyer.tools(c[1] or "") for c in combos]
    c_rf = [keyer.rf(c[2] or "") for c in combos]
    con.register(
        "small_c",
        pa.table(
            {
                "combo": pa.array(range(len(combos)), pa.int32()),
                "task": task,
                "tools": pa.array([c[1] for c in combos], pa.string()),
                "response_format": pa.array([c[2] for c in combos], pa.string()),
            }
        ),
    )
    suffixes = [
        f',"response_format":{rf},"task":{task},"tools":{tools}}}'.encode()
        for task, tools, rf in zip(c_task, c_tools, c_rf, strict=True)
    ]
    parts = pa.table(
        {
            "task": task,
            "tools": pa.array(c_tools, pa.string()),
            "response_format": pa.array(c_rf, pa.string()),
        }
    )
    return suffixes, parts


def _answers(
    answer: list[str | None], tool_calls: list[str | None], screened: list[bool] | None = None
) -> list[str]:
    """``assistant_message`` per row, with tool calls taken through the fast canonical check: all at once
    (``all_canonical``) for the texts DuckDB screened (``tc_screened``: one JSON document, fast-path safe),
    else one by one."""
    canonical = [False] * len(tool_calls)
    if screened is not None:
        bulk = [i for i, ok in enumerate(screened) if ok and tool_calls[i]]
        if all_canonical([tool_calls[i].encode("utf-8") for i in bulk]):  # type: ignore[union-attr]
            for i in bulk:
                canonical[i] = True
    out = []
    for a, tc, known in zip(answer, tool_calls, canonical, strict=True):
        calls = "null"
        if tc:
            if known:
                calls = tc
            else:
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


def build_examples(
    artifacts_root: str | Path,
    day: str,
    erasures: Erasures | None = None,
    budget: Budget | int | None = None,
) -> ExamplesResult:
    """Extract the day's examples from ``traffic/day=D/traffic.parquet`` into ``examples/day=D``.

    One pass over the wide rows: DuckDB reads the candidates and each one's key document is hashed with
    ``hashlib`` from its messages and the canonical tail of its (task, tools, response_format) combo (the bytes
    of ``ratchet_core.example_key.key_document``; the few distinct combos are canonicalised by the Python
    definition first). The messages are
    taken to be canonical JSON already (the gateway writes them so) and that is CHECKED afterwards, text by text,
    where each key range deduplicates (``canonical_fixups``); if any text is not its own canonical form the day
    is keyed again with every such text replaced by its canonical form (the result is the same either way: a
    key is only ever computed over canonical text).

    In a memory budget (`budget`, ``ratchet_assets.night.budget``): a day with more candidate rows than one key
    range holds (``Budget.shards_for``) is split by example-key range: ``prepare_examples`` keys every
    candidate and writes its row into its range's files, ``examples_shard`` checks, deduplicates (earliest
    answer wins), sorts and finishes one range (``Budget.workers`` processes at once; the Dagster asset maps
    them as dynamic outputs), ``merge_examples`` concatenates the ranges in key order. The file is the same
    bytes either way (the writer's row groups do not depend on its input).
    """
    b = resolve(budget)
    plan = prepare_examples(artifacts_root, day, erasures, b)
    if plan.direct is not None:
        return plan.direct
    return merge_examples(plan, iter_shards(examples_shard, plan, b))


@dataclass
class ExamplesPlan:
    """What ``prepare_examples`` left for the key-range shards (``work``: their input files)."""

    artifacts_root: str
    day: str
    shards: int
    work: str
    rows: int  # the traffic rows read (an upper bound of the candidates, which the shards count)
    erasures: Erasures = field(default_factory=Erasures)
    budget: Budget = field(default_factory=Budget)
    canonicalised: bool = False  # keyed with non-canonical messages replaced (the second attempt)
    combos: pa.Table | None = (
        None  # combo number -> task, tools, response_format (``_register_small_columns``)
    )
    direct: ExamplesResult | None = None  # set when the day fitted one range and was written directly
    peak_rss_mb: float = 0.0  # set by whoever measures it (the Dagster op)


@dataclass
class ExamplesPart:
    """One key range's finished rows (``path``) and their counts; ``noncanonical``: the range holds a message
    text that is not canonical JSON, so its keys are not final and the day is keyed again
    (``merge_examples``)."""

    shard: int
    path: str
    rows: int
    by_task: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, int] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    candidates: int = 0
    erased: int = 0
    noncanonical: bool = False


_KEYED_SQL = f"""
SELECT c.request_id, c.ts, c.source, {{messages}} AS messages, c.answer, c.tool_calls, c._row, c._row2, s.combo,
       coalesce(c.tool_calls <> '' AND json_valid(c.tool_calls) AND {fast_check_sql("c.tool_calls")}, false)
         AS tc_screened
FROM cand c
JOIN small_c s ON s.task IS NOT DISTINCT FROM c.task AND s.tools IS NOT DISTINCT FROM c.tools
  AND s.response_format IS NOT DISTINCT FROM c.response_format{{fix}}
"""
_DOC_HEAD = b'{"messages":'


def _keyed_batches(
    con: duckdb.DuckDBPyConnection, suffixes: list[bytes], canonicalise: bool, shards: int
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """Every candidate with its example key (first column) and canonical parts, and its key range.

    The key is SHA-256 of the key document ``{"messages":M,"response_format":R,"task":T,"tools":X}`` (sorted
    keys, canonical parts: ``ratchet_core.example_key.key_document``), hashed here (OpenSSL) from the messages
    and the combo's tail; the range is ``budget.shard_of`` of the key's first 32 bits.
    ``canonicalise``: the messages through ``msg_fix`` (raw -> canonical for the texts that are not canonical)."""
    fix = "\nLEFT JOIN msg_fix f ON f.raw = c.messages" if canonicalise else ""
    messages = "coalesce(f.canonical, c.messages)" if canonicalise else "c.messages"
    sql = _KEYED_SQL.replace("{fix}", fix).replace("{messages}", messages)
    reader = con.sql(sql).to_arrow_reader(131_072)
    seen = False
    for batch in reader:
        seen = True
        yield _key_batch(batch, suffixes, shards)
    if not seen:  # the schema, for a day without candidates
        yield _key_batch(pa.RecordBatch.from_pylist([], schema=reader.schema), suffixes, shards)


def _key_batch(
    batch: pa.RecordBatch, suffixes: list[bytes], shards: int
) -> tuple[pa.RecordBatch, np.ndarray]:
    sha = hashlib.sha256
    texts = batch.column("messages").cast(pa.binary()).to_pylist()
    tails = [suffixes[c] for c in batch.column("combo").to_pylist()]
    digests = [sha(_DOC_HEAD + m + t).digest() for m, t in zip(texts, tails, strict=True)]
    raw = np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(-1, 32)[:, :4].astype(np.uint64)
    prefix = (raw[:, 0] << 24) | (raw[:, 1] << 16) | (raw[:, 2] << 8) | raw[:, 3]
    keys = pa.array([d.hex() for d in digests], pa.string())
    keyed = pa.RecordBatch.from_arrays([keys, *batch.columns], ["example_key", *batch.schema.names])
    return keyed, shard_of(prefix, shards)


def prepare_examples(
    artifacts_root: str | Path,
    day: str,
    erasures: Erasures | None = None,
    budget: Budget | int | None = None,
    canonicalise: bool = False,
) -> ExamplesPlan:
    """Key every candidate in one pass over the wide rows; then either finish the day directly (one key range)
    or write each candidate's row into its key range's files for ``examples_shard``.

    ``canonicalise``: replace every message text that is not its own canonical form first (a full pass over
    the distinct texts); the default keys the texts as they are and leaves the check to the ranges."""
    b = resolve(budget)
    erasures = erasures or Erasures()
    con = budget_connect(b, artifacts_root, f"examples-{day}")
    traffic = sql_str(str(traffic_path(artifacts_root, day)))
    con.execute(f"CREATE TEMP VIEW t AS SELECT * FROM read_parquet({traffic}, file_row_number = true)")
    con.execute(f"CREATE TEMP TABLE plink AS {LINK_SQL}")
    from_request = con.execute("SELECT count(*) FROM plink WHERE empty").fetchall()[0][0] > 0
    con.execute(f"CREATE TEMP VIEW cand AS {CANDIDATES_SQL}{_FROM_REQUEST if from_request else ''}")
    suffixes, combos = _register_small_columns(con, _Keyer())
    if canonicalise:
        con.register("msg_fix", canonical_fixups(con, "SELECT messages AS text FROM cand"))
    rows = con.execute(f"SELECT count(*) FROM read_parquet({traffic})").fetchall()[0][0]
    shards = b.shards_for(rows)
    work = ArtifactLayout(artifacts_root).examples_file(day).parent / ".shards"
    plan = ExamplesPlan(
        str(artifacts_root), day, shards, str(work), int(rows), erasures, b, canonicalise, combos
    )
    if shards == 1:
        batches = [b for b, _ in _keyed_batches(con, suffixes, canonicalise, 1)]  # <= ROWS_PER_SHARD rows
        src = pa.Table.from_batches(batches)
        con.register("src", src)
        out = ArtifactLayout(artifacts_root).examples_file(day)
        part = _finish_range(con, plan, src, out, 0, ChunkedParquetWriter)
        con.close()
        if part.noncanonical:
            return prepare_examples(artifacts_root, day, erasures, b, canonicalise=True)
        plan.direct = _result(plan, [part])
        return plan
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # One pass over the wide rows, each to its key range's file (Arrow IPC: written as they come, in no
    # particular order; each range sorts its own).
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    options = pa.ipc.IpcWriteOptions()  # uncompressed: a range is read back by memory map
    # Keyed (DuckDB scan + hashlib, holding the GIL) in a thread while this one reorders and writes the batch
    # before (Arrow's take and IPC writes release it).
    keyed = prefetched_chunks([None], lambda _: _keyed_batches(con, suffixes, canonicalise, shards), ahead=2)
    for batch, ranges in keyed:
        order = np.argsort(ranges, kind="stable")
        ordered = batch.take(pa.array(order))
        counts = np.bincount(ranges.astype(np.int64), minlength=shards)
        offset = 0
        for shard in np.flatnonzero(counts):
            n = int(counts[shard])
            if shard not in writers:
                writers[shard] = pa.ipc.new_stream(
                    _range_file(work, int(shard)), ordered.schema, options=options
                )
            writers[shard].write_batch(ordered.slice(offset, n))
            offset += n
    for w in writers.values():
        w.close()
    con.close()
    return plan


def _range_file(work: Path, shard: int) -> Path:
    return work / f"range-{shard:04d}.arrows"


def examples_shard(plan: ExamplesPlan, shard: int, budget: Budget | int | None = None) -> ExamplesPart:
    """Check, deduplicate, sort and finish one key range's candidates; write them to a part file."""
    work = Path(plan.work)
    path = _range_file(work, shard)
    if not path.exists():
        return ExamplesPart(shard, "", 0)
    rows = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()  # zero-copy: the map lives with `rows`
    con = budget_connect(budget, plan.artifacts_root, f"examples-{plan.day}-{shard}")
    con.register("src", rows)
    part = _finish_range(con, plan, rows, work / f"part-{shard:04d}.parquet", shard, _PartWriter)
    con.close()
    return part


# A key's winner is its earliest answer; the file rows (_row, _row2) break every remaining tie.
_EARLIEST_FIRST = ("example_key", "ts", "request_id", "source", "_row", "_row2")


def _finish_range(
    con: duckdb.DuckDBPyConnection, plan: ExamplesPlan, src: pa.Table, out: Path, shard: int, writer_cls: Any
) -> ExamplesPart:
    """The keyed candidates `src` (registered as ``src`` in `con`): check their messages are canonical JSON (else
    stop: flagged), count them, keep each key's earliest answer (erasures left out) and write the winners in key
    order. The dedup is one aggregate over the narrow columns: per key, the row with the least (ts, request_id,
    source, _row, _row2) (what ``row_number() OVER (PARTITION BY key ORDER BY ts, request_id, source)`` picks,
    every tie broken), taken from the wide rows in key order."""
    if not plan.canonicalised and canonical_fixups(con, "SELECT messages AS text FROM src").num_rows:
        return ExamplesPart(shard, "", 0, noncanonical=True)
    candidates = src.num_rows
    erased = pa.array([False] * candidates, pa.bool_())
    for column, values in (
        ("example_key", plan.erasures.example_keys),
        ("request_id", plan.erasures.request_ids),
    ):
        if values:
            hit = pc.is_in(src[column], value_set=pa.array(sorted(values), pa.string())).fill_null(False)
            erased = pc.or_(erased, hit)
    kept = src.filter(pc.invert(erased)) if candidates else src
    con.register(
        "kept",
        pa.table({c: kept[c] for c in _EARLIEST_FIRST}).append_column(
            "_i", pa.array(np.arange(kept.num_rows, dtype=np.int64))
        ),
    )
    order = con.sql(
        f"SELECT arg_min(_i, ({', '.join(_EARLIEST_FIRST[1:])})) AS i FROM kept GROUP BY example_key ORDER BY example_key"
    ).to_arrow_table()["i"]
    winners = kept.take(order)
    assert plan.combos is not None
    for name, column in zip(
        plan.combos.column_names, plan.combos.take(winners["combo"]).columns, strict=True
    ):
        winners = winners.append_column(name, column)
    winners = winners.append_column("day", pa.repeat(pa.scalar(plan.day, pa.string()), winners.num_rows))
    part = _finish_rows(winners.to_batches(max_chunksize=65_536), out, shard, writer_cls)
    part.candidates, part.erased = int(candidates), int(pc.sum(erased).as_py() or 0)
    return part


def merge_examples(plan: ExamplesPlan, parts: Iterable[ExamplesPart]) -> ExamplesResult:
    """Concatenate the key ranges' parts, in key order, into the day's examples file; remove the work files.
    `parts` may be a list (any order) or an iterator in range order (``iter_shards``: each range is written
    while the workers finish the later ones).

    If a range found a message text that is not canonical JSON, the day is keyed again with such texts
    canonicalised (``prepare_examples`` with ``canonicalise``, in this process) and that result is returned."""

    import pyarrow.parquet as pq

    if isinstance(parts, list):
        parts = sorted(parts, key=lambda p: p.shard)
    out = ArtifactLayout(plan.artifacts_root).examples_file(plan.day)
    writer = ChunkedParquetWriter(out, EXAMPLES_SCHEMA, compression="zstd")
    done: list[ExamplesPart] = []
    for part in parts:
        if part.noncanonical:
            writer.abort()
            if isinstance(parts, Generator):
                parts.close()
            return _rekey(plan)
        done.append(part)
        if part.path:
            for batch in pq.ParquetFile(part.path).iter_batches(batch_size=65_536):
                writer.write(batch)
    writer.close()
    shutil.rmtree(plan.work, ignore_errors=True)
    result = _result(plan, done, str(out), writer.rows)
    result.worker_peak_rss_mb = max([0.0, *(p.peak_rss_mb for p in done)])
    return result


def _rekey(plan: ExamplesPlan) -> ExamplesResult:
    """The day again, its non-canonical message texts canonicalised first (in this process)."""
    shutil.rmtree(plan.work, ignore_errors=True)
    b = dataclasses.replace(plan.budget, workers=1)
    again = prepare_examples(plan.artifacts_root, plan.day, plan.erasures, b, canonicalise=True)
    if again.direct is not None:
        return again.direct
    return merge_examples(again, [examples_shard(again, i, b) for i in range(again.shards)])


def _result(
    plan: ExamplesPlan, parts: list[ExamplesPart], path: str | None = None, n: int | None = None
) -> ExamplesResult:
    by_task: dict[str, int] = {}
    by_source: dict[str, int] = {}
    for part in parts:
        for counts, add in ((by_task, part.by_task), (by_source, part.by_source)):
            for k, v in add.items():
                counts[k] = counts.get(k, 0) + v
    candidates = sum(p.candidates for p in parts)
    erased = sum(p.erased for p in parts)
    n = sum(p.rows for p in parts) if n is None else n
    return ExamplesResult(
        day=plan.day,
        path=str(path if path is not None else parts[0].path),
        examples=n,
        candidates=candidates,
        duplicates=candidates - erased - n,
        erased=erased,
        by_task=_sorted_counts(by_task),
        by_source=_sorted_counts(by_source),
        key_ranges=plan.shards,
    )


class _PartWriter:
    """A part file: plain Parquet (LZ4), row groups as they come (the merge re-chunks them). Measured against an
    uncompressed Arrow IPC part at 10M: IPC saved the merge ~3.6 CPU-s and cost the ranges ~5 (more to write)."""

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
        screened = batch.column("tc_screened").to_pylist() if "tc_screened" in batch.schema.names else None
        answers = _answers(
            batch.column("answer").to_pylist(), batch.column("tool_calls").to_pylist(), screened
        )
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
