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

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_assets.night import canonical_text, connect, day_dir, loads_strict
from ratchet_assets.night.erasures import Erasures
from ratchet_assets.night.traffic import traffic_path
from ratchet_core.example_key import split_tools_column
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
SELECT request_id, ts, task, messages, tools, response_format, answer, tool_calls, 'request' AS source
FROM t WHERE kind = 'request' AND served_by = 'teacher' AND messages <> '' AND {_COMPLETE}
UNION ALL
SELECT p.request_id, p.ts,
       coalesce(nullif(p.task, ''), r.task) AS task,
       coalesce(nullif(p.messages, ''), r.messages) AS messages,
       CASE WHEN p.messages <> '' THEN p.tools ELSE coalesce(r.tools, '') END AS tools,
       CASE WHEN p.messages <> '' THEN p.response_format ELSE coalesce(r.response_format, '') END
         AS response_format,
       p.answer, p.tool_calls, 'audit' AS source
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


def build_examples(artifacts_root: str | Path, day: str, erasures: Erasures | None = None) -> ExamplesResult:
    """Extract the day's examples from ``traffic/day=D/traffic.parquet`` into ``examples/day=D``."""
    erasures = erasures or Erasures()
    con = connect()
    con.execute(f"CREATE TEMP VIEW t AS SELECT * FROM read_parquet('{traffic_path(artifacts_root, day)}')")
    con.execute(f"CREATE TEMP TABLE cand AS {CANDIDATES_SQL}")
    candidates = con.execute("SELECT count(*) FROM cand").fetchall()[0][0]
    # Keys are computed once per distinct request content (Python: canonical JSON + SHA-256), memoised.
    cols = con.sql("SELECT task, messages, tools, response_format FROM cand").to_arrow_table()
    keyer = _Keyer()
    memo: dict[tuple[str, str, str, str], tuple[str, str, str, str]] = {}
    parts = []
    for row in zip(
        cols["task"].to_pylist(),
        cols["messages"].to_pylist(),
        cols["tools"].to_pylist(),
        cols["response_format"].to_pylist(),
        strict=True,
    ):
        got = memo.get(row)
        if got is None:
            got = memo[row] = keyer.parts(*row)
        parts.append(got)
    del cols, memo
    names = ["example_key", "c_messages", "c_tools", "c_rf"]
    keyed = pa.table({n: pa.array([p[i] for p in parts], pa.string()) for i, n in enumerate(names)})
    del parts
    con.register("keyed", keyed)
    # cand and keyed are aligned row by row (cand is a materialised table read in order).
    con.execute("CREATE TEMP TABLE cand_k AS SELECT * FROM cand POSITIONAL JOIN keyed")
    con.register("erased_keys", pa.table({"k": pa.array(sorted(erasures.example_keys), pa.string())}))
    con.register("erased_ids", pa.table({"r": pa.array(sorted(erasures.request_ids), pa.string())}))
    con.execute(
        """
        CREATE TEMP TABLE joined AS
        SELECT example_key, task, request_id, ts, source, c_messages, c_tools, c_rf, answer, tool_calls,
               (example_key IN (SELECT k FROM erased_keys) OR request_id IN (SELECT r FROM erased_ids))
                 AS erased
        FROM cand_k
        """
    )
    erased = con.execute("SELECT count(*) FROM joined WHERE erased").fetchall()[0][0]
    best = con.sql(
        """
        SELECT example_key, task, request_id, ts, source, c_messages, c_tools, c_rf, answer, tool_calls
        FROM (SELECT *, row_number() OVER (PARTITION BY example_key ORDER BY ts, request_id, source) AS rn
              FROM joined WHERE NOT erased)
        WHERE rn = 1 ORDER BY example_key
        """
    ).to_arrow_table()
    memo: dict[tuple[str, str], str] = {}
    answers = [
        memo.get((a, tc)) or memo.setdefault((a, tc), assistant_message(a, tc))
        for a, tc in zip(best["answer"].to_pylist(), best["tool_calls"].to_pylist(), strict=True)
    ]
    n = best.num_rows
    table = pa.table(
        {
            "example_key": best["example_key"],
            "task": best["task"],
            "day": pa.array([day] * n, pa.string()),
            "request_id": best["request_id"],
            "ts": best["ts"],
            "source": best["source"],
            "messages": best["c_messages"],
            "tools": best["c_tools"],
            "response_format": best["c_rf"],
            "answer": pa.array(answers, pa.string()),
        }
    ).cast(EXAMPLES_SCHEMA)
    out_dir = day_dir(artifacts_root, "examples", day)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "examples.parquet"
    tmp = out_dir / ".examples.parquet.tmp"
    pq.write_table(table, tmp, compression="zstd", row_group_size=256_000)
    tmp.replace(out)
    con.register("best_t", table)
    by_task = dict(con.execute("SELECT task, count(*) FROM best_t GROUP BY task ORDER BY task").fetchall())
    by_source = dict(
        con.execute("SELECT source, count(*) FROM best_t GROUP BY source ORDER BY source").fetchall()
    )
    con.close()
    return ExamplesResult(
        day=day,
        path=str(out),
        examples=n,
        candidates=int(candidates),
        duplicates=int(candidates) - int(erased) - n,
        erased=int(erased),
        by_task={k: int(v) for k, v in by_task.items()},
        by_source={k: int(v) for k, v in by_source.items()},
    )


def examples_path(artifacts_root: str | Path, day: str) -> Path:
    path = day_dir(artifacts_root, "examples", day) / "examples.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: materialise `examples` for {day} first")
    return path
