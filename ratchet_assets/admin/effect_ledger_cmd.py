"""`ratchet admin effects list|show|resolve`: inspect and settle entries of the effect ledger."""

from __future__ import annotations

import sys

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option, reason_option


def _ledger(url: str):
    from ratchet_assets.effects import EffectLedger

    return EffectLedger(engine_for(url))


@click.group()
def effects() -> None:
    """Irreversible effects (receipt signing, training launches, ...) and their state."""


@effects.command("list")
@click.option(
    "--status",
    type=click.Choice(["in_flight", "done", "failed", "indeterminate"]),
    default=None,
    help="Only effects in this state ('indeterminate' includes lapsed in-flight leases).",
)
@click.option("--type", "effect_type", default=None, help="Only this effect type, e.g. receipt.sign.")
@click.option("--limit", default=100, show_default=True, help="Newest first, at most this many.")
@control_db_option
@json_option
def list_cmd(status: str | None, effect_type: str | None, limit: int, control_db: str, as_json: bool) -> None:
    """List effects, newest first."""
    rows = _ledger(control_db).list_effects(effect_type=effect_type, status=status, limit=limit)
    if as_json:
        echo_json([r.to_dict() for r in rows])
        return
    if not rows:
        click.echo("no effects")
        return
    for r in rows:
        state = r.status
        if r.status == "in_flight" and r.lease_lapsed():
            state = "in_flight (lease lapsed)"
        click.echo(f"{r.effect_type:<18} {r.key:<40} {state:<26} attempts={r.attempts} {r.updated_at}")


@effects.command("show")
@click.argument("effect_type")
@click.argument("key")
@control_db_option
@json_option
def show_cmd(effect_type: str, key: str, control_db: str, as_json: bool) -> None:
    """Show one effect: EFFECT_TYPE KEY (e.g. `receipt.sign receipt:2026-01-01`)."""
    record = _ledger(control_db).lookup(effect_type, key)
    if record is None:
        click.echo(f"error: no effect {effect_type} {key!r}; see `ratchet admin effects list`", err=True)
        sys.exit(2)
    if as_json:
        echo_json(record.to_dict())
        return
    for field, value in record.to_dict().items():
        click.echo(f"{field:<12} {value}")


@effects.command("resolve")
@click.argument("effect_type")
@click.argument("key")
@click.argument("resolution", type=click.Choice(["done", "failed", "forget"]))
@reason_option("Why (3-500 characters); kept with the effect for the audit trail.")
@click.option("--force", is_flag=True, help="Required to change an effect that is done (it happened).")
@control_db_option
@json_option
def resolve_cmd(
    effect_type: str, key: str, resolution: str, reason: str, force: bool, control_db: str, as_json: bool
) -> None:
    """Settle a stuck effect: RESOLUTION done (it happened), failed (it did not: may run again), forget.

    An effect that is already done changes only with --force: marking it failed or forgetting it lets it
    happen again (a second training launch, a second signature).
    """
    from ratchet_assets.effects import EffectError

    try:
        record = _ledger(control_db).resolve(effect_type, key, resolution, reason, force=force)
    except EffectError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    data = record.to_dict() if record else {"effect_type": effect_type, "key": key, "forgotten": True}
    if as_json:
        echo_json(data)
    else:
        click.echo(f"{effect_type} {key}: {'forgotten' if record is None else record.status}")


@effects.command("rules")
@click.argument("effect_type")
@click.option(
    "--policy", type=click.Choice(["block", "retry", "probe"]), default=None, help="Indeterminate policy."
)
@click.option(
    "--approval-required", is_flag=True, help="Every effect of this type waits for `admin approve`."
)
@click.option(
    "--max-attempts", type=click.IntRange(min=1), default=None, help="Block after this many attempts."
)
@click.option(
    "--cap-usd", type=click.FloatRange(min=0), default=None, help="Spend cap in dollars per window."
)
@click.option(
    "--window-seconds", type=click.IntRange(min=1), default=None, help="Cap window (default all time)."
)
@click.option("--reason", default=None, help="Why (3-500 characters); required to change the rules.")
@control_db_option
@json_option
def rules_cmd(
    effect_type: str,
    policy: str | None,
    approval_required: bool,
    max_attempts: int | None,
    cap_usd: float | None,
    window_seconds: int | None,
    reason: str | None,
    control_db: str,
    as_json: bool,
) -> None:
    """Show EFFECT_TYPE's gate rules and spend; with --reason, replace them with the options given."""
    from ratchet_assets.effects import EffectError

    gate = _ledger(control_db)
    if reason is not None:
        try:
            gate.set_rules(
                effect_type,
                reason=reason,
                actor="admin-cli",
                policy=policy,  # type: ignore[arg-type]
                approval_required=approval_required,
                max_attempts=max_attempts,
                cap_usd=cap_usd,
                cap_window_seconds=window_seconds,
            )
        except EffectError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
    data = {**gate.rules(effect_type).to_dict(), "spend": gate.spend(effect_type)}
    if as_json:
        echo_json(data)
        return
    for field, value in data.items():
        click.echo(f"{field:<20} {value}")


COMMANDS = [effects]
