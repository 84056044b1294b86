"""Synthetic sealed traffic for tests, benchmarks and ``ratchet sim``: Parquet segments with the gateway's schema.

``write_day(lake, day, n, seed)`` writes n request rows of a built-in workload (``ratchet_core.workloads``) as
the gateway would: most served by the teacher with the correct answer, some by the student (a share of those
audited: a ``pair`` row with the teacher's answer), a few failures (HTTP 500, ``length``, truncated streams),
spread over replicas and segments, plus one sealed segment per replica on the next day (so the day counts as
complete). Deterministic per arguments; ``repeat_share`` re-asks earlier requests (duplicate example keys).
"""

from __future__ import annotations

import hashlib
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ratchet_core.lake import atomic_write_bytes, segment_relpath
from ratchet_core.redact import redact_messages
from ratchet_core.schema import LEDGER_SCHEMA, pair_row, request_row
from ratchet_stats.canonical import canonical_json

TEACHER_PRICE_PER_TOKEN = 10e-6
STUDENT_PRICE_PER_TOKEN = 0.5e-6


def _cj(value: Any) -> str:
    return canonical_json(value).decode("utf-8") if value not in (None, [], {}) else ""


def _rid(day: str, seed: int, i: int) -> str:
    return "req-" + hashlib.sha256(f"{day}:{seed}:{i}".encode()).hexdigest()[:24]


def request_rows(
    day: str,
    n: int,
    seed: int = 0,
    workload: str = "mixed",
    clients: tuple[str, ...] = ("acme", "globex"),
    replicas: tuple[str, ...] = ("r1", "r2"),
    student_share: float = 0.3,
    audit_share: float = 0.5,
    failure_share: float = 0.05,
    repeat_share: float = 0.1,
    day_index: int = 0,
) -> list[dict[str, Any]]:
    """Ledger rows (dicts with every column) for one day, in replica/seq order."""
    from ratchet_core.workloads import get_workload

    rng = random.Random(f"fixture:{day}:{seed}")
    examples = get_workload(workload).generate(n, seed=seed, day=day_index)
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    seqs = dict.fromkeys(replicas, 0)
    rows: list[dict[str, Any]] = []
    for i, ex in enumerate(examples):
        if i and rng.random() < repeat_share:
            ex = examples[rng.randrange(i)]
        replica = replicas[i % len(replicas)]
        seqs[replica] += 1
        ts = start + timedelta(seconds=(i + 0.5) * 86_000 / max(n, 1))
        rid = _rid(day, seed, i)
        tools = {"tools": ex.tools, "tool_choice": ex.tool_choice} if ex.tools else None
        answer = ex.expected.get("content") or ""
        calls = ex.expected.get("tool_calls")
        tokens = 40 + len(canonical_json(ex.messages)) // 4
        completion = 10 + len(answer) // 4
        served = "student" if rng.random() < student_share else "teacher"
        base = dict(
            request_id=rid,
            ts=ts,
            day=day,
            replica=replica,
            seq=seqs[replica],
            client=clients[i % len(clients)],
            task=ex.task,
            model_requested="ratchet",
            stage="live" if served == "student" else "teacher",
            version="v1-abcdef12" if served == "student" else "",
            served_by=served,
            messages=canonical_json(redact_messages(ex.messages)).decode("utf-8"),
            tools=_cj(tools),
            response_format=_cj(ex.response_format),
            answer=answer,
            tool_calls=_cj(calls),
            finish_reason="tool_calls" if calls else "stop",
            prompt_tokens=tokens,
            completion_tokens=completion,
            total_tokens=tokens + completion,
            teacher_prompt_tokens=tokens,  # the fixture's student counts like the teacher
            teacher_cost_usd=round((tokens + completion) * TEACHER_PRICE_PER_TOKEN, 8),
            actual_cost_usd=round(
                (tokens + completion)
                * (STUDENT_PRICE_PER_TOKEN if served == "student" else TEACHER_PRICE_PER_TOKEN),
                8,
            ),
            latency_ms=120.0,
            upstream_ms=110.0,
            overhead_ms=10.0,
            status_code=200,
        )
        roll = rng.random()
        if roll < failure_share / 3:
            base.update(
                status_code=500, finish_reason="error", error_type="api_error", error="upstream failed"
            )
        elif roll < 2 * failure_share / 3:
            base.update(finish_reason="length")
        elif roll < failure_share:
            base.update(truncated=True, stream=True)
        audited = served == "student" and rng.random() < audit_share
        if audited:
            base["pair_role"] = "audit"
        rows.append(request_row(**base))
        if audited:
            seqs[replica] += 1
            rows.append(
                pair_row(
                    **{
                        **base,
                        "seq": seqs[replica],
                        "ts": ts + timedelta(milliseconds=300),
                        "served_by": "teacher",
                        "pair_outcome": "agree",
                        "status_code": 200,
                        "finish_reason": "tool_calls" if calls else "stop",
                        "truncated": False,
                        "error": "",
                        "error_type": "",
                        "teacher_cost_usd": base["teacher_cost_usd"],
                        "actual_cost_usd": base["teacher_cost_usd"],
                    }
                )
            )
    return rows


def write_segments(
    lake_root: str | Path,
    rows: list[dict[str, Any]],
    segments_per_replica: int = 2,
    mtime: datetime | None = None,
) -> list[Path]:
    """Write rows as sealed segments, ``segments_per_replica`` per (day, replica); return the paths."""
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault((row["day"], row["replica"]), []).append(row)
    paths = []
    for (day, replica), group in sorted(by_key.items()):
        group.sort(key=lambda r: r["seq"])
        size = max(1, -(-len(group) // segments_per_replica))
        for start in range(0, len(group), size):
            chunk = group[start : start + size]
            path = Path(lake_root) / segment_relpath(day, replica, chunk[0]["seq"])
            write_segment(path, chunk, mtime)
            paths.append(path)
    return paths


def write_segment(path: Path, rows: list[dict[str, Any]], mtime: datetime | None = None) -> Path:
    """One segment, written to a temporary name then renamed (``ratchet_core.lake``, like the gateway's sealer)."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA), sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    if mtime is not None:
        os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def write_day(
    lake_root: str | Path,
    day: str,
    n: int,
    seed: int = 0,
    seal_next_day: bool = True,
    **kwargs: Any,
) -> list[Path]:
    """Write a day of traffic (and, by default, an early segment of the next day per replica)."""
    rows = request_rows(day, n, seed=seed, **kwargs)
    day_end = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(days=1)
    paths = write_segments(lake_root, rows, mtime=day_end + timedelta(minutes=1))
    if seal_next_day:
        next_day = (day_end.date()).isoformat()
        replicas = sorted({r["replica"] for r in rows})
        for replica in replicas:
            last_seq = max(r["seq"] for r in rows if r["replica"] == replica)
            row = request_row(
                request_id=_rid(next_day, seed, -1) + replica,
                ts=day_end + timedelta(seconds=1),
                day=next_day,
                replica=replica,
                seq=last_seq + 1,
                client="acme",
                task="tickets",
                served_by="teacher",
                status_code=200,
            )
            path = Path(lake_root) / segment_relpath(next_day, replica, last_seq + 1)
            if not path.exists():
                write_segment(path, [row])
    return paths
