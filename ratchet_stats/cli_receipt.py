"""`verify receipt FILE [--prev FILE] [--proof FILE] [--rows FILE] --key PUB [--json]`.

Checks, in order (the first failure is named): the signature, the predicate, the totals (recomputed from the
per-client entries), the chain to ``--prev`` (its signature, day and digest), an inclusion ``--proof`` of one
row (from the gateway's ``/ratchet/receipts/{day}/proof/{request_id}``), and ``--rows`` (JSON lines of the
canonical leaf rows, in order: recomputes the root, the size and every client's totals).
Exit codes: 0 verified, 1 verification failed, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ratchet_stats.cli import CliError, emit
from ratchet_stats.cli_verify import load_public_keys
from ratchet_stats.receipt import ReceiptError, verify_receipt


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror}; check the path") from exc


def _json(path: str, what: str) -> Any:
    try:
        return json.loads(_read(path, what))
    except ValueError as exc:
        raise CliError(f"{what} {path} is not JSON ({exc}); pass the file Ratchet wrote") from exc


def _run(args: argparse.Namespace) -> int:
    keys = load_public_keys(args.key, None)
    envelope = _read(args.file, "receipt")
    prev = _read(args.prev, "previous receipt") if args.prev else None
    proof = _json(args.proof, "proof") if args.proof else None
    leaves = None
    if args.rows:
        leaves = [line for line in _read(args.rows, "rows file").splitlines() if line.strip()]
    try:
        report = verify_receipt(envelope, keys, prev_envelope=prev, proof=proof, leaves=leaves)
    except ReceiptError as exc:
        emit(
            args,
            {"ok": False, "check": exc.check, "error": exc.message},
            f"FAILED {exc.check}: {exc.message}",
        )
        return 1
    t = report["totals"]
    text = (
        f"OK receipt {report['day']}: {report['size']} requests, root {report['root']}\n"
        f"  teacher-equivalent ${t['teacher_cost_micro_usd'] / 1e6:,.6f}, paid ${t['actual_cost_micro_usd'] / 1e6:,.6f},"
        f" saved ${t['saved_micro_usd'] / 1e6:,.6f}\n"
        f"  checks: {', '.join(report['checks'])}"
    )
    emit(args, report, text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "receipt",
        help="verify a signed daily receipt (signature, totals, chain, inclusion)",
        description=__doc__.split("\n", 2)[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="receipt.dsse.json")
    p.add_argument(
        "--key", required=True, help="public key: base64, PEM, or a file (comma-separated for several)"
    )
    p.add_argument("--prev", metavar="FILE", help="the previous day's receipt.dsse.json (checks the chain)")
    p.add_argument("--proof", metavar="FILE", help="an inclusion proof of one request row")
    p.add_argument("--rows", metavar="FILE", help="JSON lines of every canonical leaf row, in order")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=_run)
