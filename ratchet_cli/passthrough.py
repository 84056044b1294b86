"""`ratchet stats|verify|keygen`: hand the arguments to ratchet_stats' own CLI unchanged."""

from __future__ import annotations

import sys

import click

_PASS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _make(name: str, short: str) -> click.Command:
    @click.command(name=name, context_settings=_PASS, add_help_option=False, help=short)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        from ratchet_core.artifact_store import localize_args
        from ratchet_stats.cli import main as stats_main

        # an s3://... FILE becomes a local copy, with the files beside it (a receipt's rows, a BOM's key lists)
        sys.exit(stats_main([name, *localize_args(args)], prog="ratchet"))

    return command


stats = _make("stats", "Exact statistics: plan, bound, mcnemar, ltt.")
verify = _make("verify", "Verify signed evidence offline.")
keygen = _make("keygen", "Generate an Ed25519 signing key.")
