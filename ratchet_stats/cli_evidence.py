"""`verify bom` and `verify proof`.

- ``verify bom FILE --key PUB [--notice NOTICE.md] [--adapter-dir DIR] [--json]``: signature first, then the
  in-toto Statement, the CycloneDX 1.6 shape, the subjects, NOTICE.md's sha256 and contents, the adapter files;
- ``verify proof --bom BOM --proof FILE [--key PUB] [--expect member|absent] [--json]``: checks a membership,
  non-membership or disjointness proof (``ratchet_stats.commitment``) against the Merkle roots recorded in the BOM.
  Without ``--key`` the BOM's signature is not checked (said on stderr): only use that for a BOM you trust;

Exit codes: 0 verified, 1 verification failed (the failed check is named), 2 usage or input error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ratchet_stats import bom_format as bom_mod
from ratchet_stats import commitment as commit_mod
from ratchet_stats.cli import CliError, emit
from ratchet_stats.cli_verify import load_public_keys
from ratchet_stats.evidence import EvidenceError


def _read_bytes(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror}; check the path") from exc


def _read_json(path: str, what: str) -> Any:
    try:
        return json.loads(_read_bytes(path, what))
    except ValueError as exc:
        raise CliError(f"{what} {path} is not JSON ({exc}); pass the file ratchet wrote") from exc


def _fail(args: argparse.Namespace, check: str, message: str, extra: dict[str, Any] | None = None) -> int:
    data = {"ok": False, "check": check, "error": message, **(extra or {})}
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(f"FAILED ({check}): {message}", file=sys.stderr)
    return 1


def cmd_bom(args: argparse.Namespace) -> int:
    envelope = _read_bytes(args.file, "BOM")
    keys = load_public_keys(args.key, args.key_file)
    notice = _read_bytes(args.notice, "NOTICE") if args.notice else None
    try:
        report = bom_mod.verify_bom(envelope, keys, notice=notice, adapter_dir=args.adapter_dir)
    except bom_mod.BomError as exc:
        return _fail(args, exc.check, exc.message)
    metrics = bom_mod.metrics_from_bom(report.bom)
    lines = [
        f"OK: BOM of adapter {report.version} (sha256 {report.adapter_sha256})",
        f"  checks: {', '.join(report.checks)}",
        f"  training set: {report.train.row_count} rows, key root {report.train.key_root}",
        f"  golden set:   {report.golden.row_count} rows, key root {report.golden.key_root}",
    ]
    lines += [f"  {m.get('slice')}: {m.get('type')} = {m.get('value')}" for m in metrics]
    emit(args, {**report.to_dict(), "metrics": metrics}, "\n".join(lines))
    return 0


def _bom_for_proof(args: argparse.Namespace) -> tuple[str, Any, Any]:
    envelope = _read_bytes(args.bom, "BOM")
    if args.key or args.key_file:
        try:
            report = bom_mod.verify_bom(envelope, load_public_keys(args.key, args.key_file))
        except bom_mod.BomError as exc:
            raise EvidenceError(f"bom-{exc.check}", exc.message) from exc
        return report.version, report.train, report.golden
    print(
        "warning: no --key: the BOM's signature is NOT checked; the roots are only as trustworthy as the file",
        file=sys.stderr,
    )
    try:
        statement = bom_mod.payload_unverified(envelope)
        version, _, train, golden = bom_mod.check_bom_document(statement.get("predicate"))
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{args.bom} is not a BOM envelope ({exc})") from exc
    except bom_mod.BomError as exc:
        raise EvidenceError(f"bom-{exc.check}", exc.message) from exc
    return version, train, golden


def cmd_proof(args: argparse.Namespace) -> int:
    proof = _read_json(args.proof, "proof")
    try:
        version, train, golden = _bom_for_proof(args)
        if not isinstance(proof, dict):
            raise EvidenceError("shape", "the proof is not a JSON object")
        if proof.get("kind") == "disjointness":
            count = commit_mod.verify_disjointness(
                proof, train.key_root, train.key_count, golden.key_root, golden.key_count
            )
            data = {"ok": True, "kind": "disjointness", "version": version, "golden_keys_checked": count}
            text = f"OK: none of the {count} golden keys is in the training set of {version}"
            if args.expect == "member":
                raise EvidenceError("expect", "a disjointness proof shows absence, --expect member was asked")
            emit(args, data, text)
            return 0
        roots = {"training": (train.key_root, train.key_count), "golden": (golden.key_root, golden.key_count)}
        which = next((name for name, (root, _) in roots.items() if proof.get("root") == root), None)
        if which is None:
            raise EvidenceError(
                "root",
                f"the proof's root {proof.get('root')} is neither the training nor the golden key root of {version}",
            )
        key, member = commit_mod.verify_key_proof(proof, *roots[which])
    except EvidenceError as exc:  # the proof's own checks (ProofError) and the BOM's and shape's above
        return _fail(args, exc.check, exc.message)
    verdict = "IS" if member else "is NOT"
    data = {
        "ok": True,
        "kind": proof.get("kind"),
        "key": key,
        "member": member,
        "set": which,
        "version": version,
    }
    if args.expect and (args.expect == "member") != member:
        return _fail(args, "expect", f"the proof verifies, but key {key} {verdict} in the {which} set", data)
    emit(args, data, f"OK: example {key} {verdict} in the {which} set of adapter {version}")
    return 0


def _add_key_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument(
        "--key",
        help="public key(s): base64, PEM, or a file; comma-separated for several"
        + ("" if required else " (omit to skip the signature check)"),
    )
    p.add_argument("--key-file", help="a file holding the public key")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `bom` and `proof` to the `verify` group (`verify certificate` is ``ratchet_stats.cli_verify``'s)."""
    p = subparsers.add_parser(
        "bom",
        help="verify an adapter's signed CycloneDX ML-BOM",
        description="Verify an adapter's BOM: DSSE signature (first), in-toto Statement, CycloneDX 1.6 shape, "
        "subjects = adapter files; optionally NOTICE.md and the adapter files themselves.",
    )
    p.add_argument("file", help="bom.dsse.json")
    _add_key_args(p, required=True)
    p.add_argument(
        "--notice", help="NOTICE.md: its sha256 must match the BOM and it must name every license/source"
    )
    p.add_argument("--adapter-dir", help="adapter folder: every file's sha256 must match the BOM")
    p.set_defaults(func=cmd_bom)

    p = subparsers.add_parser(
        "proof",
        help="check a training-set membership / non-membership / disjointness proof against a BOM",
        description="Check a proof made by `ratchet proof make` (or the gateway) against the Merkle roots the "
        "BOM records: membership (Merkle inclusion), non-membership (adjacent sorted keys) or disjointness "
        "(every golden key absent from the training set).",
    )
    p.add_argument("--bom", required=True, help="the adapter's bom.dsse.json")
    p.add_argument("--proof", required=True, help="proof JSON file")
    p.add_argument("--expect", choices=["member", "absent"], help="exit 1 unless the proof shows this")
    _add_key_args(p, required=False)
    p.set_defaults(func=cmd_proof)
