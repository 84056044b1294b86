"""``cost_report``: teacher spend, student GPU time and training cost per day and task, with the break-even volume.

The computation is ``ratchet_assets.cost.cost_report``; this module is its Dagster asset (numeric metadata per
partition, so the UI plots the series) and ``ratchet cost report [--day D] [--json]``.
"""

# No `from __future__ import annotations`: Dagster resolves the Config annotation at definition time.
import json
import sys
from pathlib import Path
from typing import Any

import click
import dagster as dg

from ratchet_assets.cli_names import names_checked
from ratchet_assets.defs.partitions import daily_partitions
from ratchet_assets.defs.resources import ModelEndpoints, RatchetPaths
from ratchet_core.artifact_store import publishes_artifacts


class CostReportConfig(dg.Config):
    """Prices: the student endpoint's GPU and the training machine, USD per hour; tokens_per_second > 0 measures the
    student's time from tokens instead of the gateway's measured wait."""

    gpu_price_per_hour: float = 2.5
    training_price_per_hour: float = 2.5
    tokens_per_second: float = 0.0


def _config(cfg: Any, teacher_model: str) -> Any:
    from ratchet_assets.cost import CostConfig

    return CostConfig(
        teacher_model=teacher_model,
        gpu_price_per_hour=cfg.gpu_price_per_hour,
        training_price_per_hour=cfg.training_price_per_hour,
        tokens_per_second=cfg.tokens_per_second,
    )


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
    from ratchet_assets.cost import totals
    from ratchet_assets.night import markdown_table
    from ratchet_core.lake import atomic_write_bytes

    day = context.partition_key
    rows = compute(
        paths.lake_root(), paths.artifacts_root(), day, _config(config, models.teacher_model or "gpt-4o")
    )
    data = {"day": day, "tasks": [r.as_dict() for r in rows], "totals": totals(rows)}
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
                        "never"
                        if r.break_even_requests_per_day is None
                        else f"{r.break_even_requests_per_day:.0f}",
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
@click.option("--gpu-price-per-hour", type=float, default=2.5, show_default=True)
@click.option("--training-price-per-hour", type=float, default=2.5, show_default=True)
@click.option("--tokens-per-second", type=float, default=0.0, help="> 0: student time from tokens.")
@click.option("--lake", default="", help="Lake (default: RATCHET_LAKE_ROOT).")
@click.option("--artifacts", default="", help="Artifacts root (default: RATCHET_ARTIFACTS_ROOT).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def report_cmd(
    days: tuple[str, ...],
    gpu_price_per_hour: float,
    training_price_per_hour: float,
    tokens_per_second: float,
    lake: str,
    artifacts: str,
    as_json: bool,
) -> None:
    """Teacher spend, student GPU time, training cost and the break-even volume per day and task."""
    from ratchet_assets.cost import CostConfig, cost_report, totals
    from ratchet_core.lake import Lake
    from ratchet_core.settings import load_settings

    s = load_settings()
    lake = lake or s.lake_root
    artifacts = artifacts or s.artifacts_root
    for name, v in (
        ("gpu-price-per-hour", gpu_price_per_hour),
        ("training-price-per-hour", training_price_per_hour),
    ):
        if v < 0:
            click.echo(f"error: --{name} must be >= 0 (got {v})", err=True)
            sys.exit(2)
    config = CostConfig(
        s.teacher_model or "gpt-4o", gpu_price_per_hour, training_price_per_hour, tokens_per_second
    )
    out = []
    for day in days or Lake(lake).days():
        rows = cost_report(lake, artifacts, day, config)
        out.append({"day": day, "tasks": [r.as_dict() for r in rows], "totals": totals(rows)})
    if as_json:
        click.echo(json.dumps({"config": config.__dict__, "days": out}, indent=2, sort_keys=True))
        return
    click.echo(f"{'day':<11} {'task':<10} {'req':>5} {'stud':>5} {'teacher$':>10} {'equiv$':>10} {'gpu s':>8} "
               f"{'student$':>9} {'train$':>8} {'saved$':>9} {'break-even/day':>14}")  # fmt: skip
    for d in out:
        for r in d["tasks"]:
            be = r["break_even_requests_per_day"]
            click.echo(
                f"{d['day']:<11} {r['task']:<10} {r['requests']:>5} {r['student_served']:>5} "
                f"{r['teacher_paid_usd']:>10.4f} {r['teacher_equivalent_usd']:>10.4f} {r['student_gpu_seconds']:>8.1f} "
                f"{r['student_cost_usd']:>9.4f} {r['training_cost_usd']:>8.4f} {r['saved_usd']:>9.4f} "
                f"{'never' if be is None else f'{be:.0f}':>14}"
            )
