"""`verify receipt [FILE] --key PUB [--prev FILE] [--proof FILE] [--rows FILE] [--clients FILE] [--estimates FILE]
[--pairs FILE] [--client-proof FILE] [--json]`.

The auditor (FILE = a receipt.dsse.json) checks, in order (the first failure is named): the signature; the
predicate (for a v1 receipt also its totals); the chain to ``--prev`` (its signature, day and digest); an
inclusion ``--proof`` of one row (from ``/ratchet/receipts/{day}/proof/{request_id}``); for a v2 receipt the
client lines (``--clients``, default ``clients.jsonl`` beside FILE: the signed client root, each client's totals
adding up), the estimate lines (``--estimates``, default ``estimates.jsonl`` beside FILE) and, with ``--prev``,
the estimates carried from the previous receipt (its ``estimates.jsonl``); and ``--rows`` (every canonical leaf
row in order, as JSON lines or the receipt's rows.parquet): the request root, and every client's totals by the
signed method (teacher-served rows measured; student-served rows estimated at the teacher's prices from their
teacher-tokenizer prompt and the task's completion estimate) and each day-source estimate, recomputed. A v3
receipt adds the day's audit and shadow calls (``--pairs``, default ``pairs.jsonl`` beside FILE: the signed pair
root), whose cost is in each client's paid; with ``--rows`` they are recomputed into every client line and into
each estimate's ``from_audits``.

A client checks what ``GET /ratchet/receipts/{day}`` gave it with ``--client-proof FILE`` (no FILE argument): the
signature, its own totals line against the signed client root, the estimate lines it was given, and its own rows
against its line. It never needs another client's data.
Exit codes: 0 verified, 1 verification failed, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ratchet_stats.cli import CliError, emit
from ratchet_stats.cli_verify import load_public_keys
from ratchet_stats.receipt import ReceiptError, verify_client_view, verify_receipt
from ratchet_stats.receipt.v3 import PAIRS_FILE  # beside receipt.dsse.json

CLIENTS_FILE, ESTIMATES_FILE = "clients.jsonl", "estimates.jsonl"  # beside receipt.dsse.json


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


def _document(path: str, what: str) -> dict[str, Any]:
    """A JSON object Ratchet wrote; a gateway's error saved in its place (``{"error": ...}``, what curl keeps when
    the route refuses) or any other JSON is an input error that says so, not a malformed proof."""
    doc = _json(path, what)
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict) and "_type" not in doc:
        message = doc["error"].get("message") or doc["error"]
        raise CliError(
            f"{what} {path} is the gateway's error, not a {what}: {message}; fetch it again (your own key, "
            "a request id of yours, a day that has a receipt)"
        )
    if not isinstance(doc, dict):
        raise CliError(f"{what} {path} is JSON but not an object; pass the file the gateway or Ratchet wrote")
    return doc


def _lines(path: str | None, beside: str | None, name: str, what: str) -> list[bytes] | None:
    """The JSON lines of `path`, else of the file `name` beside `beside` when it exists, else None."""
    if path is None and beside is not None:
        candidate = Path(beside).parent / name
        path = str(candidate) if candidate.exists() else None
    if path is None:
        return None
    return [line for line in _read(path, what).splitlines() if line.strip()]


def _rows(path: str) -> list[bytes]:
    """The leaves from JSON lines, or from the receipt's own rows.parquet (its ``leaf`` column; needs pyarrow,
    which the verifier kit does not otherwise require)."""
    if not path.endswith(".parquet"):
        return _lines(path, None, "", "rows file") or []
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CliError(
            "reading rows.parquet needs pyarrow (`pip install pyarrow`); or pass JSON lines"
        ) from None
    _read(path, "rows file")  # a clear error for a missing file
    return [s.encode("utf-8") for s in pq.read_table(path, columns=["leaf"])["leaf"].to_pylist()]


def _usd(micro: int) -> str:
    return f"${micro / 1e6:,.6f}"


def _totals_text(t: dict[str, Any]) -> str:
    if "teacher_cost_estimated_micro_usd" not in t:  # v1
        return (
            f"  teacher-equivalent {_usd(t['teacher_cost_micro_usd'])}, paid {_usd(t['actual_cost_micro_usd'])},"
            f" saved {_usd(t['saved_micro_usd'])}"
        )
    pairs = ""
    if "pair_cost_micro_usd" in t:  # v3: paid includes the audit and shadow calls
        pairs = f" (of which {_usd(t['pair_cost_micro_usd'])} for {t['pairs']} audit/shadow calls)"
    return (
        f"  teacher-equivalent {_usd(t['teacher_cost_micro_usd'])} (measured {_usd(t['teacher_cost_measured_micro_usd'])}"
        f" + estimated {_usd(t['teacher_cost_estimated_micro_usd'])}), paid {_usd(t['actual_cost_micro_usd'])}"
        f"{pairs}, saved {_usd(t['saved_micro_usd'])} (an estimate where student-served)"
    )


def _method_text(teq: dict[str, Any] | None) -> str:
    if not teq:
        return ""
    p = teq["prices"]
    return (
        f"\n  method {teq['method']}: {p['teacher_model']} at ${p['input_usd_per_token'] * 1e6:g}/M prompt,"
        f" ${p['output_usd_per_token'] * 1e6:g}/M completion tokens ({p['source']})"
    )


def _failed(args: argparse.Namespace, exc: ReceiptError) -> int:
    """Print the failed check (text or JSON); exit code 1."""
    emit(args, {"ok": False, "check": exc.check, "error": exc.message}, f"FAILED {exc.check}: {exc.message}")
    return 1


def _run(args: argparse.Namespace) -> int:
    keys = load_public_keys(args.key, None)
    if args.client_proof:
        if args.file:
            raise CliError(
                "give either a receipt FILE (the auditor) or --client-proof FILE (a client), not both"
            )
        return _run_client(args, keys)
    if not args.file:
        raise CliError(
            "give the receipt FILE (receipt.dsse.json), or --client-proof FILE for a client's view"
        )
    envelope = _read(args.file, "receipt")
    prev = _read(args.prev, "previous receipt") if args.prev else None
    proof = _document(args.proof, "proof") if args.proof else None
    leaves = _rows(args.rows) if args.rows else None
    clients = _lines(args.clients, args.file, CLIENTS_FILE, "client lines")
    estimates = _lines(args.estimates, args.file, ESTIMATES_FILE, "estimate lines")
    prev_estimates = _lines(None, args.prev, ESTIMATES_FILE, "previous estimate lines") if args.prev else None
    pairs = _lines(args.pairs, args.file, PAIRS_FILE, "pair lines")
    try:
        report = verify_receipt(
            envelope,
            keys,
            prev_envelope=prev,
            proof=proof,
            leaves=leaves,
            clients=clients,
            estimates=estimates,
            prev_estimates=prev_estimates if estimates is not None else None,
            pairs=pairs,
        )
    except ReceiptError as exc:
        return _failed(args, exc)
    t = report["totals"]
    totals = _totals_text(t) if t else "  totals: not checked (give the client lines: --clients)"
    text = (
        f"OK receipt {report['day']} (v{report['version']}): {report['size']} requests, root {report['root']}\n"
        f"{totals}{_method_text(report.get('teacher_equivalent'))}\n"
        f"  checks: {', '.join(report['checks'])}"
    )
    emit(args, report, text)
    return 0


def _run_client(args: argparse.Namespace, keys: Any) -> int:
    view = _document(args.client_proof, "client view")
    try:
        report = verify_client_view(view, keys)
    except ReceiptError as exc:
        return _failed(args, exc)
    text = (
        f"OK receipt {report['day']}: client {report['client']}, {report['totals']['requests']} requests"
        f" ({report['rows']} rows given)\n"
        f"{_totals_text(report['totals'])}{_method_text(report['teacher_equivalent'])}\n"
        f"  checks: {', '.join(report['checks'])}"
    )
    emit(args, report, text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "receipt",
        help="verify a signed daily receipt (signature, totals, chain, inclusion) or a client's view of it",
        description=__doc__.split("\n", 3)[3] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="receipt.dsse.json (the auditor's check)")
    p.add_argument(
        "--key", required=True, help="public key: base64, PEM, or a file (comma-separated for several)"
    )
    p.add_argument("--prev", metavar="FILE", help="the previous day's receipt.dsse.json (checks the chain)")
    p.add_argument("--proof", metavar="FILE", help="an inclusion proof of one request row")
    p.add_argument(
        "--rows",
        metavar="FILE",
        help="every canonical leaf row, in order: JSON lines, or the receipt's rows.parquet",
    )
    p.add_argument("--clients", metavar="FILE", help=f"v2 client lines (default: {CLIENTS_FILE} beside FILE)")
    p.add_argument(
        "--estimates", metavar="FILE", help=f"v2 estimate lines (default: {ESTIMATES_FILE} beside FILE)"
    )
    p.add_argument(
        "--pairs", metavar="FILE", help=f"v3 audit/shadow pair lines (default: {PAIRS_FILE} beside FILE)"
    )
    p.add_argument(
        "--client-proof",
        metavar="FILE",
        help="a client's view of a day's receipt (GET /ratchet/receipts/{day}); checks it instead of FILE",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=_run)
