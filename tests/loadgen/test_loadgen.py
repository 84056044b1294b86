"""`ratchet traffic` / run_traffic against the demo teacher on loopback."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from ratchet_cli.loadgen import normalise_base_url, percentile, run_traffic
from ratchet_cli.main import cli
from ratchet_core.workloads import get_workload
from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app
from tests.serve import free_port, serve_in_thread


def _teacher_with_headers(**config):
    """The demo teacher, plus Ratchet's response headers: tickets 'served by the student', the rest by the teacher."""
    app = create_app(DemoTeacherConfig(model="ratchet", **config))

    @app.middleware("http")
    async def served_by(request, call_next):
        response = await call_next(request)
        student = request.headers.get("x-ratchet-task") == "tickets"
        response.headers["x-ratchet-served-by"] = "student" if student else "teacher"
        response.headers["x-ratchet-version"] = "v1-abc123" if student else ""
        return response

    return app


@pytest.mark.slow
def test_cli_sends_1000_requests_with_no_errors_and_all_correct():
    with serve_in_thread(create_app(DemoTeacherConfig(model="ratchet"))) as url:
        args = [
            "traffic",
            "--base-url",
            url,
            "--api-key",
            "sk-x",
            "--requests",
            "1000",
            "--concurrency",
            "16",
        ]
        result = CliRunner().invoke(cli, [*args, "--seed", "3", "--stream-share", "0.2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["sent"], summary["ok"], summary["errors"]) == (1000, 1000, 0)
    assert summary["correct"] == 1000 and summary["accuracy"] == 1.0
    assert 120 <= summary["streamed"] <= 280
    lat = summary["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert summary["tokens"]["prompt"] > 0 and summary["tokens"]["completion"] > 0
    print("traffic 1000 requests:", {k: summary[k] for k in ("seconds", "requests_per_second", "latency_ms")})


def test_summary_counts_served_by_versions_and_accuracy():
    examples = get_workload("mixed").generate(60, seed=5)
    tasks = Counter(e.task for e in examples)
    with serve_in_thread(_teacher_with_headers(wrong_rate=0.5, seed=1)) as url:
        s = run_traffic(
            url + "/v1", "sk-x", workload="mixed", requests=60, concurrency=4, seed=5, stream_share=0.5
        )
    assert s["ok"] == 60 and s["errors"] == 0
    assert s["served_by"] == {"student": tasks["tickets"], "teacher": 60 - tasks["tickets"]}
    assert s["versions"] == {"v1-abc123": tasks["tickets"]}
    assert {t: v["sent"] for t, v in s["by_task"].items()} == dict(tasks)
    assert 10 <= s["correct"] <= 50 and s["accuracy"] == s["correct"] / 60
    assert 0 < s["streamed"] < 60


def test_errors_are_counted_by_type_and_the_cli_says_what_to_do():
    with serve_in_thread(
        create_app(DemoTeacherConfig(model="ratchet", error_rate=1.0, error_status=503))
    ) as url:
        s = run_traffic(url, "sk-x", workload="tickets", requests=10, concurrency=2)  # /v1 added
    assert (s["ok"], s["errors"], s["errors_by_type"]) == (0, 10, {"http_503": 10})
    assert s["accuracy"] is None and s["latency_ms"]["p50"] is None

    dead = f"http://127.0.0.1:{free_port()}/v1"
    result = CliRunner().invoke(
        cli, ["traffic", "--base-url", dead, "--api-key", "sk-secret", "--requests", "3"]
    )
    assert result.exit_code == 1
    assert "no request succeeded" in result.stderr and "connection" in result.stderr
    assert "sk-secret" not in result.output + result.stderr


def test_helpers():
    assert normalise_base_url("http://h:1") == "http://h:1/v1"
    assert normalise_base_url("http://h:1/v1/") == "http://h:1/v1"
    with pytest.raises(ValueError, match="--base-url"):
        normalise_base_url("h:1")
    xs = list(range(1, 101))
    assert (percentile(xs, 0.5), percentile(xs, 0.99), percentile(xs, 1.0)) == (50, 99, 100)
    assert percentile([7.0], 0.9) == 7.0 and percentile([], 0.5) is None
