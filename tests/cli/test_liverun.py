"""The live-run harness end to end against the embedded default (demo teacher as the provider, a real gateway):
plan, smoke, a run whose --max-usd is smaller than its plan stops at the cap with nothing spent beyond it,
report against the control arm, and verify over everything it signed."""

from __future__ import annotations

import json

import pytest

from ratchet_cli import liverun as lr
from ratchet_core.control_db import make_engine
from tests.agents.stack import SCOUT_KEY

pytestmark = pytest.mark.slow  # the gateway of tests.agents.stack, as Scout's tests (~25 s to start)


def test_plan_smoke_run_capped_report_verify(stack, tmp_path) -> None:
    from ratchet_stats.keys import generate_private_key

    teacher_model = stack.settings.teacher_model
    teacher_url = stack.settings.teacher_api_base
    p = lr.plan(
        "mixed",
        rounds=2,
        requests_per_round=10,
        teacher_model=teacher_model,
        control_share=0.2,
        max_tokens=64,
    )
    assert p.requests_per_stage["control_per_round"] == 2 and p.usd_total_max > 0
    assert p.usd_total_max == pytest.approx(2 * p.usd_per_round_max)

    smoke = lr.smoke(stack.gateway_url, SCOUT_KEY, teacher_url, "sk-teacher-upstream", teacher_model, "mixed")
    assert smoke["ok"] and all(x["correct"] for x in smoke["control"])

    cap = 2 * p.usd_per_request_max  # a tenth of the plan's most: the run must stop at the cap
    nights = []
    folder = tmp_path / "run"
    engine = make_engine(stack.settings.control_db_url)
    totals = lr.run(
        folder,
        p,
        stack.gateway_url,
        SCOUT_KEY,
        teacher_url,
        "sk-teacher-upstream",
        cap,
        engine,
        nights.append,
    )
    assert totals["stopped"] is not None and totals["stopped"]["outcome"] == "denied"
    assert "spend cap" in totals["stopped"]["detail"]
    rows = [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]
    assert 0 < len(rows) < 20
    spent = sum(r["cost_usd"] for r in rows)
    assert spent <= cap and totals["spent_usd"] <= cap + 1e-12
    # it stopped because the next request's upper bound no longer fitted in what the cap left
    assert spent + max(r["bound_usd"] for r in rows) > cap - p.usd_per_request_max
    assert {r["arm"] for r in rows} == {"treatment", "control"}

    report = lr.report(folder)
    assert report["control"]["accuracy"] == 1.0 and report["treatment"]["accuracy"] == 1.0
    assert report["spent_usd"] == pytest.approx(spent)

    # A run the cap does not stop: every round, a night between rounds, both arms in every round.
    small = lr.plan("tickets", rounds=2, requests_per_round=5, teacher_model=teacher_model, control_share=0.2)
    full = lr.run(
        tmp_path / "full",
        small,
        stack.gateway_url,
        SCOUT_KEY,
        teacher_url,
        "sk-teacher-upstream",
        small.usd_total_max,
        engine,
        nights.append,
    )
    assert full["stopped"] is None and full["sent"] == 10 and nights == [0]
    assert full["spent_usd"] <= small.usd_total_max

    key = generate_private_key()
    lr.sign(folder, key)
    assert lr.verify(folder, [key.public_key()])["spent_usd"] == pytest.approx(spent)
    from click.testing import CliRunner

    from ratchet_cli.liverun_cmd import liverun
    from ratchet_stats.keys import public_key_pem

    (tmp_path / "run.pub").write_text(public_key_pem(key.public_key()))
    ok = CliRunner().invoke(liverun, ["verify", str(folder), "--key", str(tmp_path / "run.pub")])
    assert ok.exit_code == 0 and ok.output.startswith("OK: run signed"), ok.output
    planned = CliRunner().invoke(
        liverun, ["plan", "--rounds", "2", "--requests", "10", "--teacher-model", teacher_model]
    )
    assert json.loads(planned.output)["requests_per_stage"]["total"] == 26
    with (folder / "rows.jsonl").open("a") as fh:
        fh.write(json.dumps({"arm": "control", "cost_usd": 0.0}) + "\n")
    with pytest.raises(ValueError, match="rows.jsonl"):
        lr.verify(folder, [key.public_key()])
    bad = CliRunner().invoke(liverun, ["verify", str(folder), "--key", str(tmp_path / "run.pub")])
    assert bad.exit_code == 1 and "rows.jsonl" in bad.output
    with pytest.raises(Exception, match="signature"):
        lr.verify(folder, [generate_private_key().public_key()])
