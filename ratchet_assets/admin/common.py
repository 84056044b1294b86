"""Helpers shared by the admin command modules: the control DB engine, the --reason rule and JSON output."""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy.engine import Engine

control_db_option = click.option(
    "--control-db",
    default="",
    envvar=None,
    help="SQLAlchemy URL of the control DB (default: RATCHET_CONTROL_DB / $RATCHET_HOME/control.db).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def _checked_reason(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from ratchet_core.reasons import ReasonError, check_reason

    if value is None:
        return None
    try:
        return check_reason(value)
    except ReasonError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def reason_option(help_text: str = "Why (3-500 characters); kept in the audit trail.") -> Any:
    """``--reason`` for every command that changes something: one rule (``ratchet_core.reasons.check_reason``)."""
    return click.option("--reason", required=True, callback=_checked_reason, help=help_text)


def engine_for(url: str) -> Engine:
    from ratchet_core.control_db import make_engine
    from ratchet_core.settings import load_settings

    return make_engine(url or load_settings().control_db_url)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
