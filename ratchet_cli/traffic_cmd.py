"""`ratchet traffic`: drive an OpenAI-compatible endpoint (the gateway, the demo teacher) with a built-in
workload and report errors, latency, who served, and accuracy by the workload's own comparator."""

from __future__ import annotations

import json
import sys

import click


@click.command("traffic")
@click.option(
    "--base-url", default="http://127.0.0.1:8100/v1", show_default=True, help="OpenAI-compatible base URL."
)
@click.option(
    "--api-key",
    envvar="OPENAI_API_KEY",
    required=True,
    help="Client bearer key for the endpoint (or $OPENAI_API_KEY).",
)
@click.option(
    "--workload",
    type=click.Choice(["tickets", "extract", "tools", "mixed", "research"]),
    default="mixed",
    show_default=True,
    help="Built-in workload to send.",
)
@click.option("--requests", "n_requests", default=100, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--concurrency", default=8, show_default=True, type=click.IntRange(min=1), help="Requests in flight."
)
@click.option(
    "--seed", default=0, show_default=True, help="Seed of the workload and of which requests stream."
)
@click.option("--model", default="ratchet", show_default=True, help="Model name to send.")
@click.option("--day", default=0, show_default=True, type=click.IntRange(min=0), help="Workload day.")
@click.option(
    "--drift-day", default=None, type=click.IntRange(min=0), help="Day from which the workload drifts."
)
@click.option(
    "--stream-share",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of streamed requests.",
)
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def traffic(
    base_url: str,
    api_key: str,
    workload: str,
    n_requests: int,
    concurrency: int,
    seed: int,
    model: str,
    day: int,
    drift_day: int | None,
    stream_share: float,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Send a built-in workload to BASE_URL and summarise errors, latency, served-by and accuracy."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ratchet_cli.loadgen import normalise_base_url, run_traffic

    try:
        base_url = normalise_base_url(base_url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--base-url") from None

    err_console = Console(stderr=True)
    columns = (TextColumn("traffic"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as progress:
        bar = progress.add_task("traffic", total=n_requests)
        summary = run_traffic(
            base_url,
            api_key,
            workload=workload,
            requests=n_requests,
            concurrency=concurrency,
            seed=seed,
            model=model,
            day=day,
            drift_day=drift_day,
            stream_share=stream_share,
            timeout_s=timeout_s,
            on_progress=lambda done, total: progress.update(bar, completed=done),
        )

    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
    else:
        _print_summary(summary)
    if summary["ok"] == 0:
        first = summary["error_samples"][0] if summary["error_samples"] else "none"
        click.echo(
            f"no request succeeded; check that {base_url} is up and --api-key / --model are right "
            f"(first error: {first})",
            err=True,
        )
        sys.exit(1)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _print_summary(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ratchet traffic: {s['workload']} x {s['sent']} (concurrency {s['concurrency']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    acc = "-" if s["accuracy"] is None else f"{s['accuracy']:.2%}"
    lat = s["latency_ms"]
    rows = [
        ("ok / sent", f"{s['ok']} / {s['sent']}"),
        ("errors", f"{s['errors']} {s['errors_by_type'] or ''}".strip()),
        ("correct (accuracy)", f"{s['correct']} ({acc})"),
        ("latency p50 / p90 / p99 / max ms", " / ".join(_fmt(lat[k]) for k in ("p50", "p90", "p99", "max"))),
        ("served by", ", ".join(f"{k}={v}" for k, v in s["served_by"].items()) or "-"),
        ("versions", ", ".join(f"{k}={v}" for k, v in s["versions"].items()) or "-"),
        ("streamed", str(s["streamed"])),
        ("requests/s", _fmt(s["requests_per_second"])),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
