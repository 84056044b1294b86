"""`ratchet liverun plan|smoke|run|report|verify`: a measured live run with a hard --max-usd cap (ratchet_cli.liverun)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

workload_option = click.option(
    "--workload",
    type=click.Choice(["tickets", "extract", "tools", "mixed", "research"]),
    default="mixed",
    show_default=True,
    help="Built-in workload of each round.",
)
teacher_option = click.option(
    "--teacher-model", default=None, help="litellm name of the teacher (default RATCHET_TEACHER_MODEL)."
)
api_key_option = click.option(
    "--api-key",
    envvar="OPENAI_API_KEY",
    required=True,
    help="Client bearer key for the gateway (or $OPENAI_API_KEY).",
)
teacher_url_option = click.option(
    "--teacher-url",
    default=None,
    help="The teacher's /v1 URL for control calls (default RATCHET_TEACHER_API_BASE).",
)
teacher_api_key_option = click.option(
    "--teacher-api-key",
    "teacher_key",
    default=None,
    help="The teacher's API key (default RATCHET_TEACHER_API_KEY, via settings).",
)


def _teacher(url: str | None, key: str | None) -> tuple[str, str]:
    """The control arm's teacher: the options, else the settings (RATCHET_TEACHER_API_BASE / _API_KEY)."""
    from ratchet_core.settings import load_settings

    settings = load_settings()
    return url or settings.teacher_api_base or "", key or settings.teacher_api_key


def _teacher_model(value: str | None) -> str:
    from ratchet_core.settings import load_settings

    return value or load_settings().teacher_model


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def liverun() -> None:
    """A measured run against a gateway: rounds of traffic, a night between them, a control arm, a dollar cap."""


@liverun.command("plan")
@workload_option
@teacher_option
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--requests", "requests_per_round", default=200, show_default=True, type=click.IntRange(min=1))
@click.option("--control-share", default=0.2, show_default=True, type=click.FloatRange(0, 0.5))
@click.option("--max-tokens", default=256, show_default=True, type=click.IntRange(min=1))
def plan_cmd(workload, teacher_model, rounds, requests_per_round, control_share, max_tokens) -> None:
    """Requests per stage, golden size and the most one round (and the run) can cost, as JSON."""
    from ratchet_cli import liverun as lr

    p = lr.plan(
        workload,
        rounds,
        requests_per_round,
        _teacher_model(teacher_model),
        control_share,
        max_tokens=max_tokens,
    )
    click.echo(json.dumps(p.to_dict(), indent=2))


@liverun.command("smoke")
@click.argument("gateway_url")
@api_key_option
@teacher_url_option
@teacher_api_key_option
@workload_option
@teacher_option
def smoke_cmd(gateway_url, api_key, teacher_url, teacher_key, workload, teacher_model) -> None:
    """A few requests through GATEWAY_URL (/v1) and a few control calls straight to the teacher."""
    from ratchet_cli import liverun as lr

    teacher_url, teacher_key = _teacher(teacher_url, teacher_key)
    out = lr.smoke(gateway_url, api_key, teacher_url, teacher_key, _teacher_model(teacher_model), workload)
    click.echo(json.dumps(out, indent=2))
    sys.exit(0 if out["ok"] else 1)


@liverun.command("run")
@click.argument("gateway_url")
@click.option("--out", "folder", required=True, type=click.Path(path_type=Path), help="The run's folder.")
@click.option("--max-usd", required=True, type=click.FloatRange(min=0), help="Hard cap (the effect gate's).")
@api_key_option
@teacher_url_option
@teacher_api_key_option
@workload_option
@teacher_option
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--requests", "requests_per_round", default=200, show_default=True, type=click.IntRange(min=1))
@click.option("--control-share", default=0.2, show_default=True, type=click.FloatRange(0, 0.5))
@click.option("--night-command", default=None, help="Shell command run between rounds (the night).")
@click.option("--control-db", default="", help="Control DB of the effect gate (default RATCHET_CONTROL_DB).")
def run_cmd(
    gateway_url,
    folder,
    max_usd,
    api_key,
    teacher_url,
    teacher_key,
    workload,
    teacher_model,
    rounds,
    requests_per_round,
    control_share,
    night_command,
    control_db,
) -> None:
    """Run the rounds through GATEWAY_URL (/v1), stop at --max-usd, then write the report and sign the run."""
    from ratchet_assets.admin.common import engine_for
    from ratchet_cli import liverun as lr
    from ratchet_core.keys import signing_key
    from ratchet_core.settings import load_settings

    p = lr.plan(workload, rounds, requests_per_round, _teacher_model(teacher_model), control_share)
    night = lr.night_command(night_command) if night_command else None
    teacher_url, teacher_key = _teacher(teacher_url, teacher_key)
    totals = lr.run(
        folder, p, gateway_url, api_key, teacher_url, teacher_key, max_usd, engine_for(control_db), night
    )
    lr.report(folder)
    lr.sign(folder, signing_key(load_settings()))
    click.echo(json.dumps(totals, indent=2))


@liverun.command("report")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report_cmd(folder: Path) -> None:
    """Savings and quality of the treatment arm against the control arm."""
    from ratchet_cli import liverun as lr

    click.echo(json.dumps(lr.report(folder), indent=2))


@liverun.command("verify")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--key",
    default=None,
    help="Trusted public key(s), as `ratchet verify` takes them: base64, PEM or a key file path; comma-separated "
    "(default: the trusted keys of RATCHET_HOME).",
)
@click.option("--key-file", default=None, help="File with trusted public key(s): PEM blocks or base64 lines.")
def verify_cmd(folder: Path, key: str | None, key_file: str | None) -> None:
    """Verify the run's signature, then every file it signs."""
    from ratchet_cli import liverun as lr

    if key or key_file:
        from ratchet_stats.cli import CliError
        from ratchet_stats.cli_verify import load_public_keys

        try:
            keys = load_public_keys(key, key_file)
        except CliError as exc:
            raise click.UsageError(str(exc)) from None
    else:
        from ratchet_core.keys import root_public_keys
        from ratchet_core.settings import load_settings

        keys = root_public_keys(load_settings())
    try:
        got = lr.verify(folder, keys)
    except Exception as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    click.echo(f"OK: run signed; spent ${got['spent_usd']:.6f}, saved ${got['saved_usd']:.6f}")
