"""Gateway overhead, measured with the shared harness ``../shared/bench/overhead.py`` (``$RATCHET_BENCH_DIR``).

overhead.py runs A (load generator -> mock upstream) and B (load generator -> ``ratchet gateway`` -> the same
mock) interleaved A B A B per concurrency level, waits for a quiet machine, reruns pairs that other processes
disturbed, and reports the latency the gateway adds (B - A at p50 and p99), the throughput of each side and the
CPU per request of each process. This module starts it, as a script (never copied), on:

- ``durable``: the gateway as deployed, durable ledger on disk (every 200 waits for its journal's fdatasync),
  non-streaming, c = 1, 16, 64: the targets are c=1 added p50 <= 1 ms and c=16 added p99 <= 10 ms, and
  >= 1,500 req/s at c=16 on one worker;
- ``durable_stream``: the same gateway, ``stream: true`` (latency = time to ``[DONE]``), c = 1, 16: the same
  latency targets;
- ``journal_on_tmpfs``: the journal on /dev/shm (separates the disk's fdatasync from the gateway's own time);
- ``durable_workers2``: ``ratchet gateway --workers 2`` (two replicas, each with its own journal and segments),
  c = 1, 16: what the second core buys when one process is saturated (on a 2-core box the load generator and the
  mock share the cores with it).

Each variant's full output is ``<out>/gateway_<variant>.json``; the summary keeps the added latencies, the
gateway's CPU per request, the disk's fdatasync latency and how busy the machine was (on a shared box other
processes dominate the tails: read ``noise`` before the numbers). ``RATCHET_BENCH_ROUNDS`` /
``RATCHET_BENCH_DURATION`` change the rounds per level and the measured seconds per run.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = int(os.environ.get("RATCHET_BENCH_ROUNDS", "3"))
DURATION_S = float(os.environ.get("RATCHET_BENCH_DURATION", "4"))
TARGETS = {"c1_added_p50_ms": 1.0, "c16_added_p99_ms": 10.0, "c16_gateway_rps": 1500.0}


def _bench_dir() -> Path:
    env = os.environ.get("RATCHET_BENCH_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "bench"


def _gateway_cmd(home: Path, workers: int = 1) -> str:
    """overhead.py's --gateway-cmd: ``ratchet gateway`` of this venv, teacher = the harness's mock."""
    ratchet = Path(sys.executable).with_name("ratchet")
    env = {
        "RATCHET_HOME": str(home),
        "RATCHET_API_KEYS": "bench:{api_key}",
        "RATCHET_TEACHER_MODEL": "openai/{model}",
        "RATCHET_TEACHER_API_BASE": "{upstream_url}",
        "RATCHET_STUDENT_BASE_URL": "http://127.0.0.1:9/v1",  # no release: the student is never asked
    }
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"env {assigns} {shlex.quote(str(ratchet))} gateway --host {{host}} --port {{port}} --workers {workers}"


def _overhead(
    bench: Path,
    out: Path,
    name: str,
    home: Path,
    levels: str,
    stream: bool,
    budget_s: float,
    workers: int = 1,
) -> dict:
    json_out = out / f"gateway_{name}.json"
    cmd = [
        sys.executable,
        str(bench / "overhead.py"),
        "--name",
        f"ratchet-{name}",
        "--gateway-cmd",
        _gateway_cmd(home, workers),
        "--levels",
        levels,
        "--rounds",
        str(ROUNDS),
        "--duration",
        str(DURATION_S),
        "--budget-s",
        str(budget_s),
        "--json-out",
        str(json_out),
    ]
    if stream:
        cmd.append("--stream")
    # The gateway must not inherit the caller's Ratchet configuration (only what _gateway_cmd sets).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    proc = subprocess.run(
        cmd, cwd=bench, env=env, capture_output=True, text=True, timeout=budget_s + 90, check=False
    )
    if not json_out.exists():
        return {"error": f"overhead.py exited {proc.returncode}: {proc.stderr[-800:]}"}
    # the record names no path of this machine: the temporary home and this venv become placeholders
    text = json_out.read_text().replace(str(home), "<tmp>")
    text = text.replace(str(Path(sys.executable).parent), ".venv/bin")
    json_out.write_text(text)
    data = json.loads(text)
    levels_out = {}
    for row in data["summary"]:
        b = row["B"]
        levels_out[str(row["concurrency"])] = {
            "added_p50_ms": row["added_p50_ms"],
            "added_p99_ms": row["added_p99_ms"],
            "added_p50_per_round_ms": row["added_p50_per_round_ms"],
            "added_p99_per_round_ms": row["added_p99_per_round_ms"],
            "direct_rps": row["A"]["rps"],
            "gateway_rps": b["rps"],
            "gateway_cpu_ms_per_req": b["cpu_ms_per_request_mean"].get("gateway"),
            "others_pct_of_one_core": b["cpu_pct_of_one_core_mean"].get("others_not_ours"),
            "errors": row["A"]["errors"] + b["errors"],
        }
    return {
        "levels": levels_out,
        "one_line": data.get("one_line", ""),
        "noisy_pairs_rerun": len(data.get("discarded_noisy_runs") or []),
        "preflight_busy_pct_of_all_cores": data.get("preflight_busy_pct_of_all_cores"),
        "file": json_out.name,
    }


def _fdatasync_ms(folder: Path, n: int = 100) -> dict:
    """Latency of append 2 KB + fdatasync on this disk now (what every durable group commit waits for)."""
    path = folder / f".fsync-probe-{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, b"x" * 2048)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    samples.sort()
    return {"p50": round(samples[n // 2], 3), "p99": round(samples[int(n * 0.99) - 1], 3)}


def run(out_dir: Path) -> dict:
    bench = _bench_dir()
    if not (bench / "overhead.py").exists():
        return {"summary": {"skipped": f"no bench harness at {bench} (set RATCHET_BENCH_DIR)"}}
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"rounds": ROUNDS, "duration_s": DURATION_S, "loadavg_before": os.getloadavg()}
    result["disk_fdatasync_ms"] = _fdatasync_ms(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory() as tmp:
        result["durable"] = _overhead(bench, out_dir, "durable", Path(tmp), "1,16,64", False, 280)
    with tempfile.TemporaryDirectory() as tmp:
        result["durable_stream"] = _overhead(bench, out_dir, "durable_stream", Path(tmp), "1,16", True, 200)
    if Path("/dev/shm").is_dir():
        with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
            result["journal_on_tmpfs"] = _overhead(
                bench, out_dir, "journal_on_tmpfs", Path(tmp), "1,16", False, 200
            )
    with tempfile.TemporaryDirectory() as tmp:
        result["durable_workers2"] = _overhead(
            bench, out_dir, "durable_workers2", Path(tmp), "1,16", False, 200, workers=2
        )
    result["loadavg_after"] = os.getloadavg()
    summary: dict = {"targets": TARGETS, "disk_fdatasync_p50_ms": result["disk_fdatasync_ms"]["p50"]}
    for variant in ("durable", "durable_stream", "journal_on_tmpfs", "durable_workers2"):
        levels = (result.get(variant) or {}).get("levels") or {}
        for c, row in levels.items():
            summary[f"{variant}_c{c}_added_p50_ms"] = row["added_p50_ms"]
            summary[f"{variant}_c{c}_added_p99_ms"] = row["added_p99_ms"]
            summary[f"{variant}_c{c}_cpu_ms_per_req"] = row["gateway_cpu_ms_per_req"]
        if "error" in (result.get(variant) or {}):
            summary[f"{variant}_error"] = result[variant]["error"][:200]
    for variant in ("durable", "durable_stream"):
        levels = (result.get(variant) or {}).get("levels") or {}
        if "1" in levels and "16" in levels:
            summary[f"{variant}_c16_gateway_rps"] = levels["16"]["gateway_rps"]
            summary[f"{variant}_meets_targets"] = (
                levels["1"]["added_p50_ms"] <= TARGETS["c1_added_p50_ms"]
                and levels["16"]["added_p99_ms"] <= TARGETS["c16_added_p99_ms"]
                and (variant != "durable" or levels["16"]["gateway_rps"] >= TARGETS["c16_gateway_rps"])
            )
    summary["loadavg_before_after"] = [result["loadavg_before"][0], result["loadavg_after"][0]]
    result["summary"] = summary
    return result


if __name__ == "__main__":
    print(json.dumps(run(Path("benchmarks/results")), indent=2))
