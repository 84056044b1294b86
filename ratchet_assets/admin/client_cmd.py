"""`ratchet admin client set|show|list`: per-client rate limits and spend budgets (``ratchet_core.client_limits``).

``set CLIENT`` changes only the options given (``--rpm``, ``--tpm``, ``--budget-usd`` with ``--budget-period day|month``;
``--clear FIELD`` removes a limit), needs ``--reason`` and writes the limits and a release audit-log row in one
control-DB transaction. Every gateway replica applies a change on its next poll (about a second), without a restart;
a refused request is a 429 with ``retry-after``. ``show`` and ``list`` print the limits, who set them and why, and
the client's spend in its current budget window (every replica's, as they last flushed it).
"""

from __future__ import annotations

import getpass
import sys
from typing import Any

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option, reason_option
from ratchet_assets.cli_names import actor_checked, names_checked

actor_option = click.option(
    "--actor", default="", callback=actor_checked, help="Who is acting (default: the OS user name)."
)
LIMIT_FIELDS = ("rpm", "tpm", "budget_usd")


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _engine(control_db: str) -> Any:
    from ratchet_core.control_db import ensure_schema

    engine = engine_for(control_db)
    ensure_schema(engine)
    return engine


def _spend(engine: Any, rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """client -> {window: dollars} for today's day and month windows (Ratchet's clock)."""
    from ratchet_core import client_limits as cl
    from ratchet_core.clock import today

    day = today().isoformat()
    windows = [cl.window(p, day) for p in cl.PERIODS]
    out: dict[str, dict[str, float]] = {}
    for (client, win), usd in cl.read_spend(engine, windows).items():
        out.setdefault(client, {})[win] = usd
    return out


@click.group("client")
def client_group() -> None:
    """Per-client limits: requests and tokens per minute, a spend budget per day or month."""


@client_group.command("set")
@click.argument("client", callback=names_checked("client"))
@click.option("--rpm", type=int, default=None, help="Requests per minute (across every gateway replica).")
@click.option(
    "--tpm",
    type=int,
    default=None,
    help="Tokens per minute (prompt + completion; a request reserves its prompt + max_tokens until it is answered).",
)
@click.option("--budget-usd", type=float, default=None, help="Spend budget in US dollars (litellm's prices).")
@click.option(
    "--budget-period", type=click.Choice(["day", "month"]), default=None, help="The budget's window."
)
@click.option(
    "--clear", multiple=True, type=click.Choice(LIMIT_FIELDS), help="Remove a limit (budget_usd: the budget)."
)
@reason_option()
@actor_option
@control_db_option
@json_option
def set_cmd(
    client: str,
    rpm: int | None,
    tpm: int | None,
    budget_usd: float | None,
    budget_period: str | None,
    clear: tuple[str, ...],
    reason: str,
    actor: str,
    control_db: str,
    as_json: bool,
) -> None:
    """Set CLIENT's limits (only the options given change); every gateway applies them within seconds."""
    from ratchet_assets.release.registry import append_audit
    from ratchet_core.client_limits import set_limits

    given = {
        k: v
        for k, v in dict(rpm=rpm, tpm=tpm, budget_usd=budget_usd, budget_period=budget_period).items()
        if v is not None
    }
    if not given and not clear:
        _fail("nothing to set: give --rpm, --tpm, --budget-usd with --budget-period, or --clear FIELD")
    both = {c for c in clear if c in given or (c == "budget_usd" and "budget_period" in given)}
    if both:
        _fail(f"--clear {sorted(both)[0]} and a value for it: choose one")
    actor = actor or getpass.getuser()
    engine = _engine(control_db)
    try:
        with engine.begin() as conn:
            limits = set_limits(conn, client, given, clear, actor, reason)
            details = {"set": given, "cleared": list(clear), "now": limits.as_dict()}
            append_audit(conn, actor, "client.set", client, reason, details)
    except ValueError as exc:
        _fail(str(exc))
    if as_json:
        echo_json({"client": client, **limits.as_dict()})
        return
    click.echo(f"{client}: {_describe(limits.as_dict())} (every gateway applies it within a few seconds)")


def _describe(row: dict[str, Any]) -> str:
    parts = []
    if row.get("rpm") is not None:
        parts.append(f"{row['rpm']} requests/min")
    if row.get("tpm") is not None:
        parts.append(f"{row['tpm']} tokens/min")
    if row.get("budget_usd") is not None:
        parts.append(f"${row['budget_usd']:g} per {row['budget_period']}")
    return ", ".join(parts) or "no limits"


@client_group.command("show")
@click.argument("client", callback=names_checked("client"))
@control_db_option
@json_option
def show_cmd(client: str, control_db: str, as_json: bool) -> None:
    """CLIENT's limits, who set them and why, and its spend in today's budget windows."""
    from ratchet_core.client_limits import limit_rows

    engine = _engine(control_db)
    row = next((r for r in limit_rows(engine) if r["client"] == client), {"client": client})
    spend = _spend(engine, [row]).get(client, {})
    if as_json:
        echo_json({**row, "spend_usd": spend})
        return
    click.echo(f"{client}: {_describe(row)}")
    if "reason" in row:
        click.echo(f"  set by {row['actor']} at {row['updated_at']}: {row['reason']}")
    for win, usd in sorted(spend.items()):
        click.echo(f"  spent {win}: ${usd:.4f}")


@client_group.command("list")
@control_db_option
@json_option
def list_cmd(control_db: str, as_json: bool) -> None:
    """Every client with a limit, and its spend in today's budget windows."""
    from ratchet_core.client_limits import limit_rows

    engine = _engine(control_db)
    rows = limit_rows(engine)
    spend = _spend(engine, rows)
    if as_json:
        echo_json([{**r, "spend_usd": spend.get(r["client"], {})} for r in rows])
        return
    if not rows:
        click.echo("no client has a limit (ratchet admin client set CLIENT --rpm N ... --reason ...)")
    for r in rows:
        today = ", ".join(f"{w} ${u:.4f}" for w, u in sorted(spend.get(r["client"], {}).items()))
        click.echo(f"{r['client']:<24} {_describe(r):<48} {today}")


COMMANDS = [client_group]
