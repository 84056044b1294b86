"""The auditor's CLI: `python -m ratchet_stats ...` or `ratchet stats|verify|keygen ...`.

argparse on purpose: this package depends on scipy and cryptography only. Subcommands are contributed by
modules listed in REGISTRARS; each has ``register(subparsers)`` adding its parsers, whose ``func(args)``
returns an exit code. Exit codes: 0 ok, 1 verification failed / not certified, 2 usage or input error, 141 the
reader closed the pipe before the output ended (``... | head``; no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from typing import Any

# Top-level command -> modules that add subcommands to it.
REGISTRARS: dict[str, list[str]] = {
    "stats": ["ratchet_stats.cli_stats"],
    "keygen": ["ratchet_stats.cli_keys"],
    "verify": ["ratchet_stats.cli_verify", "ratchet_stats.cli_evidence", "ratchet_stats.cli_receipt"],
}

_HELP = {
    "stats": "exact statistics: plan, bound, mcnemar, ltt",
    "keygen": "generate an Ed25519 signing key",
    "verify": "verify signed evidence offline",
}


class CliError(Exception):
    """A user error: printed as `error: ...` with exit code 2."""


def emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """Print `data` as JSON with --json, else the human-readable `text`."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(text)


def build_parser(prog: str = "python -m ratchet_stats") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Ratchet's verifier kit.")
    top = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command, modules in REGISTRARS.items():
        loaded = [importlib.import_module(m) for m in modules if importlib.util.find_spec(m) is not None]
        if not loaded:
            continue
        if command == "keygen":  # a leaf command, not a group
            for mod in loaded:
                mod.register(top)
            continue
        sub = top.add_parser(command, help=_HELP[command], description=_HELP[command])
        subs = sub.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
        for mod in loaded:
            mod.register(subs)
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m ratchet_stats") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader left (`... | head`): no traceback; stdout goes to /dev/null so that the interpreter's last
        # flush does not fail again, and the exit status says the output was cut (as SIGPIPE would: 128 + 13)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
