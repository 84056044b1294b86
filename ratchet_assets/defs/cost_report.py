"""``cost_report``: teacher spend, student GPU time and training cost per day and task, with the break-even volume.

The computation is ``ratchet_assets.cost.cost_report``; this module is its Dagster asset (numeric metadata per
partition, so the UI plots the series) and ``ratchet cost report [--day D] [--json]``.
"""

# No `from __future__ import annotations`: Dagster resolves the Config annotation at definition time.
import json
from pathlib import Path
from typing import Any

import click
import dagster as dg

from ratchet_assets.cli_names import names_checked
from ratchet_assets.cost import break_even_text, cost_config
from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ModelEndpoints, RatchetPaths
from ratchet_core.artifact_store import publishes_artifacts


class CostReportConfig(dg.Config):
    """Prices (USD per hour) of the student endpoint's GPU and of the training machine, and the deployment's vLLM
    throughput per GPU (tokens/s; 0 = the endpoint's measured speed). Unset: the settings' (RATCHET_STUDENT_GPU_
    PRICE_PER_HOUR, RATCHET_TRAINING_PRICE_PER_HOUR, RATCHET_STUDENT_TOKENS_PER_SECOND)."""

    gpu_price_per_hour: float | None = None
    training_price_per_hour: float | None = None
    tokens_per_second: float | None = None


def report_path(artifacts: str | Path, day: str) -> Path:
    return Path(artifacts) / "reports" / f"day={day}" / "cost_report.json"


@dg.asset(
    partitions_def=daily_partitions,
    deps=["traffic"],
    group_name="night",
    kinds={"python", "json"},
)
@publishes_artifacts  # what it wrote goes to RATCHET_ARTIFACTS_URL (a no-op without it)
def cost_report(
    context: dg.AssetExecutionContext, config: CostReportConfig, paths: RatchetPaths, models: ModelEndpoints
) -> dg.MaterializeResult:
    """Teacher spend, student GPU time, training cost and break-even volume for the day, per task."""
    from ratchet_assets.cost import cost_report as compute
    from ratchet_assets.cost import describe_pricing, totals
    from ratchet_assets.night import markdown_table
    from ratchet_core.lake import atomic_write_bytes
    from ratchet_core.settings import load_settings

    day = context.partition_key
    settings = load_settings()
    if models.teacher_model:
        settings.teacher_model = models.teacher_model
    prices = cost_config(
        settings, config.gpu_price_per_hour, config.training_price_per_hour, config.tokens_per_second
    )
    rows = compute(paths.lake_root(), paths.artifacts_root(), day, prices)
    pricing = describe_pricing(prices, rows)
    context.log.info(pricing)
    data = {
        "day": day,
        "student_pricing": pricing,
        "tasks": [r.as_dict() for r in rows],
        "totals": totals(rows),
    }
    path = report_path(paths.artifacts_root(), day)
    atomic_write_bytes(path, json.dumps(data, indent=2, sort_keys=True).encode() + b"\n")
    t = data["totals"]
    meta: dict[str, Any] = {
        "dagster/uri": dg.MetadataValue.path(str(path)),
        "teacher_paid_usd": dg.MetadataValue.float(t["teacher_paid_usd"]),
        "teacher_equivalent_usd": dg.MetadataValue.float(t["teacher_equivalent_usd"]),
        "student_cost_usd": dg.MetadataValue.float(t["student_cost_usd"]),
        "student_gpu_seconds": dg.MetadataValue.float(t["student_gpu_seconds"]),
        "training_cost_usd": dg.MetadataValue.float(t["training_cost_usd"]),
        "training_seconds": dg.MetadataValue.float(t["training_seconds"]),
        "total_cost_usd": dg.MetadataValue.float(t["total_cost_usd"]),
        "saved_usd": dg.MetadataValue.float(t["saved_usd"]),
        "student_share": dg.MetadataValue.float(
            t["student_served"] / t["requests"] if t["requests"] else 0.0
        ),
        "student_pricing": dg.MetadataValue.text(pricing),
        "summary": dg.MetadataValue.md(
            markdown_table(
                [
                    "task",
                    "requests",
                    "student",
                    "teacher $",
                    "student $",
                    "training $",
                    "saved $",
                    "break-even/day",
                ],
                [
                    [
                        r.task,
                        r.requests,
                        r.student_served,
                        f"{r.teacher_paid_usd:.4f}",
                        f"{r.student_cost_usd:.4f}",
                        f"{r.training_cost_usd:.4f}",
                        f"{r.saved_usd:.4f}",
                        break_even_text(r.break_even_requests_per_day),
                    ]
                    for r in rows
                ],
            )  # fmt: skip
        ),
    }
    return dg.MaterializeResult(metadata=meta)


