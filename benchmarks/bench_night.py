"""Night benchmark: synthetic traffic rows through traffic -> examples -> golden split -> training set (the
plain-Python night functions; DuckDB does the heavy lifting), then the daily receipt and proof latency.

Traffic: a pool of real workload requests (``ratchet_core.workloads`` "mixed", redacted, canonical JSON); each
row is a pool request with a reference number added to its last user message, so there are ``rows / 2``
distinct requests (every one asked twice, as retries and popular questions do). 80% teacher-served, 20%
student-served (half of those audited: a pair row), 2% failures; 4 replicas. It is synthesised in a child
process, chunk by chunk, so neither its time nor its memory counts.

Per step: wall time, CPU time (every thread of this process) and peak RSS (VmHWM, reset between steps).
Targets: 1M rows through the four steps <= 60 s and 10M <= 180 s on 2 cores (``make bench`` runs 1M;
``make bench-scale`` adds 10M); one receipt proof <= 5 ms (``ratchet_core.receipt_store``, as the gateway
serves it), measured over random rows and checked against the signed root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import tempfile
import time
from datetime import UTC, datetime
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
SYNTH_CHUNK = 500_000


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


def synth_traffic(
    lake: Path, n: int = N_ROWS, pool: int = POOL, seed: int = 7, chunk: int = SYNTH_CHUNK
) -> dict[str, Any]:
    """Write n request rows (+ audit pairs) as sealed segments; vectorised with pyarrow, `chunk` rows at a time.

    The random draws are made for all n rows up front (numbers only, ~60 bytes a row), in the order of the
    original one-table version, so the rows are the same at any chunk size; the text columns are built per chunk.
    Per chunk and replica, one segment of request rows and one of pair rows (the pairs continue each replica's
    sequence after all its request rows).
    """
    from ratchet_core.lake import segment_relpath
    from ratchet_core.redact import redact_messages
    from ratchet_core.schema import COLUMN_NAMES, pair_table, request_table
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
    pool_text = {
        "heads": pa.array(heads, pa.string()),
        "tasks": pa.array(tasks, pa.string()),
        "tools": pa.array(tools, pa.string()),
        "rfs": pa.array(rfs, pa.string()),
        "answers": pa.array(answers, pa.string()),
        "calls": pa.array(calls, pa.string()),
    }
    ref_all = np.arange(n) // 2  # every distinct request asked twice...
    pick_all = rng.integers(0, pool, n)[ref_all]  # ...with the same pool request both times
    served_all = rng.random(n) < 0.2
    failure_all = rng.random(n) < 0.02
    audited_all = served_all & (rng.random(n) < 0.5)
    tokens_all = rng.integers(60, 400, n)
    client_all = rng.integers(0, 50, n)
    replica_names = np.array([f"r{r}" for r in range(REPLICAS)])
    client_names = np.array([f"client-{i}" for i in range(50)])
    start_us = int(datetime.fromisoformat(DAY).replace(tzinfo=UTC).timestamp() * 1_000_000)
    # The pairs of replica r continue its sequence after its last request row (seq = i // REPLICAS + 1).
    pair_next = [(n - r + REPLICAS - 1) // REPLICAS + 1 for r in range(REPLICAS)]
    rows = pairs_total = 0
    for lo in range(0, n, chunk):
        i = np.arange(lo, min(n, lo + chunk))
        m = len(i)
        pick, ref = pa.array(pick_all[i]), ref_all[i]
        served, failure, audited = served_all[i], failure_all[i], audited_all[i]
        tokens = tokens_all[i]

        def take(name: str, pick: pa.Array = pick) -> pa.Array:
            return pool_text[name].take(pick)

        messages = pc.binary_join_element_wise(take("heads"), pa.array(ref.astype(str)), tail, " #")
        messages = pc.replace_substring(messages, " #" + tail, tail)  # head #ref + tail
        teacher_cost = np.round(tokens * 10e-6, 8)
        actual = np.where(served, np.round(tokens * 0.5e-6, 8), teacher_cost)
        replica_idx = i % REPLICAS
        tool_calls = take("calls")
        finish = pc.if_else(pc.not_equal(tool_calls, ""), "tool_calls", "stop")
        ts_us = start_us + (i * 86_000_000_000) // n
        requests = request_table(
            m,
            request_id=pc.binary_join_element_wise("req-", pa.array(i.astype(str)), ""),
            ts=pa.array(ts_us, pa.timestamp("us", tz="UTC")),
            day=pa.array(np.full(m, DAY)),
            replica=pa.array(replica_names[replica_idx]),
            seq=pa.array(i // REPLICAS + 1, pa.int64()),
            client=pa.array(client_names[client_all[i]]),
            task=take("tasks"),
            model_requested=pa.array(np.full(m, "ratchet")),
            stage=pa.array(np.where(served, "live", "teacher")),
            version=pa.array(np.where(served, "v1-abcdef12", "")),
            served_by=pa.array(np.where(served, "student", "teacher")),
            messages=messages,
            tools=take("tools"),
            response_format=take("rfs"),
            answer=take("answers"),
            tool_calls=tool_calls,
            finish_reason=pc.if_else(pa.array(failure), "error", finish),
            prompt_tokens=pa.array(tokens - 20, pa.int64()),
            completion_tokens=pa.array(np.full(m, 20), pa.int64()),
            total_tokens=pa.array(tokens, pa.int64()),
            teacher_cost_usd=pa.array(teacher_cost),
            actual_cost_usd=pa.array(actual),
            latency_ms=pa.array(np.full(m, 100.0)),
            upstream_ms=pa.array(np.full(m, 95.0)),
            overhead_ms=pa.array(np.full(m, 5.0)),
            confidence=pa.array(np.where(served, 0.97, np.nan)),
            threshold=pa.array(np.where(served, 0.9, np.nan)),
            pair_role=pa.array(np.where(audited, "audit", "")),
            status_code=pa.array(np.where(failure, 500, 200), pa.int32()),
            error_type=pa.array(np.where(failure, "api_error", "")),
            error=pa.array(np.where(failure, "upstream failed", "")),
        )  # stream, params, reasoning_tokens, pair_outcome, truncated: the row defaults
        audited_rows = requests.filter(pa.array(audited))
        k = audited_rows.num_rows
        pairs = pair_table(
            k,
            **{c: audited_rows[c] for c in COLUMN_NAMES if c not in ("kind", "served_by", "pair_outcome")},
            served_by=pa.array(np.full(k, "teacher")),
            pair_outcome=pa.array(np.full(k, "agree")),
        )
        pair_replica = replica_idx[audited]
        pair_seq = np.zeros(len(pairs), np.int64)
        for r in range(REPLICAS):
            mask = pair_replica == r
            pair_seq[mask] = pair_next[r] + np.arange(mask.sum())
            pair_next[r] += int(mask.sum())
        pairs = pairs.set_column(pairs.schema.get_field_index("seq"), "seq", pa.array(pair_seq))
        for table, r_idx in ((requests, replica_idx), (pairs, pair_replica)):
            for r in range(REPLICAS):
                part = table.filter(pa.array(r_idx == r))
                if part.num_rows:
                    path = lake / segment_relpath(DAY, f"r{r}", int(part["seq"][0].as_py()))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    pq.write_table(part, path, compression="zstd")
        rows += requests.num_rows + pairs.num_rows
        pairs_total += pairs.num_rows
        del requests, pairs, audited_rows, messages
    return {
        "rows": rows,
        "requests": n,
        "pairs": pairs_total,
        "seconds": time.perf_counter() - started,
    }


class _Steps:
    """Per step: wall seconds, CPU seconds (all threads of this process, DuckDB's too, and its worker processes)
    and peak RSS (VmHWM, reset before the step)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.rss: dict[str, float] = {}
        self.load: dict[str, float] = {}  # the machine's 1-minute load average when the step ended

    def run(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        _reset_hwm()
        cpu, t, kids = time.process_time(), time.perf_counter(), _children_cpu()
        out = fn(*args, **kwargs)
        self.wall[name] = time.perf_counter() - t
        # this process's CPU plus that of the worker processes the step waited for (examples' key ranges)
        self.cpu[name] = time.process_time() - cpu + _children_cpu() - kids
        self.rss[name] = _hwm_mb()
        self.load[name] = round(os.getloadavg()[0], 2)
        return out

    def table(self) -> dict[str, dict[str, float]]:
        return {
            k: {
                "wall_s": round(self.wall[k], 2),
                "cpu_s": round(self.cpu[k], 2),
                "peak_rss_mb": round(self.rss[k], 1),
                "load_avg_1m": self.load[k],
            }
            for k in self.wall
        }


def _children_cpu() -> float:
    """CPU seconds of this process's finished, waited-for children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _proof_latency(folder: Path, n: int, root: str, count: int, seed: int = 11) -> dict[str, Any]:
    """``count`` inclusion proofs of random rows the way the gateway's route makes them
    (``ratchet_core.receipt_store.receipt_proof``), each checked against the signed root."""
    import base64

    from ratchet_core.receipt_store import ENVELOPE_FILE, receipt_proof
    from ratchet_stats.receipt import check_proof

    predicate = json.loads(base64.b64decode(json.loads((folder / ENVELOPE_FILE).read_bytes())["payload"]))[
        "predicate"
    ]
    assert predicate["requests"]["root"] == root
    rng = np.random.default_rng(seed)
    times, ok = [], True
    for i in rng.integers(0, n, count):
        rid = f"req-{int(i)}"  # every synthetic request is kept, so its id is in the receipt
        t = time.perf_counter()
        proof = receipt_proof(folder, DAY, rid)
        times.append(time.perf_counter() - t)
        ok = ok and proof is not None and check_proof(predicate, proof)["request_id"] == rid
    ms = np.array(times) * 1000
    return {
        "count": count,
        "first_ms": round(float(ms[0]), 3),  # includes reading the rows file's footer (cached after)
        "median_ms": round(float(np.median(ms)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "max_ms": round(float(ms.max()), 3),
        "all_verified": ok,
        "target_ms": 5,
    }


def run(
    out_dir: Path, n: int = N_ROWS, proofs: int = 200, memory_mb: int = 2048, workers: int = 2
) -> dict[str, Any]:
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.budget import Budget
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.receipts import build_receipt
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core.control_db import make_engine
    from ratchet_core.layout import ArtifactLayout
    from ratchet_stats.keys import generate_private_key

    with tempfile.TemporaryDirectory(prefix="bench-night-") as tmp:
        root = Path(tmp)
        synth = _synth_in_subprocess(root / "lake", n)
        rss_start = _peak_rss_mb()
        steps = _Steps()
        # The night's memory budget; a big day's examples are finished by key range in `workers` processes
        # (their memory is their share of the budget; the peak RSS here is the parent's).
        b = Budget(memory_mb=memory_mb, workers=workers)
        tr = steps.run("traffic", consolidate_traffic, root / "lake", root / "art", DAY, budget=b)
        ex = steps.run("examples", build_examples, root / "art", DAY, budget=b)
        sp = steps.run("golden_split", split_golden, root / "art", DAY, floor=59, budget=b)
        ts = steps.run("training_set", build_training_set, root / "art", DAY, budget=b)
        night = ("traffic", "examples", "golden_split", "training_set")
        pipeline_s = sum(steps.wall[k] for k in night)
        pipeline_cpu = sum(steps.cpu[k] for k in night)

        # The daily receipt: canonical leaves of every request row, the RFC 9162 tree streamed into tree.bin,
        # signed once (a fresh key and control DB); then proofs the way the gateway's route makes them.
        ledger = EffectLedger(make_engine(f"sqlite:///{(root / 'control.db').as_posix()}"))
        receipt = steps.run("receipt", build_receipt, root / "art", DAY, generate_private_key(), ledger)
        folder = ArtifactLayout(root / "art").receipt_dir(DAY)
        files = {p.name: p.stat().st_size for p in folder.iterdir()}
        latency = steps.run("proofs", _proof_latency, folder, n, receipt.root, proofs)
    result = {
        "rows": synth["rows"],
        "requests": n,
        "synth_seconds": round(synth["seconds"], 2),
        "steps": steps.table(),
        "pipeline_seconds": round(pipeline_s, 2),
        "pipeline_cpu_seconds": round(pipeline_cpu, 2),
        "pipeline_target_seconds": 180 if n > N_ROWS else 60,
        "budget": {
            "memory_mb": memory_mb,
            "workers": workers,
            "key_ranges_examples": ex.key_ranges,
        },
        "traffic": {"kept": tr.rows, "duplicates_dropped": tr.duplicates_dropped},
        "examples": ex.examples,
        "golden": sp.golden_size,
        "golden_root": sp.golden_root,
        "training_rows": ts.rows,
        "training_rows_root": ts.rows_root,
        "training_keys_root": ts.keys_root,
        "receipt": {
            "leaves": receipt.size,
            "root": receipt.root,
            "seconds": round(steps.wall["receipt"], 2),
            "files_bytes": files,
            "proof": latency,
        },
        "peak_rss_mb": {
            "pipeline": round(max(steps.rss[k] for k in night), 1),
            "examples_workers": round(ex.worker_peak_rss_mb, 1),  # each worker process's own peak
            "receipt": round(steps.rss["receipt"], 1),
            "at_start": round(rss_start, 1),
        },
    }
    result["summary"] = {
        "rows": result["rows"],
        "pipeline_s": result["pipeline_seconds"],
        "pipeline_cpu_s": result["pipeline_cpu_seconds"],
        "within_target": pipeline_s <= result["pipeline_target_seconds"],
        "pipeline_peak_rss_mb": result["peak_rss_mb"]["pipeline"],
        "steps_wall_s": {k: v["wall_s"] for k, v in result["steps"].items()},
        "steps_rss_mb": {k: v["peak_rss_mb"] for k, v in result["steps"].items()},
        "training_rows": ts.rows,
        "receipt_s": result["receipt"]["seconds"],
        "proof_median_ms": latency["median_ms"],
        "proof_max_ms": latency["max_ms"],
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=N_ROWS)
    parser.add_argument("--out", default="", help="also write the result to this JSON file")
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    res = run(Path("."), args.rows, memory_mb=args.memory_mb, workers=args.workers)
    text = json.dumps(res, indent=2, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
