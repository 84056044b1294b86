"""`ratchet demo`: the whole loop on this machine.

Starts the demo teacher, the student server, the gateway and Dagster (`dagster dev`: webserver + daemon) on
loopback as child processes, drives the built-in workload through the gateway every day, runs every night in
Dagster (traffic -> examples -> golden split -> training set -> adapter -> certificate -> BOM, and the signed
daily receipt), and lets the release sensor promote what the statistics certify. Ctrl-C stops everything; run it
again to resume (state under ``$RATCHET_HOME/demo/``). Parts: ``ratchet_cli.demo``.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click


def _sigterm_as_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


_STOP_SIGNALS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _sigterm_as_interrupt}


def _own_stop_signals() -> dict:
    """Ctrl-C and SIGTERM stop the demo whatever it inherited; returns the handlers it replaced.

    A process started with SIGINT ignored (a background job of a non-interactive shell, some CI runners) keeps it
    ignored, and a blocked SIGINT stays blocked across exec: without its own handler and mask Ctrl-C would be lost.
    The services it starts then get the default disposition too (exec resets a handler, not an ignore).
    """
    previous = {sig: signal.signal(sig, handler) for sig, handler in _STOP_SIGNALS.items()}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_STOP_SIGNALS))
    return previous


@click.command("demo")
@click.option(
    "--days",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many days in total (a rerun continues up to it). Default: until Ctrl-C.",
)
@click.option(
    "--day-seconds",
    type=click.FloatRange(min=5.0),
    default=None,
    help="Accelerated clock: one day lasts this many real seconds. Default: real UTC days.",
)
@click.option(
    "--requests-per-day",
    type=click.IntRange(min=1),
    default=600,
    show_default=True,
    help="Requests sent a day (600: enough golden rows on day 1 to certify with an error or two).",
)
@click.option(
    "--workload",
    type=click.Choice(["mixed", "tickets", "extract", "tools"]),
    default="tickets",
    show_default=True,
    help="Built-in workload to send (tickets: the task the demo base learns in one night; mixed: all three).",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Ratchet home (default $RATCHET_HOME, else ./.ratchet).",
)
@click.option(
    "--no-dagster-ui", is_flag=True, help="Do not start `dagster dev`; run release control in-process."
)
@click.option(
    "--clock-start",
    default="2026-01-01",
    show_default=True,
    help="First day of the accelerated clock (YYYY-MM-DD).",
)
@click.option(
    "--bursts", type=click.IntRange(1, 100), default=6, show_default=True, help="Traffic bursts a day."
)
@click.option(
    "--concurrency", type=click.IntRange(1, 64), default=4, show_default=True, help="Requests in flight."
)
@click.option(
    "--train-epochs",
    type=click.IntRange(min=0),
    default=None,
    help="Epochs a night trains (at least min_steps steps either way). Default: lora_adapter's (1, which "
    "keeps nights short as the training set grows); another value is another training config.",
)
@click.option(
    "--train-min-steps",
    type=click.IntRange(min=0),
    default=None,
    help="Least optimiser steps a night trains (small training sets run more epochs). "
    "Default: lora_adapter's (150).",
)
@click.option(
    "--train-threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Torch threads a night trains with (0: every CPU, idle threads sleeping; the night has the machine to "
    "itself). Not part of the training config: a rerun reuses the night's adapter.",
)
@click.option("--gateway-port", type=int, default=8100, show_default=True)
@click.option("--teacher-port", type=int, default=8101, show_default=True)
@click.option("--student-port", type=int, default=8102, show_default=True)
@click.option("--dagster-port", type=int, default=3000, show_default=True)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object per day (stdout) instead of text."
)
def demo(
    days: int | None,
    day_seconds: float | None,
    requests_per_day: int,
    workload: str,
    home: Path | None,
    no_dagster_ui: bool,
    clock_start: str,
    bursts: int,
    concurrency: int,
    train_epochs: int | None,
    train_min_steps: int | None,
    train_threads: int,
    gateway_port: int,
    teacher_port: int,
    student_port: int,
    dagster_port: int,
    as_json: bool,
) -> None:
    """Run the whole loop on this machine: teacher, student, gateway, Dagster, nightly training and release.

    Example (what `make demo` runs: four days and nights): ratchet demo --days 4 --day-seconds 50
    """
    from datetime import date

    from ratchet_cli.demo.runner import DemoOptions, DemoRunner
    from ratchet_cli.demo.supervisor import ServiceError
    from ratchet_core.settings import SettingsError, load_settings

    try:
        date.fromisoformat(clock_start)
    except ValueError:
        raise click.BadParameter(
            f"{clock_start!r}: write a day as YYYY-MM-DD", param_hint="--clock-start"
        ) from None
    try:
        settings = load_settings(**({"home": home} if home else {}))
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    options = DemoOptions(
        home=settings.home,
        days=days,
        day_seconds=day_seconds,
        requests_per_day=requests_per_day,
        workload=workload,
        dagster_ui=not no_dagster_ui,
        clock_start=clock_start,
        bursts=bursts,
        concurrency=concurrency,
        train_epochs=train_epochs or None,
        train_min_steps=train_min_steps,
        train_threads=train_threads,
        gateway_port=gateway_port,
        teacher_port=teacher_port,
        student_port=student_port,
        dagster_port=dagster_port,
    )

    def echo(line: str) -> None:
        click.echo(line, err=as_json)

    def emit(report: dict) -> None:
        click.echo(json.dumps(report, sort_keys=True))

    previous = _own_stop_signals()
    try:
        DemoRunner(options, echo, emit if as_json else None).run()
    except KeyboardInterrupt:
        echo("\nstopped. Run the same command again to resume where it left off.")
        sys.exit(130)
    except (ServiceError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
