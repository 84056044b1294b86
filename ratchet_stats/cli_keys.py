"""`ratchet keygen`: make an Ed25519 signing key for the control plane; print its key id and public key.

The private key goes to ``--out FILE`` (mode 0600), or to standard output only when ``--stdout`` is given
explicitly (for piping into a secret store). It is never printed otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ratchet_stats.cli import CliError, emit
from ratchet_stats.keys import (
    generate_private_key,
    key_id,
    private_key_b64,
    private_key_pem,
    public_key_b64,
    public_key_pem,
    save_private_key,
)

HELP = "generate an Ed25519 signing key"
DESCRIPTION = (
    "Generate an Ed25519 signing key for signing manifests, certificates, BOMs and receipts. Writes the private "
    "key to --out (mode 0600) and prints its key id and public key; give the public key to gateways and auditors "
    "and point RATCHET_SIGNING_KEY at the private key file (RATCHET_SIGNING_KEY=@FILE)."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("keygen", help=HELP, description=DESCRIPTION)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="FILE", help="write the private key to FILE with mode 0600")
    where.add_argument(
        "--stdout",
        action="store_true",
        help="print the PRIVATE key to standard output instead of a file (key id and public key go to stderr)",
    )
    p.add_argument(
        "--format",
        choices=("pem", "base64"),
        default="pem",
        help="key encoding: PKCS#8/SPKI PEM, or base64 of the raw 32 bytes (default: pem)",
    )
    p.add_argument("--public-out", metavar="FILE", help="also write the public key to FILE")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out and Path(args.out).exists() and not args.force:
        raise CliError(
            f"{args.out} already exists; choose another --out, or pass --force to replace it (documents signed "
            "by the old key will no longer verify with the new public key)"
        )
    key = generate_private_key()
    public_text = public_key_pem(key) if args.format == "pem" else public_key_b64(key) + "\n"
    data: dict[str, object] = {
        "key_id": key_id(key),
        "public_key": public_key_b64(key),
        "public_key_pem": public_key_pem(key),
        "format": args.format,
        "private_key_file": None,
        "public_key_file": None,
    }
    try:
        if args.out:
            data["private_key_file"] = str(save_private_key(key, args.out, args.format))
        if args.public_out:
            target = Path(args.public_out)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(public_text, encoding="ascii")
            data["public_key_file"] = str(target)
    except OSError as exc:
        raise CliError(f"cannot write the key: {exc.strerror} ({exc.filename}); check the directory") from exc

    lines = [f"key id:     {data['key_id']}", f"public key: {data['public_key']}"]
    if data["public_key_file"]:
        lines.append(f"public key written to {data['public_key_file']}")
    if args.stdout:
        private_text = private_key_pem(key) if args.format == "pem" else private_key_b64(key) + "\n"
        if args.json:
            emit(args, {**data, "private_key": private_text}, "")
        else:
            sys.stdout.write(private_text)
            print("\n".join(lines), file=sys.stderr)
        return 0
    lines.append(
        f"private key written to {data['private_key_file']} (mode 0600); "
        f"use it with RATCHET_SIGNING_KEY=@{Path(str(data['private_key_file'])).resolve()}"
    )
    emit(args, data, "\n".join(lines))
    return 0
