"""The one name rule on the command line: a click callback for every option or argument that takes a name.

Every control-plane command that takes a task, client, version, request id, day or actor (``ratchet admin``, ``ratchet
import``/``export``, ``ratchet replay``, ``ratchet cost``) checks it with ``ratchet_core.names`` before anything
reads a path or writes the audit log or a signed document, and answers a usage error (exit 2) naming the option.
A module of its own so that the admin, governance, replay and Dagster-definition packages can all use it without
importing each other.
"""

from __future__ import annotations

from typing import Any

import click

from ratchet_core.names import NameKind, NameRuleError, check


def names_checked(kind: NameKind) -> Any:
    """A click callback: the option's or argument's value (one, or each of a repeated option) follows the one name
    rule for `kind` (``ratchet_core.names``: task, client, version, request id, day), else a usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            if isinstance(value, tuple):
                return tuple(check(kind, v) for v in value)
            return check(kind, value)
        except NameRuleError as exc:
            raise click.BadParameter(exc.message, ctx=ctx, param=param) from None

    return callback


def actor_checked(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A click callback for ``--actor`` (who made an admin change: logged, and signed into the audit log): the
    name rule's ``actor`` kind, or unset (empty or None: the OS user name is used)."""
    return names_checked("actor")(ctx, param, value) if value else value
