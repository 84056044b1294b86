"""`ratchet demo` end to end (lean): two accelerated days, Ctrl-C after the first night (to a demo started with
SIGINT ignored: it installs its own handler), a second run resumes, and the receipts it produced verify offline,
chained, with totals that match the sealed lake."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_cli.demo.supervisor import port_is_free

pytestmark = pytest.mark.slow

DAY1, DAY2 = "2026-01-01", "2026-01-02"
REQUESTS = 24


def _demo_cmd(home: Path, ports: list[int]) -> list[str]:
    gateway, teacher, student, dagster = ports
    return [
        sys.executable,
        "-m",
        "ratchet_cli.main",
        "demo",
        "--home",
        str(home),
        "--days",
        "2",
        "--day-seconds",
        "10",
        "--requests-per-day",
        str(REQUESTS),
        "--bursts",
        "2",
        "--train-min-steps",
        "0",  # 24 requests a day: a few steps suffice for what this test checks (no certificate needed)
        "--no-dagster-ui",
        "--json",
        "--gateway-port",
        str(gateway),
        "--teacher-port",
        str(teacher),
        "--student-port",
        str(student),
        "--dagster-port",
        str(dagster),
    ]


# Runs `argv[1:]` with SIGINT ignored and blocked (both survive exec): the worst a parent can hand down (a
# background job of a non-interactive shell starts with SIGINT ignored). The demo must still stop on Ctrl-C, and
# the test no longer depends on what the pytest process inherited. (No preexec_fn: unsafe in a threaded parent.)
SIGINT_IGNORED = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); os.execv(sys.argv[1], sys.argv[1:])"
)


def _lake_requests(home: Path, day: str) -> int:
    import duckdb

    pattern = str(home / "lake" / "traffic" / f"day={day}" / "*.parquet")
    return duckdb.sql(f"SELECT count(*) FROM read_parquet('{pattern}') WHERE kind = 'request'").fetchall()[0][
        0
    ]


def _verify(*args: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ratchet_cli.main", "verify", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        out = {}
    return proc.returncode, out, proc.stderr + proc.stdout


def test_demo_runs_nights_stops_on_ctrl_c_resumes_and_its_receipts_verify(tmp_path, clean_env, ports) -> None:
    home = tmp_path / "home"
    cmd = _demo_cmd(home, ports)

    # First run, started with SIGINT ignored and blocked: stop it with Ctrl-C (SIGINT) as soon as the first
    # day's report is out.
    first = subprocess.Popen(
        [sys.executable, "-c", SIGINT_IGNORED, *cmd],
        env=clean_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = first.stdout.readline()
        assert line, first.stderr.read()[-3000:]
        day1 = json.loads(line)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err[-3000:]
    assert "run the same command again to resume" in err.lower()
    assert all(port_is_free(p) for p in ports[:3]), "a service outlived Ctrl-C"

    assert day1["day"] == DAY1 and day1["requests"] == REQUESTS and day1["ok"] == REQUESTS, day1
    assert day1["receipt"] and "daily_receipt" in day1["night"]["materialised"], day1
    assert day1["stages"]["tickets"]["stage"] == "teacher"  # nothing certified after one small day

    # Second run resumes: day 1 is not run again; day 2 completes.
    second = subprocess.run(cmd, env=clean_env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    reports = [json.loads(x) for x in second.stdout.splitlines() if x.strip()]
    assert [r["day"] for r in reports] == [DAY2], second.stderr[-3000:]
    state = json.loads((home / "demo" / "state.json").read_text())
    assert state["days_done"] == [DAY1, DAY2] and state["open_day"] is None
    assert "ratchet verify receipt" in second.stderr and "--prev" in second.stderr

    # The receipts verify offline with the public key alone, day 2 chained to day 1.
    pub = str(home / "keys" / "signing.pub")
    r1 = str(home / "artifacts" / "receipts" / DAY1 / "receipt.dsse.json")
    r2 = str(home / "artifacts" / "receipts" / DAY2 / "receipt.dsse.json")
    code, out1, text = _verify("receipt", r1, "--key", pub)
    assert code == 0, text
    code, out2, text = _verify("receipt", r2, "--key", pub, "--prev", r1)
    assert code == 0 and "chain" in out2["checks"], text
    # Day 1's receipt counts exactly the requests the gateway sealed into the lake for day 1.
    assert out1["totals"]["requests"] == _lake_requests(home, DAY1) == REQUESTS
    assert out2["totals"]["requests"] == _lake_requests(home, DAY2) > 0

    # A BOM exists only for a certified adapter; if this short run produced one, it must verify too.
    for bom in sorted((home / "artifacts" / "boms").glob("*/bom.dsse.json")):
        code, _, text = _verify("bom", str(bom), "--key", pub)
        assert code == 0, text
