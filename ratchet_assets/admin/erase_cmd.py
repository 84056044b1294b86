"""`ratchet admin erase`: erase requests from every store, or an example key from every future night.

``--request-id/--client/--user/--since/--until/--text`` (any mix; each may repeat) select requests: their prompts and
answers are removed from the lake segments, the night's artifacts and (through the control DB) every gateway
replica's ledger and journal, and kept out of every future night; receipts still verify (``ratchet_assets.governance
.erase``). ``--dry-run`` prints the counts per store and changes nothing. Each erasure is signed and logged
(``ratchet admin erasures`` lists the log, each entry verified).

``--example-key KEY`` alone forgets one example key from the next night on (the example itself may come from many requests).
"""

from __future__ import annotations

import sys

import click

from ratchet_assets.admin.common import (
    control_db_option,
    echo_json,
    engine_for,
    json_option,
    reason_option,
)
from ratchet_assets.cli_names import actor_checked, names_checked


@click.command()
@click.option(
    "--request-id",
    "request_ids",
    multiple=True,
    callback=names_checked("request id"),
    help="Request id (x-ratchet-request-id); repeatable.",
)
@click.option(
    "--client",
    "clients",
    multiple=True,
    callback=names_checked("client"),
    help="API key name of the caller; repeatable.",
)
@click.option("--user", "users", multiple=True, help="End user: the request's `user` field; repeatable.")
@click.option("--since", default=None, help="Requests at or after this UTC time (ISO: 2026-01-31[T12:00]).")
@click.option("--until", default=None, help="Requests before this UTC time (ISO).")
@click.option("--text", default=None, help="Requests whose prompt, answer or tool calls contain this text.")
@click.option(
    "--example-key", "example_key", default=None, help="Example key (`ratchet proof key`) to forget, alone."
)
@click.option("--dry-run", is_flag=True, help="Count what would be erased in each store; change nothing.")
@click.option(
    "--actor",
    default=None,
    callback=actor_checked,
    help="Who asks (logged and signed; default: the OS user).",
)
@reason_option()
@control_db_option
@json_option
def erase(
    request_ids: tuple[str, ...],
    clients: tuple[str, ...],
    users: tuple[str, ...],
    since: str | None,
    until: str | None,
    text: str | None,
    example_key: str | None,
    dry_run: bool,
    actor: str | None,
    reason: str,
    control_db: str,
    as_json: bool,
) -> None:
    """Erase requests (by id, client, end user, time range, text) from every store; or an example key."""
    scoped = bool(request_ids or clients or users or since or until or text)
    if example_key is not None:
        if scoped:
            click.echo(
                "error: give exactly one of --example-key or a request scope (--request-id/--client/...)",
                err=True,
            )
            sys.exit(2)
        _erase_key(example_key, reason, control_db, as_json)
        return
    from ratchet_assets.governance.erase import ErasureError, erase, scope_from_options
    from ratchet_core.artifact_store import from_settings
    from ratchet_core.keys import KeyTrustError, signing_key
    from ratchet_core.settings import load_settings

    settings = load_settings()
    # RATCHET_ARTIFACTS_URL: every day's files come down first, the rewritten ones go back up after
    store = from_settings(settings)
    try:
        scope = scope_from_options(request_ids, clients, users, since, until, text)
        key = None if dry_run else signing_key(settings)
        if store is not None:
            store.sync_down()
        report = erase(
            scope,
            lake_root=settings.lake_root,
            artifacts_root=settings.artifacts_root,
            engine=engine_for(control_db),
            reason=reason,
            private_key=key,
            actor=actor,
            dry_run=dry_run,
        )
        if store is not None and not dry_run:
            store.sync_up()
    except (ErasureError, KeyTrustError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        echo_json(report.to_dict())
        return
    head = "would erase" if dry_run else f"erased (log #{report.log_id})"
    if not report.request_ids:
        click.echo("nothing matched: no sealed request (lake segment or traffic file) is in this scope")
    click.echo(f"{head}: {len(report.request_ids)} requests, {len(report.example_keys)} example keys")
    if report.request_ids_not_found:
        shown = ", ".join(report.request_ids_not_found[:5]) + (
            " ..." if len(report.request_ids_not_found) > 5 else ""
        )
        click.echo(
            f"{len(report.request_ids_not_found)} given request ids are in no sealed row ({shown}): not counted; "
            "recorded so a gateway replica still holding one unsealed blanks it"
        )
    for store, n in sorted(report.counts.items()):
        click.echo(f"  {store:<16} {n}")
    if report.adapters_trained_on_erased:
        click.echo(
            "adapters trained on erased rows (retrain to remove their influence): "
            + ", ".join(report.adapters_trained_on_erased)
        )
    if not dry_run:
        click.echo("gateway replicas blank rows in this scope in their own ledgers at their next poll")


def _erase_key(example_key: str, reason: str, control_db: str, as_json: bool) -> None:
    from ratchet_assets.night.erasures import record_erasure

    try:
        record_erasure(engine_for(control_db), reason=reason, example_key=example_key)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    data = {"erased": example_key, "by": "key", "reason": reason}
    if as_json:
        echo_json(data)
    else:
        click.echo(f"erased key {example_key}: left out of examples and training sets from the next night")


@click.command("erasures")
@control_db_option
@json_option
def erasures_cmd(control_db: str, as_json: bool) -> None:
    """List the signed erasure log, every entry's signature verified."""
    from ratchet_assets.governance.erase import read_log
    from ratchet_core.keys import root_public_keys
    from ratchet_core.settings import load_settings

    entries = read_log(engine_for(control_db), root_public_keys(load_settings()))
    if as_json:
        echo_json(entries)
        return
    for e in entries:
        click.echo(
            f"#{e['id']} {e['at']} by {e['actor']}: {e['counts'].get('requests', 0)} requests - {e['reason']}"
        )


COMMANDS = [erase, erasures_cmd]