@click.group("cost")
def cost() -> None:
    """Cost reports."""


@cost.command("report")
@click.option(
    "--day",
    "days",
    multiple=True,
    callback=names_checked("day"),
    help="Day(s) YYYY-MM-DD (default: every day in the lake).",
)
@click.option(
    "--gpu-price-per-hour",
    type=click.FloatRange(min=0),
    default=None,
    help="USD per hour of one student GPU (default: RATCHET_STUDENT_GPU_PRICE_PER_HOUR, 2.5).",
)
@click.option(
    "--training-price-per-hour",
    type=click.FloatRange(min=0),
    default=None,
    help="USD per hour of the training machine (default: RATCHET_TRAINING_PRICE_PER_HOUR, 2.5).",
)
@click.option(
    "--tokens-per-second",
    type=click.FloatRange(min=0),
    default=None,
    help="The deployment's vLLM throughput per GPU, prompt + completion tokens/s: pricing model 'configured' "
    "(default: RATCHET_STUDENT_TOKENS_PER_SECOND; 0 or unset: 'measured', the endpoint's own speed).",
)
@click.option("--lake", default="", help="Lake (default: RATCHET_LAKE_ROOT).")
@click.option("--artifacts", default="", help="Artifacts root (default: RATCHET_ARTIFACTS_ROOT).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def report_cmd(
    days: tuple[str, ...],
    gpu_price_per_hour: float | None,
    training_price_per_hour: float | None,
    tokens_per_second: float | None,
    lake: str,
    artifacts: str,
    as_json: bool,
) -> None:
    """Teacher spend, student GPU time, training cost and the break-even volume per day and task.

    The student is priced by a stated model, printed first: 'configured' (the deployment's vLLM throughput per
    GPU) or 'measured' (the endpoint's own speed as the gateway waited on it)."""
    from ratchet_assets.cost import cost_report, describe_pricing, totals
    from ratchet_core.lake import Lake
    from ratchet_core.settings import SettingsError, load_settings

    try:
        s = load_settings()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    lake = lake or s.lake_root
    artifacts = artifacts or s.artifacts_root
    config = cost_config(s, gpu_price_per_hour, training_price_per_hour, tokens_per_second)
    out, every = [], []
    for day in days or Lake(lake).days():
        rows = cost_report(lake, artifacts, day, config)
        every += rows
        out.append({"day": day, "tasks": [r.as_dict() for r in rows], "totals": totals(rows)})
    pricing = describe_pricing(config, every)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "config": {**config.__dict__, "student_pricing": config.student_pricing},
                    "student_pricing": pricing,
                    "days": out,
                },
                indent=2,
                sort_keys=True,
            )  # fmt: skip
        )
        return
    click.echo(pricing)
    click.echo(f"{'day':<11} {'task':<10} {'req':>5} {'stud':>5} {'teacher$':>10} {'equiv$':>10} {'gpu s':>8} "
               f"{'student$':>9} {'train$':>8} {'saved$':>9} {'break-even/day':>14}")  # fmt: skip
    for d in out:
        for r in d["tasks"]:
            be = r["break_even_requests_per_day"]
            click.echo(
                f"{d['day']:<11} {r['task']:<10} {r['requests']:>5} {r['student_served']:>5} "
                f"{r['teacher_paid_usd']:>10.4f} {r['teacher_equivalent_usd']:>10.4f} {r['student_gpu_seconds']:>8.1f} "
                f"{r['student_cost_usd']:>9.4f} {r['training_cost_usd']:>8.4f} {r['saved_usd']:>9.4f} "
                f"{break_even_text(be):>14}"
            )
