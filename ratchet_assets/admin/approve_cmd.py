"""`ratchet admin approve`: grant or deny an effect that waits for approval (the effect gate's approvals)."""

from __future__ import annotations

import sys

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option


@click.command("approve")
@click.argument("effect_type", required=False)
@click.argument("key", required=False)
@click.option("--reason", default=None, help="Why (3-500 characters); kept with the decision.")
@click.option("--deny", is_flag=True, help="Deny instead of grant: the effect's next begin is denied.")
@click.option("--list", "list_pending", is_flag=True, help="List the approvals that are pending.")
@control_db_option
@json_option
def approve(
    effect_type: str | None,
    key: str | None,
    reason: str | None,
    deny: bool,
    list_pending: bool,
    control_db: str,
    as_json: bool,
) -> None:
    """Grant (or --deny) the approval of EFFECT_TYPE KEY, with --reason; --list shows what is pending."""
    from ratchet_assets.effects import EffectError, EffectLedger

    gate = EffectLedger(engine_for(control_db))
    if list_pending:
        rows = [a.to_dict() for a in gate.approvals("pending")]
        if as_json:
            echo_json(rows)
        elif not rows:
            click.echo("no pending approvals")
        for a in [] if as_json else rows:
            click.echo(f"{a['effect_type']:<18} {a['key']:<40} by {a['requested_by']} at {a['requested_at']}")
            if a["summary"]:
                click.echo(f"    {a['summary']}")
        return
    if not effect_type or not key or reason is None:
        click.echo("error: give EFFECT_TYPE KEY and --reason (or --list to see what waits)", err=True)
        sys.exit(2)
    try:
        decided = gate.decide(effect_type, key, not deny, reason, actor="admin-cli")
    except EffectError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        echo_json(decided.to_dict())
    else:
        click.echo(f"{effect_type} {key}: {decided.state} ({decided.reason})")


COMMANDS = [approve]
