"""``ratchet sim``: simulate days of traffic, nights and releases offline (see ``ratchet_assets.sim.engine``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click


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
    return (
        f"day {r['day']} {r['date']}: student {r['student_share']:.1%}{shares} | served precision "
        f"{r['served_precision']:.3f} (student {'-' if sp is None else f'{sp:.3f}'}) | stage: {stages} | "
        f"cost ${cost['actual_usd']:.4f} vs all-teacher ${cost['all_teacher_usd']:.4f} "
        f"({(cost['ratio'] or 0):.1%}) | audits so far {r['audits']['cumulative']} | night "
        f"{r['night']['version']}: bound {bounds}"
    )


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
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the traffic.")
@click.option(
    "--student",
    type=click.Choice(["fast", "lora"]),
    default="fast",
    show_default=True,
    help="fast: an in-process learner standing in for the adapter; lora: real LoRA training (slow).",
)
@click.option("--audit-rate", type=float, default=0.05, show_default=True, help="Manifest audit rate.")
@click.option(
    "--teacher-model", default="gpt-4o", show_default=True, help="Price the teacher like this model."
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the lake and artifacts here (an empty folder); default a temporary folder.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole run as JSON.")
def sim(
    days: int,
    requests: int,
    workload: str,
    drift_day: int | None,
    bad_deploy_version: int | None,
    seed: int,
    student: str,
    audit_rate: float,
    teacher_model: str,
    home: Path | None,
    as_json: bool,
) -> None:
    """Simulate days of traffic, nights and releases offline, with Ratchet's own routing, night and release logic.

    Per day: share served by the student, served precision, certificate bound, stage, cost against all-teacher.
    """
    from ratchet_assets.sim.engine import SimConfig, SimError, run_sim, to_json

    config = SimConfig(
        days=days,
        requests=requests,
        workload=workload,
        drift_day=drift_day,
        bad_deploy_version=bad_deploy_version,
        seed=seed,
        student=student,
        audit_rate=audit_rate,
        teacher_model=teacher_model,
    )
    on_day = None if as_json else (lambda r: click.echo(_day_line(r)))
    try:
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
    for d in s["deployments"]:
        fate = (
            f"rolled back on day {d['rolled_back_day']} after {d['pair_rows']} audited requests"
            if d["rolled_back_day"]
            else f"{d['stage']}"
        )
        bad = " [corrupted]" if d["corrupted"] else ""
        click.echo(
            f"deployment {d['number']}: {d['version']} on {d['task']} from day {d['day']}{bad}: {fate}"
        )
