"""The cost report: teacher spend from litellm's prices and the rows' teacher tokens, student GPU time at a price
per GPU-hour, training time from the night's adapter record, the break-even volume; the asset and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from click.testing import CliRunner

DAY = "2026-02-03"


def _home(tmp_path: Path) -> Path:
    from ratchet_assets.night.fixtures import write_day
    from ratchet_core.layout import ArtifactLayout
    from ratchet_stats.keys import generate_private_key, save_private_key

    home = tmp_path / "home"
    save_private_key(generate_private_key(), home / "keys" / "signing.key")
    write_day(home / "lake", DAY, 200, seed=3, student_share=0.5, audit_share=0.3)
    pointer = ArtifactLayout(home / "artifacts").adapter_pointer(DAY)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps({"version": "v1-x", "train_day": DAY, "seconds": 1800.0}))
    return home


def test_cost_report_numbers_asset_and_cli(tmp_path, monkeypatch):
    from ratchet_assets.cost import CostConfig, cost_report, totals
    from ratchet_assets.defs.cost_report import cost, report_path
    from ratchet_assets.defs.cost_report import cost_report as asset
    from ratchet_assets.defs.resources import night_resources
    from ratchet_core.pricing import _cost_map

    home = _home(tmp_path)
    price = _cost_map()["gpt-4o"]
    rows = [
        r for p in sorted((home / "lake").rglob(f"day={DAY}/*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    rows = [r for r in rows if r["status_code"] == 200]
    teacher_rows = [
        r
        for r in rows
        if (r["kind"] == "request" and r["served_by"] == "teacher")
        or (r["kind"] == "pair" and r["pair_role"] == "audit")
    ]
    want_teacher = sum(
        r["prompt_tokens"] * price["input_cost_per_token"]
        + r["completion_tokens"] * price["output_cost_per_token"]
        for r in teacher_rows
    )
    student = [r for r in rows if r["kind"] == "request" and r["served_by"] == "student"]
    want_gpu = sum(r["upstream_ms"] for r in student) / 1000

    report = cost_report(home / "lake", home / "artifacts", DAY, CostConfig("gpt-4o", 3.6, 7.2))
    t = totals(report)
    assert abs(t["teacher_paid_usd"] - want_teacher) < 1e-9
    assert (
        abs(t["student_gpu_seconds"] - want_gpu) < 1e-9
        and abs(t["student_cost_usd"] - want_gpu / 1000) < 1e-12
    )
    assert abs(t["training_seconds"] - 1800) < 1e-6 and abs(t["training_cost_usd"] - 3.6) < 1e-9
    for r in report:
        saving = (r.teacher_equivalent_usd - r.teacher_paid_usd - r.student_cost_usd) / r.requests
        assert r.break_even_requests_per_day is not None
        assert abs(r.break_even_requests_per_day * saving - r.training_cost_usd) < 1e-9
    assert {r.task for r in report} == {"tickets", "extract", "tools"}

    result = dg.materialize([asset], partition_key=DAY, resources=night_resources(home))
    [event] = result.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert meta["training_seconds"].value == 1800.0 and meta["student_share"].value > 0.3
    assert json.loads(report_path(home / "artifacts", DAY).read_text())["totals"]["requests"] == t["requests"]

    monkeypatch.setenv("RATCHET_HOME", str(home))
    out = CliRunner().invoke(
        cost, ["report", "--json", "--gpu-price-per-hour", "3.6", "--training-price-per-hour", "7.2"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    day = {d["day"]: d for d in data["days"]}[DAY]
    assert abs(day["totals"]["teacher_paid_usd"] - want_teacher) < 1e-9
    text = CliRunner().invoke(cost, ["report", "--day", DAY])
    assert text.exit_code == 0 and "tickets" in text.output and "break-even" in text.output


def _student_oracle(home: Path) -> tuple[int, float, int, int]:
    """(student tokens, seconds waited on the student, student answers, cascaded requests) of DAY, from the rows."""
    rows = [
        r for p in sorted((home / "lake").rglob(f"day={DAY}/*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    answers = [
        r
        for r in rows
        if r["status_code"] == 200
        and ((r["kind"] == "request" and r["served_by"] == "student") or r["pair_role"] == "shadow")
    ]
    cascaded = [
        r
        for r in rows
        if r["status_code"] == 200
        and r["kind"] == "request"
        and r["served_by"] == "teacher"
        and r["confidence"] is not None
    ]
    tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in answers)
    return tokens, sum(r["upstream_ms"] for r in answers) / 1000, len(answers), len(cascaded)


def test_the_student_is_priced_by_the_configured_vllm_throughput(tmp_path, monkeypatch):
    from ratchet_assets.cost import CONFIGURED, CostConfig, cost_report, describe_pricing, totals
    from ratchet_assets.defs.cost_report import cost

    home = _home(tmp_path)
    tokens, _, answers, cascaded = _student_oracle(home)
    config = CostConfig("gpt-4o", gpu_price_per_hour=0.8, training_price_per_hour=0.1, tokens_per_second=5000)
    report = cost_report(home / "lake", home / "artifacts", DAY, config)
    t = totals(report)
    want_seconds = tokens / 5000 * (1 + cascaded / answers)
    assert t["student_tokens"] == tokens
    assert abs(t["student_gpu_seconds"] - want_seconds) < 1e-6
    assert abs(t["student_cost_usd"] - want_seconds / 3600 * 0.8) < 1e-9
    assert {r.student_pricing for r in report} == {CONFIGURED}
    assert {r.student_tokens_per_second for r in report} == {5000.0}
    line = describe_pricing(config, report)
    assert "configured vLLM throughput: 5,000 tokens/s per GPU at $0.80 per GPU-hour" in line
    assert f"${0.8 / 3600 / 5000 * 1e6:.4f} per 1M tokens" in line

    # The settings configure it for the CLI (and the asset); the report says which model it used.
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_STUDENT_TOKENS_PER_SECOND", "5000")
    monkeypatch.setenv("RATCHET_STUDENT_GPU_PRICE_PER_HOUR", "0.8")
    monkeypatch.setenv("RATCHET_TRAINING_PRICE_PER_HOUR", "0.1")
    text = CliRunner().invoke(cost, ["report", "--day", DAY])
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[0] == line
    data = json.loads(CliRunner().invoke(cost, ["report", "--day", DAY, "--json"]).output)
    assert data["config"]["student_pricing"] == CONFIGURED and data["student_pricing"] == line
    assert abs(data["days"][0]["totals"]["student_cost_usd"] - t["student_cost_usd"]) < 1e-9


def test_the_student_is_priced_by_its_measured_speed_when_no_throughput_is_configured(tmp_path, monkeypatch):
    from ratchet_assets.cost import MEASURED, CostConfig, cost_report, describe_pricing, totals
    from ratchet_assets.defs.cost_report import cost

    home = _home(tmp_path)
    tokens, waited, answers, cascaded = _student_oracle(home)
    config = CostConfig("gpt-4o", gpu_price_per_hour=0.4)
    report = cost_report(home / "lake", home / "artifacts", DAY, config)
    t = totals(report)
    assert {r.student_pricing for r in report} == {MEASURED}
    # measured speed: tokens over the seconds waited; the time priced is the time waited (cascades at the mean)
    want_seconds = waited * (1 + cascaded / answers)
    assert abs(t["student_gpu_seconds"] - want_seconds) < 1e-3 * want_seconds
    line = describe_pricing(config, report)
    assert f"measured speed (the gateway's wait on the endpoint): {tokens / waited:,.1f} tokens/s" in line
    assert "Set RATCHET_STUDENT_TOKENS_PER_SECOND" in line

    # A configured throughput in the settings, and --tokens-per-second 0 on the command line: measured again.
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.setenv("RATCHET_STUDENT_TOKENS_PER_SECOND", "5000")
    monkeypatch.setenv("RATCHET_STUDENT_GPU_PRICE_PER_HOUR", "0.4")
    out = CliRunner().invoke(cost, ["report", "--day", DAY, "--tokens-per-second", "0", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["config"]["student_pricing"] == MEASURED and data["student_pricing"] == line
    bad = CliRunner().invoke(cost, ["report", "--day", DAY, "--gpu-price-per-hour", "-1"])
    assert bad.exit_code == 2 and "--gpu-price-per-hour" in bad.output
