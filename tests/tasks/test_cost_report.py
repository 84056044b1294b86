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
