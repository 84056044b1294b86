"""Night benchmark: 1,000,000 synthetic traffic rows through traffic -> examples -> golden split -> training set
(the plain-Python night functions; DuckDB does the heavy lifting), then the daily receipt's root and one proof.

Traffic: a pool of real workload requests (``ratchet_core.workloads`` "mixed", redacted, canonical JSON); each
row is a pool request with a reference number added to its last user message, so there are ``rows / 2``
distinct requests (every one asked twice, as retries and popular questions do). 80% teacher-served, 20%
student-served (half of those audited: a pair row), 2% failures; 4 replicas x 5 segments. Targets: the four
steps <= 60 s on 2 cores; peak RSS reported per step (VmHWM, reset between steps; the
traffic is synthesised in a child process so it does not count).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DAY = "2026-03-01"
N_ROWS = 1_000_000
POOL = 20_000
REPLICAS = 4
SEGMENTS_PER_REPLICA = 5


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _reset_hwm() -> None:
    """Reset this process's peak-RSS mark (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _hwm_mb() -> float:
    """Peak RSS since the last ``_reset_hwm`` (VmHWM), falling back to the process's whole-life peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return _peak_rss_mb()


def _synth_in_subprocess(lake: Path, n: int) -> dict[str, Any]:
    """Write the traffic from a child process, so the pipeline's peak memory is measured on its own."""
    import subprocess
    import sys

    code = (
        "import json, sys; from pathlib import Path; from benchmarks.bench_night import synth_traffic; "
        f"print(json.dumps(synth_traffic(Path({str(lake)!r}), {n})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def synth_traffic(lake: Path, n: int = N_ROWS, pool: int = POOL, seed: int = 7) -> dict[str, Any]:
    """Write n request rows (+ audit pairs) as sealed segments; vectorised with pyarrow."""
    from ratchet_core.redact import redact_messages
    from ratchet_core.schema import LEDGER_SCHEMA, segment_relpath
    from ratchet_core.workloads import get_workload
    from ratchet_stats.canonical import canonical_json

    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    examples = get_workload("mixed").generate(pool, seed=seed)
    tail = '","role":"user"}]'
    heads, tasks, tools, rfs, answers, calls = [], [], [], [], [], []
    for ex in examples:
        text = canonical_json(redact_messages(ex.messages)).decode()
        assert text.endswith(tail), "last message must be a user message with string content"
        heads.append(text[: -len(tail)])
        tasks.append(ex.task)
        tools.append(
            canonical_json({"tools": ex.tools, "tool_choice": ex.tool_choice}).decode() if ex.tools else ""
        )
        rfs.append(canonical_json(ex.response_format).decode() if ex.response_format else "")
        answers.append(ex.expected.get("content") or "")
        tc = ex.expected.get("tool_calls")
        calls.append(canonical_json(tc).decode() if tc else "")
    pick = rng.integers(0, pool, n)
    ref = np.arange(n) // 2  # every distinct request asked twice
    pick = pick[ref]  # ...with the same pool request both times

    def take(values: list[str]) -> pa.Array:
        return pa.array(values, pa.string()).take(pa.array(pick))

    messages = pc.binary_join_element_wise(take(heads), pa.array(ref.astype(str)), tail, " #")
    messages = pc.replace_substring(messages, " #" + tail, tail)  # no-op guard for the separator's tail
    served_student = rng.random(n) < 0.2
    failure = rng.random(n) < 0.02
    audited = served_student & (rng.random(n) < 0.5)
    tokens = rng.integers(60, 400, n)
    teacher_cost = np.round(tokens * 10e-6, 8)
    actual = np.where(served_student, np.round(tokens * 0.5e-6, 8), teacher_cost)
    start = datetime.fromisoformat(DAY).replace(tzinfo=UTC)
    ts = pa.array(
        [start + timedelta(microseconds=int(i * 86_000_000_000 / n)) for i in range(0, n)],
        pa.timestamp("us", tz="UTC"),
    )
    replica_idx = np.arange(n) % REPLICAS
    seq = np.arange(n) // REPLICAS + 1
    request_ids = pc.binary_join_element_wise("req-", pa.array(np.arange(n).astype(str)), "")
    answer = take(answers)
    tool_calls = take(calls)
    finish = pc.if_else(pc.not_equal(tool_calls, ""), "tool_calls", "stop")
    cols: dict[str, Any] = {
        "request_id": request_ids,
        "kind": pa.array(["request"] * n),
        "ts": ts,
        "day": pa.array([DAY] * n),
        "replica": pa.array([f"r{i}" for i in replica_idx]),
        "seq": pa.array(seq, pa.int64()),
        "client": pa.array([f"client-{i}" for i in rng.integers(0, 50, n)]),
        "task": take(tasks),
        "model_requested": pa.array(["ratchet"] * n),
        "stage": pa.array(np.where(served_student, "live", "teacher")),
        "version": pa.array(np.where(served_student, "v1-abcdef12", "")),
        "served_by": pa.array(np.where(served_student, "student", "teacher")),
        "stream": pa.array(np.zeros(n, bool)),
        "messages": messages,
        "tools": take(tools),
        "response_format": take(rfs),
        "params": pa.array([""] * n),
        "answer": answer,
        "tool_calls": tool_calls,
        "finish_reason": pc.if_else(pa.array(failure), "error", finish),
        "prompt_tokens": pa.array(tokens - 20, pa.int64()),
        "completion_tokens": pa.array(np.full(n, 20), pa.int64()),
        "reasoning_tokens": pa.array(np.zeros(n, np.int64)),
        "total_tokens": pa.array(tokens, pa.int64()),
        "teacher_cost_usd": pa.array(teacher_cost),
        "actual_cost_usd": pa.array(actual),
        "latency_ms": pa.array(np.full(n, 100.0)),
        "upstream_ms": pa.array(np.full(n, 95.0)),
        "overhead_ms": pa.array(np.full(n, 5.0)),
        "confidence": pa.array(np.where(served_student, 0.97, np.nan)),
        "threshold": pa.array(np.where(served_student, 0.9, np.nan)),
        "pair_role": pa.array(np.where(audited, "audit", "")),
        "pair_outcome": pa.array([""] * n),
        "truncated": pa.array(np.zeros(n, bool)),
        "status_code": pa.array(np.where(failure, 500, 200), pa.int32()),
        "error_type": pa.array(np.where(failure, "api_error", "")),
        "error": pa.array(np.where(failure, "upstream failed", "")),
        "schema_version": pa.array(np.ones(n, np.int32)),
    }
    requests = pa.table(cols).cast(LEDGER_SCHEMA)
    pairs_idx = pa.array(np.flatnonzero(audited))
    pairs = requests.take(pairs_idx)
    pairs = pairs.set_column(pairs.schema.get_field_index("kind"), "kind", pa.array(["pair"] * len(pairs)))
    pairs = pairs.set_column(
        pairs.schema.get_field_index("served_by"), "served_by", pa.array(["teacher"] * len(pairs))
    )
    pairs = pairs.set_column(
        pairs.schema.get_field_index("pair_outcome"), "pair_outcome", pa.array(["agree"] * len(pairs))
    )
    # Pair rows continue each replica's sequence after its request rows.
    pair_replica = replica_idx[audited]
    pair_seq = np.zeros(len(pair_replica), np.int64)
    for r in range(REPLICAS):
        mask = pair_replica == r
        pair_seq[mask] = seq[replica_idx == r].max() + 1 + np.arange(mask.sum())
    pairs = pairs.set_column(pairs.schema.get_field_index("seq"), "seq", pa.array(pair_seq))
    table = pa.concat_tables([requests, pairs])
    replicas = table["replica"]
    for r in range(REPLICAS):
        part = table.filter(pc.equal(replicas, f"r{r}"))
        size = -(-part.num_rows // SEGMENTS_PER_REPLICA)
        for s in range(SEGMENTS_PER_REPLICA):
            chunk = part.slice(s * size, size)
            path = lake / segment_relpath(DAY, f"r{r}", int(chunk["seq"][0].as_py()))
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(chunk, path, compression="zstd")
    return {
        "rows": table.num_rows,
        "requests": n,
        "pairs": len(pairs),
        "seconds": time.perf_counter() - started,
    }


def run(out_dir: Path, n: int = N_ROWS) -> dict[str, Any]:
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.receipts import receipt_proof
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_stats import merkle

    with tempfile.TemporaryDirectory(prefix="bench-night-") as tmp:
        root = Path(tmp)
        synth = _synth_in_subprocess(root / "lake", n)
        rss_start = _peak_rss_mb()
        steps: dict[str, float] = {}
        step_rss: dict[str, float] = {}
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        _reset_hwm()
        tr = consolidate_traffic(root / "lake", root / "art", DAY)
        steps["traffic"] = time.perf_counter() - t0
        step_rss["traffic"] = _hwm_mb()
        _reset_hwm()
        t = time.perf_counter()
        ex = build_examples(root / "art", DAY)
        steps["examples"] = time.perf_counter() - t
        step_rss["examples"] = _hwm_mb()
        _reset_hwm()
        t = time.perf_counter()
        sp = split_golden(root / "art", DAY, floor=59)
        steps["golden_split"] = time.perf_counter() - t
        step_rss["golden_split"] = _hwm_mb()
        _reset_hwm()
        t = time.perf_counter()
        ts = build_training_set(root / "art", DAY)
        steps["training_set"] = time.perf_counter() - t
        step_rss["training_set"] = _hwm_mb()
        _reset_hwm()
        pipeline_s = time.perf_counter() - t0
        pipeline_cpu = time.process_time() - cpu0

        # The daily receipt: canonical leaves of every request row, the RFC 9162 root, signed once (a fresh key
        # and control DB), then one inclusion proof the way the gateway fetches it.
        from ratchet_assets.effects import EffectLedger
        from ratchet_assets.night.receipts import build_receipt
        from ratchet_core.control_db import make_engine
        from ratchet_stats.keys import generate_private_key

        ledger = EffectLedger(make_engine(f"sqlite:///{(root / 'control.db').as_posix()}"))
        _reset_hwm()
        t = time.perf_counter()
        receipt = build_receipt(root / "art", DAY, generate_private_key(), ledger)
        receipt_s = time.perf_counter() - t
        receipt_root = receipt.root
        step_rss["receipt"] = _hwm_mb()
        target = pq.read_table(receipt.rows_path, columns=["request_id"])["request_id"][receipt.size // 2]
        t = time.perf_counter()
        proof = receipt_proof(DAY, target.as_py(), root / "art")
        proof_s = time.perf_counter() - t
        step_rss["proof"] = _hwm_mb()
        ok = merkle.verify_inclusion(
            proof["leaf"].encode(),
            proof["index"],
            proof["size"],
            [bytes.fromhex(h) for h in proof["proof"]],
            bytes.fromhex(receipt_root),
        )
    result = {
        "rows": synth["rows"],
        "synth_seconds": round(synth["seconds"], 2),
        "steps_seconds": {k: round(v, 2) for k, v in steps.items()},
        "pipeline_seconds": round(pipeline_s, 2),
        "pipeline_cpu_seconds": round(pipeline_cpu, 2),
        "pipeline_target_seconds": 60,
        "traffic": {"kept": tr.rows, "duplicates_dropped": tr.duplicates_dropped},
        "examples": ex.examples,
        "golden": sp.golden_size,
        "training_rows": ts.rows,
        "training_rows_root": ts.rows_root,
        "receipt": {
            "leaves": receipt.size,
            "root": receipt_root,
            "seconds": round(receipt_s, 2),
            "proof_seconds": round(proof_s, 2),
            "proof_length": len(proof["proof"]),
            "proof_verifies": ok,
        },
        "peak_rss_mb": {
            "steps": {k: round(v, 1) for k, v in step_rss.items()},
            "pipeline": round(max(step_rss[k] for k in steps), 1),
            "at_start": round(rss_start, 1),
            "after_reset_marks": round(_peak_rss_mb(), 1),
        },
    }
    result["summary"] = {
        "rows": result["rows"],
        "pipeline_s": result["pipeline_seconds"],
        "pipeline_cpu_s": result["pipeline_cpu_seconds"],
        "within_60s": pipeline_s <= 60,
        "training_rows": ts.rows,
        "receipt_s": result["receipt"]["seconds"],
        "proof_s": result["receipt"]["proof_seconds"],
        "pipeline_peak_rss_mb": result["peak_rss_mb"]["pipeline"],
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=N_ROWS)
    args = parser.parse_args()
    print(json.dumps(run(Path("."), args.rows), indent=2))
