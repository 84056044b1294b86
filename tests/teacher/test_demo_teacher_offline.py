"""`ratchet demo-teacher` started on its own never reaches for the network: a subprocess whose sockets refuse (and
report) every address but loopback, with no LITELLM_* variable set, serves workload and free requests and
reports no attempt. Before litellm is imported, every entry point sets LITELLM_LOCAL_MODEL_COST_MAP (litellm
otherwise fetches its price map from the internet at import)."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from ratchet_core.workloads import get_workload
from tests.network_guard import GUARD_PRELUDE
from tests.serve import free_port, wait_healthy

pytestmark = pytest.mark.slow  # a fresh process that imports litellm (~10 s on the shared machine)

# Runs in the child before anything of Ratchet: any non-loopback resolution or connection is reported and refused.
GUARD = (
    GUARD_PRELUDE
    + """
import runpy
sys.argv = ["ratchet", *sys.argv[1:]]
runpy.run_module("ratchet_cli.main", run_name="__main__")
"""
)


def test_the_demo_teacher_started_alone_tries_no_network(tmp_path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RATCHET_", "LITELLM_"))}
    env["HOME"] = str(tmp_path)  # no cache of an earlier run to hide a download
    proc = subprocess.Popen(
        [sys.executable, "-c", GUARD, "demo-teacher", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, f"{url}/healthz", "ratchet demo-teacher", seconds=180)
        ex = get_workload("mixed").generate(3, seed=2)
        bodies = [{"model": "demo-teacher", **e.request_body()} for e in ex]
        bodies.append({"model": "demo-teacher", "messages": [{"role": "user", "content": "hello"}]})
        for body in bodies:
            answered = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
            assert answered.status_code == 200 and answered.json()["usage"]["prompt_tokens"] > 0
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert "NETWORK ATTEMPT" not in stderr, stderr[-3000:]
