"""`ratchet admin erase --request-id ID | --key KEY --reason TEXT`: forget an example from tonight on.

The erasure is recorded in the control DB; the next night leaves the row out of the examples and every training
set built from then on (earlier training sets and adapters are not rewritten: retrain to remove its influence).
"""

from __future__ import annotations

import sys

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option, reason_option


@click.command()
@click.option(
    "--request-id", default=None, help="Ratchet request id (x-ratchet-request-id) whose data to forget."
)
@click.option("--key", "example_key", default=None, help="Example key (`ratchet proof key`) to forget.")
@reason_option()
@control_db_option
@json_option
def erase(
    request_id: str | None, example_key: str | None, reason: str, control_db: str, as_json: bool
) -> None:
    """Erase an example by request id or example key from every future examples file and training set."""
    from ratchet_assets.night.erasures import record_erasure

    try:
        record_erasure(engine_for(control_db), reason=reason, example_key=example_key, request_id=request_id)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    data = {
        "erased": example_key or request_id,
        "by": "key" if example_key else "request_id",
        "reason": reason,
    }
    if as_json:
        echo_json(data)
    else:
        click.echo(
            f"erased {data['by']} {data['erased']}: left out of examples and training sets from the next night"
        )


COMMANDS = [erase]
