"""``ratchet sim``: simulate days of traffic, nights and releases offline (see ``ratchet_assets.sim.engine``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from ratchet_assets.release.options import release_options


def _day_line(r: dict[str, Any]) -> str:
    stages = ", ".join(
        f"{task} {s['stage']}{' ' + s['version'] if s['version'] else ''}" for task, s in r["stages"].items()
    )
    bounds = ", ".join(
        f"{task} {c['lower_bound']:.3f}{'' if c['certified'] else ' (not certified)'}"
        for task, c in r["night"]["certificate"].items()
    )
    sp = r["student_precision"]
    cost = r["cost"]
    per_task = r["student_share_per_task"]
    shares = f" ({', '.join(f'{t} {v:.1%}' for t, v in per_task.items())})" if len(per_task) > 1 else ""
    line = (
        f"day {r['day']} {r['date']}: student {r['student_share']:.1%}{shares} | served precision "
        f"{r['served_precision']:.3f} (student {'-' if sp is None else f'{sp:.3f}'}) | stage: {stages} | "
        f"cost ${cost['actual_usd']:.4f} vs all-teacher ${cost['all_teacher_usd']:.4f} "
        f"({(cost['ratio'] or 0):.1%}) | audits so far {r['audits']['cumulative']} | night "
        f"{r['night']['version']}: bound {bounds}"
    )
    if "training" in r["night"]:  # --student lora: how the night started, on how many rows, in how many steps
        t = r["night"]["training"]
        start = "warm " + t["reason"] if t["start"] == "warm" else "cold"
        line += f" | trained {start}, {t['rows']} rows, {t['steps']} steps"
    if "receipt" in r:
        rc = r["receipt"]
        line += (
            f" | receipt {rc['envelope_digest'][:12]}: teacher-equivalent ${rc['teacher_equivalent_usd']:.4f} "
            f"(estimated ${rc['estimated_usd']:.4f}) vs true ${rc['true_all_teacher_usd']:.4f} "
            f"({rc['estimate_error']:+.1%}), paid ${rc['paid_usd']:.4f}"
        )
    return line


def _deployment_line(d: dict[str, Any]) -> str:
    if d["rolled_back_day"]:
        fate = f"rolled back on day {d['rolled_back_day']} after {d['audits_to_rollback']} audited answers"
    elif d["superseded_day"]:
        fate = (
            f"superseded on day {d['superseded_day']} by {d['superseded_by']} at {d['pair_rows']} pair rows"
        )
    else:
        fate = d["stage"]
    bad = " [corrupted]" if d["corrupted"] else ""
    return f"deployment {d['number']}: {d['version']} on {d['task']} from day {d['day']}{bad}: {fate}"


@click.command("sim")
@click.option("--days", type=int, default=7, show_default=True, help="Days to simulate.")
@click.option("--requests", type=int, default=600, show_default=True, help="Requests per day.")
@click.option(
    "--workload",
    type=click.Choice(["tickets", "extract", "tools", "mixed"]),
    default="tickets",
    show_default=True,
    help="Built-in workload.",
)
@click.option("--drift-day", type=int, default=None, help="First day (from 1) with drifted traffic.")
@click.option(
    "--bad-deploy-version",
    type=int,
    default=None,
    help="The V-th deployed version passes its certificate but answers 30% of requests wrong.",
)
@click.option(
    "--worse-version",
    type=int,
    default=None,
    help="The version of night V answers 10% of requests wrong, golden rows included: certified at a low "
    "--cert-target but worse than live (what --paired-gate refuses).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the traffic.")
@click.option(
    "--student",
    type=click.Choice(["fast", "lora"]),
    default="fast",
    show_default=True,
    help="fast: an in-process learner standing in for the adapter; lora: real LoRA training (slow).",
)
@click.option("--audit-rate", type=float, default=0.05, show_default=True, help="Manifest audit rate.")
@release_options
@click.option("--cert-target", type=float, default=0.95, show_default=True, help="Certification target.")
@click.option("--cert-delta", type=float, default=0.05, show_default=True, help="Certification delta.")
@click.option(
    "--compare-release",
    is_flag=True,
    help="Run once per release rule with the same seed and compare them side by side.",
)
@click.option(
    "--receipts",
    is_flag=True,
    help="Seal each day's receipt with the night's receipt code, beside the true all-teacher cost.",
)
@click.option(
    "--teacher-reasoning-mean",
    type=float,
    default=0.0,
    show_default=True,
    help="Mean reasoning tokens the teacher bills per call (as completion tokens).",
)
@click.option(
    "--teacher-reasoning-cv",
    type=float,
    default=0.0,
    show_default=True,
    help="Spread of the reasoning tokens: standard deviation / mean (Gamma-distributed, seeded).",
)
@click.option(
    "--teacher-model", default="gpt-4o", show_default=True, help="Price the teacher like this model."
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the lake (for `ratchet replay --lake HOME/lake`) and artifacts here (an empty folder; with "
    "--compare-release one subfolder per rule); default a temporary folder.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole run as JSON.")
def sim(
    days: int,
    requests: int,
    workload: str,
    drift_day: int | None,
    bad_deploy_version: int | None,
    worse_version: int | None,
    seed: int,
    student: str,
    audit_rate: float,
    release_rule: str | None,
    promote_evidence: str | None,
    canary_audit_rate: float | None,
    calibration: str | None,
    cert_target: float,
    cert_delta: float,
    paired_gate: bool | None,
    min_certified: float | None,
    max_candidate_days: int | None,
    evidence_spend_usd: float | None,
    compare_release: bool,
    receipts: bool,
    teacher_reasoning_mean: float,
    teacher_reasoning_cv: float,
    teacher_model: str,
    home: Path | None,
    as_json: bool,
) -> None:
    """Simulate days of traffic, nights and releases offline, with Ratchet's own routing, night and release logic.

    Per day: share served by the student, served precision, certificate bound, stage, cost against all-teacher.
    The release and calibration options are the task policy `ratchet admin task set` signs (same names).
    """
    from ratchet_assets.sim.config import SimConfig, SimError
    from ratchet_assets.sim.engine import run_sim, to_json

    config = SimConfig(
        days=days,
        requests=requests,
        workload=workload,
        drift_day=drift_day,
        bad_deploy_version=bad_deploy_version,
        worse_version=worse_version,
        seed=seed,
        student=student,
        audit_rate=audit_rate,
        release_rule=release_rule,
        promote_evidence=promote_evidence,
        canary_audit_rate=canary_audit_rate,
        calibration=calibration,
        target=cert_target,
        delta=cert_delta,
        paired_gate=bool(paired_gate),
        min_certified=min_certified,
        max_candidate_days=max_candidate_days,
        evidence_spend_usd=evidence_spend_usd,
        receipts=receipts,
        teacher_reasoning_mean=teacher_reasoning_mean,
        teacher_reasoning_cv=teacher_reasoning_cv,
        teacher_model=teacher_model,
    )
    if compare_release and release_rule is not None:
        raise click.UsageError("--compare-release runs every --release rule: leave --release out")
    on_day = None if as_json else (lambda r: click.echo(_day_line(r)))
    try:
        if compare_release:
            _compare(config, home, as_json)
            return
        if home is None:
            with tempfile.TemporaryDirectory(prefix="ratchet-sim-") as tmp:
                result = run_sim(config, tmp, on_day)
        else:
            result = run_sim(config, home, on_day)
    except SimError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(to_json(result), nl=False)
        return
    s = result["summary"]
    click.echo(
        f"total: {s['requests']} requests, student {s['student_share']:.1%}, served precision "
        f"{s['served_precision']:.3f}, cost ${s['actual_usd']:.4f} vs all-teacher ${s['all_teacher_usd']:.4f} "
        f"(saved ${s['saved_usd']:.4f})"
    )
    if "receipts" in s:
        rc = s["receipts"]
        click.echo(
            f"receipts: teacher-equivalent ${rc['teacher_equivalent_usd']:.4f} vs true all-teacher "
            f"${rc['true_all_teacher_usd']:.4f} ({rc['estimate_error']:+.2%}); verify with `ratchet verify "
            f"receipt` and the key {rc['public_key']} in the home"
        )
    for d in s["deployments"]:
        click.echo(_deployment_line(d))
    for line in flywheel_lines(s["flywheel"]):
        click.echo(line)


def flywheel_lines(flywheel: dict[str, Any]) -> list[str]:
    """One line per task: versions minted, reaching live, days to live, days below target, evidence spend."""
    return [
        f"{task}: {f['versions_minted']} versions minted ({f['recertified_nights']} nights re-certified one), "
        f"{f['versions_deployed']} deployed, {f['versions_reached_live']} reached live (days from certificate to "
        f"live: {', '.join(map(str, f['days_certificate_to_live'])) or '-'}), days below target: "
        f"{', '.join(map(str, f['days_below_target'])) or 'none'}, evidence spend ${f['evidence_spend_usd']:.4f}"
        for task, f in flywheel.items()
    ]


def _compare(config: Any, home: Path | None, as_json: bool) -> None:
    from ratchet_assets.sim.compare import compare_release, comparison_lines
    from ratchet_assets.sim.engine import to_json

    def progress(rule: str, run: dict[str, Any]) -> None:
        if not as_json:
            click.echo(f"--release {rule}:")
            for d in run["summary"]["deployments"]:
                click.echo("  " + _deployment_line(d))

    result = compare_release(config, home, progress)
    if as_json:
        click.echo(to_json(result), nl=False)
        return
    for line in comparison_lines(result["compare_release"]):
        click.echo(line)
