"""`ratchet sim`'s release, calibration, cost and output options: each changes the outcome where it should.

The rules are the task policy's (signed into the simulated manifest), read by the sensor's own functions; the
pure rules have their own tests in tests/release/test_rules.py.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ratchet_assets.sim.cli import sim
from ratchet_assets.sim.config import SimConfig
from ratchet_assets.sim.engine import run_sim

pytestmark = pytest.mark.slow

SMALL = SimConfig(days=3, requests=250, workload="tickets", seed=7)


def _run(tmp_path, name, **changes):
    return run_sim(dataclasses.replace(SMALL, **changes), tmp_path / name)


def _moves(result, version_prefix=""):
    """(day, request index, action, to) of every admission and decision, in order."""
    return [
        (d["day"], e["request"], e["action"], e["to"])
        for d in result["days"]
        for e in d["events"]
        if e["action"] != "wait" and e["version"].startswith(version_prefix)
    ]


def _waits(result):
    return [e["message"] for d in result["days"] for e in d["events"] if e["action"] == "wait"]


def test_compare_release_runs_each_rule_on_one_seed_side_by_side(tmp_path):
    args = [
        "--days",
        "3",
        "--requests",
        "400",
        "--seed",
        "7",
        "--bad-deploy-version",
        "2",
        "--canary-audit-rate",
        "0.3",
    ]
    out = CliRunner().invoke(sim, [*args, "--compare-release", "--json", "--home", str(tmp_path / "h")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    table = data["compare_release"]
    assert set(table) == {"sequential", "wilson"} and set(data["runs"]) == set(table)
    seq, wil = table["sequential"], table["wilson"]
    assert len(seq["rolled_back"]) == len(wil["rolled_back"]) == 1  # the bad deploy, under both rules
    assert seq["audits_to_rollback"] != wil["audits_to_rollback"]
    assert wil["audits_to_rollback"][0] >= 30  # the Wilson rule waits for 30 answers at the stage
    for rule in table:  # each run signed its rule into the task policy, and kept its own lake
        assert data["runs"][rule]["summary"]["task_policy"]["release_rule"] == rule
        assert (tmp_path / "h" / rule / "lake" / "traffic").is_dir()
    text = CliRunner().invoke(sim, [*args, "--compare-release"])
    assert text.exit_code == 0, text.output
    assert "rolled back (audits to rollback)" in text.output
    assert any(line.startswith("wilson ") for line in text.output.splitlines())
    clash = CliRunner().invoke(sim, [*args, "--compare-release", "--release", "wilson"])
    assert clash.exit_code != 0 and "leave --release out" in clash.output


def test_compare_table_columns_stay_under_their_headers_with_long_rollback_lists():
    """A drift run rolls back three versions: their list is longer than the column, and the numbers after it must
    still sit under "superseded" and "reached live" (before, they slid right by the overflow)."""
    from ratchet_assets.sim.compare import comparison_lines

    def row(back: list[str]) -> dict:
        return {
            "rolled_back": back,
            "audits_to_rollback": [616, 180, 49][: len(back)],
            "superseded": ["x"] * 3,
            "reached_live": ["a", "b"],
            "student_share": 0.417,
            "served_precision": 0.9712,
            "flywheel": {},
        }

    lines = comparison_lines(
        {"sequential": row(["v1-fcd05f4a", "v2-f89e5db4", "v3-6641fe0c"]), "wilson": row([])}
    )
    header, *rows = lines
    at = header.index("superseded")
    assert [r[at] for r in rows] == ["3", "3"]
    assert [r[header.index("reached live")] for r in rows] == ["2", "2"]
    assert rows[0].endswith("41.7%    0.9712") and " none " in rows[1]


def test_promote_evidence_bound_promotes_on_fewer_audits_than_the_e_value(tmp_path):
    e_value = _moves(_run(tmp_path, "e"), "v2")
    bound = _moves(_run(tmp_path, "b", promote_evidence="bound"), "v2")
    # nothing live behind the first version: its own e-value keeps all of alpha (117 agreeing audits)
    assert e_value[:2] == [(3, 0, "admit", "shadow"), (3, 120, "promote", "canary-5")]
    assert bound[:2] == [(3, 0, "admit", "shadow"), (3, 60, "promote", "canary-5")]
    assert len(bound) > len(e_value)


def test_cert_target_and_delta_set_the_certificate_level(tmp_path):
    base = _run(tmp_path, "base")
    low_target = _run(tmp_path, "t", target=0.9)
    loose_delta = _run(tmp_path, "d", delta=0.25)
    assert _moves(base)[0][:3] == (3, 0, "admit")  # night 1's bound 0.926 < 0.95: night 2's version
    assert _moves(low_target)[0][:3] == (2, 0, "admit") and _moves(loose_delta)[0][:3] == (2, 0, "admit")
    day1 = [r["days"][0]["night"]["certificate"]["tickets"] for r in (base, loose_delta)]
    assert day1[1]["lower_bound"] > day1[0]["lower_bound"]  # a looser delta, a higher bound on the same rows
    assert low_target["summary"]["task_policy"]["target"] == 0.9


def test_min_certified_keeps_a_certified_candidate_out_of_shadow(tmp_path):
    strict = _run(tmp_path, "m", min_certified=0.98)
    assert _moves(strict) == [] and strict["summary"]["student_share"] == 0.0
    assert any("minimum certified bound 0.98" in w for w in _waits(strict))


def test_paired_gate_refuses_a_candidate_the_plain_gate_admits(tmp_path):
    """Night 2's version is wrong on 10% of requests: certified at 0.7, but worse than live v1 on the same
    golden rows (exact McNemar)."""
    cfg = dict(requests=300, seed=3, target=0.7, worse_version=2)
    plain = _run(tmp_path, "plain", **cfg)
    gated = _run(tmp_path, "gated", **cfg, paired_gate=True)
    cert = plain["days"][1]["night"]["certificate"]["tickets"]
    assert cert["certified"] and cert["mcnemar"]["c"] > 5 and cert["mcnemar"]["b"] == 0
    worse = plain["days"][1]["night"]["version"]
    assert [d["version"] for d in plain["summary"]["deployments"]][:2] == ["v1-9e3c0d66", worse]
    assert worse not in [d["version"] for d in gated["summary"]["deployments"]]
    assert any(w.startswith(worse) and "the paired gate" in w and "worse than the live version" in w
               for w in _waits(gated))  # fmt: skip


def test_the_evidence_budget_rolls_a_bad_deploy_back_on_its_first_day_at_the_default_rates(tmp_path):
    """Before the evidence budget (``release.budget``), at the default 5% a bad deploy beside a live version met
    20 audits a day and was superseded by the next night's version before its evidence said anything. It differs
    from live on 30% of the requests live serves, so its mirrored answers carry nothing either."""
    run = _run(tmp_path, "budget", days=4, requests=400, bad_deploy_version=2)
    bad = next(d for d in run["summary"]["deployments"] if d["corrupted"])
    assert bad["rolled_back_day"] == bad["day"] == 3 and bad["max_percent"] == 0.0
    assert bad["audits_to_rollback"] <= 200
    assert run["days"][3]["audits"]["audit_pairs"] > 3 * 20  # the budget's rate, not 5%
    # the good version after it agrees with live v1 (well audited) on its mirrored answers: carried past shadow
    carried = [e for d in run["days"] for e in d["events"] if "carried bound" in e.get("message", "")]
    assert carried and carried[0]["action"] == "promote" and carried[0]["version"] != bad["version"]


def test_sim_json_shows_each_admissions_evidence_budget_as_the_readme_computes_it(tmp_path):
    """`ratchet sim --json` carries every admission's audit rate, targeted rate and reason (before: only a
    preempting admission had a message, so the budget the README works through was in no output). At 600 requests
    a day the rate beside a live version is the README's: 1.25 x 4 x 144 = 720 audits a day asked, 720 / 600 = 1.2,
    capped at 0.25; the mirrored answers it names are 1.25 x 4 x mirror_per_stage at the carry level it names."""
    import math
    import re

    from ratchet_assets.release.budget import DEFAULT_MAX_RATE, MARGIN, mirror_per_stage
    from ratchet_assets.release.decision import ReleaseRule

    run = _run(tmp_path, "budget600", days=3, requests=600)
    admits = [e for d in run["days"] for e in d["events"] if e["action"] == "admit"]
    first, beside_live = admits[0], admits[1]
    # nothing live: every shadowed request is already paired with the teacher's answer, no budget to sign
    assert "certified by" in first["message"] and "audit_rate" not in first
    assert beside_live["version"] != first["version"] and "(it also watches live)" in beside_live["message"]
    assert beside_live["audit_rate"] == min(DEFAULT_MAX_RATE, MARGIN * 4 * 144 / 600) == 0.25
    assert beside_live["target_audit_rate"] == 1.0  # no evidence_spend_usd: every differing answer is judged
    assert "audit rate 0.25" in beside_live["message"]
    carried = re.search(r"more than ([0-9.]+); ([0-9]+) mirrored answers", beside_live["message"])
    assert carried, beside_live["message"]
    u, mirrored = float(carried.group(1)), int(carried.group(2))
    assert mirrored == math.ceil(MARGIN * 4 * mirror_per_stage(ReleaseRule(), u))


def test_a_newer_certified_version_waits_behind_the_candidate_then_the_stale_one_is_preempted(tmp_path):
    run = _run(tmp_path, "s", days=4, requests=400)
    deps = {d["number"]: d for d in run["summary"]["deployments"]}
    assert deps[1]["live_day"] == 3 and deps[2]["day"] == 3  # v1 went live, then v2 entered shadow behind it
    # it kept the slot on day 4 (its mirrored answers carried it past canary 5%: live v1 is well audited)
    assert deps[2]["stage"].startswith("canary") and deps[2]["superseded_day"] is None
    waits = [e for e in run["days"][3]["events"] if e["action"] == "wait"]
    assert waits and f"waits behind {deps[2]['version']}" in waits[0]["message"]
    assert run["days"][3]["stages"]["tickets"]["previous_live"] == deps[1]["version"]
    # With a one-day slot, day 4's newcomer finds v2 stale (held 1 day, > 0) and preempts it, evidence kept.
    fast = _run(tmp_path, "stale", days=4, requests=400, max_candidate_days=0)
    deps = {d["number"]: d for d in fast["summary"]["deployments"]}
    assert (deps[2]["stage"], deps[2]["superseded_day"], deps[2]["superseded_by"]) == (
        "superseded",
        4,
        deps[3]["version"],
    )
    (admit,) = [e for e in fast["days"][3]["events"] if e["action"] == "admit"]
    assert admit["supersedes"] == deps[2]["version"]
    assert "held the candidate slot 1 days (> 0)" in admit["message"]
    assert admit["its_evidence"]["preemption"]["slot_days"] == 1


def test_calibration_point_is_signed_and_never_stricter_than_ltt(tmp_path):
    """The fast student's certified tasks have no low-confidence errors, so both rules pick the same thresholds
    here; tests/release/test_rules.py shows golden rows where they differ and what the release then serves."""
    run = run_sim(
        SimConfig(days=3, requests=300, workload="mixed", seed=3, calibration="point"), tmp_path / "p"
    )
    assert run["summary"]["task_policy"]["calibration"] == "point"
    for day in run["days"]:
        for cert in day["night"]["certificate"].values():
            if cert["threshold"] is not None:
                assert cert["point_threshold"] is not None and cert["point_threshold"] <= cert["threshold"]


def test_receipts_reasoning_tokens_and_a_home_that_replay_reads(tmp_path):
    from ratchet_assets.replay.cli import replay_cmd
    from ratchet_stats.cli import main as stats_main

    home = tmp_path / "home"
    args = ["--days", "3", "--requests", "250", "--seed", "7", "--cert-target", "0.9", "--receipts"]
    out = CliRunner().invoke(
        sim, [*args, "--teacher-reasoning-mean", "300", "--teacher-reasoning-cv", "1.0", "--home", str(home)]
    )
    assert out.exit_code == 0, out.output
    assert "receipts: teacher-equivalent" in out.output and "vs true all-teacher" in out.output
    plain = json.loads(CliRunner().invoke(sim, [*args, "--json"]).output)
    data = json.loads(CliRunner().invoke(sim, [*args, "--json", "--teacher-reasoning-mean", "300",
                                               "--teacher-reasoning-cv", "1.0"]).output)  # fmt: skip
    # Reasoning is billed as completion: the all-teacher cost grows by about 300 tokens at $10/M per request.
    extra = data["summary"]["all_teacher_usd"] - plain["summary"]["all_teacher_usd"]
    assert 0.8 * 750 * 300 * 10e-6 < extra < 1.2 * 750 * 300 * 10e-6
    for day in data["days"]:
        rc = day["receipt"]
        assert rc["true_all_teacher_usd"] == day["cost"]["all_teacher_usd"]
        # Estimated from the day's teacher answers: reasoning with cv 1 over the ~80 teacher answers of day 3 has a
        # standard error of about 1 / sqrt(80) = 11% (day 3 measured -2.6% at 24 audits, -9.3% at the evidence
        # budget's 56: a different sample, not a worse estimator), so the bound is three of those on the day's mean
        # reasoning share.
        assert rc["estimated_usd"] == 0 or abs(rc["estimate_error"]) < 0.15
    assert data["days"][-1]["receipt"]["estimated_usd"] > 0  # answers: student-served rows were estimated

    rows = [
        r for p in sorted(home.glob("lake/traffic/day=*/*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    reasoning = [
        r["reasoning_tokens"] for r in rows if r["served_by"] == "teacher" and r["kind"] == "request"
    ]
    assert 250 < statistics.mean(reasoning) < 350 and 0.8 < statistics.pstdev(reasoning) / 300 < 1.2  # cv 1
    day3 = home / "artifacts" / "receipts" / "2026-01-07"
    assert (
        stats_main(["verify", "receipt", str(day3 / "receipt.dsse.json"), "--key", str(home / "sim-receipt-key.pub"),
                    "--rows", str(day3 / "rows.parquet"),
                    "--prev", str(home / "artifacts" / "receipts" / "2026-01-06" / "receipt.dsse.json")])
        == 0
    )  # fmt: skip

    replayed = CliRunner().invoke(
        replay_cmd, ["--task", "tickets", "--from", "2026-01-05", "--to", "2026-01-07", "--lake",
                     str(home / "lake"), "--json"],
    )  # fmt: skip
    assert replayed.exit_code == 0, replayed.output
    r = json.loads(replayed.output)
    assert r["reproduced"] and r["actual"]["requests"] == 750
    assert r["actual"]["student_served"] == round(sum(d["student_share"] * 250 for d in data["days"]))


def test_release_options_are_checked_with_a_clear_message():
    for args, needle in (
        (["--canary-audit-rate", "1.5"], "--canary-audit-rate must be between 0 and 1"),
        (["--cert-target", "1"], "--cert-target must be strictly between 0 and 1"),
        (["--min-certified", "0"], "--min-certified must be strictly between 0 and 1"),
        (["--teacher-reasoning-cv", "-1"], "--teacher-reasoning-mean and --teacher-reasoning-cv are >= 0"),
        (["--worse-version", "0"], "--worse-version counts nights from 1"),
    ):
        out = CliRunner().invoke(sim, ["--days", "1", "--requests", "10", *args])
        assert out.exit_code != 0 and needle in out.output, (args, out.output)


def test_the_summary_measures_the_flywheel_per_task_and_the_spend_cap_holds(tmp_path):
    """`ratchet sim --json` reports per task: versions minted and reaching live, days from certificate to live,
    days below target and the teacher's pay for audits (the evidence spend), which the policy's cap bounds."""
    free = _run(tmp_path, "free", days=6, requests=600, seed=5)["summary"]["flywheel"]["tickets"]
    assert free["versions_minted"] == 6 and free["versions_reached_live"] >= 2
    assert all(1 <= d <= 4 for d in free["days_certificate_to_live"]) and free["days_below_target"] == []
    capped = _run(tmp_path, "cap", days=6, requests=600, seed=5, evidence_spend_usd=0.015)["summary"][
        "flywheel"
    ]
    assert 0 < capped["tickets"]["evidence_spend_usd"] <= 0.015 * 6 < free["evidence_spend_usd"]
