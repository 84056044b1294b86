"""`ratchet verify manifest|certificate FILE --key PUB`: verify a signed Ratchet document offline.

Order (fails closed, naming the failed check; exit 1): the DSSE signature over PAE first (``envelope``,
``payload-type``, ``keyid``, ``signature``), only then the payload is parsed as an in-toto Statement v1
(``payload``, ``statement-type``, ``subject``, ``predicate``), then its ``predicateType`` must be one of the
document's formats (``predicate-type``), whose own ``check`` runs last (``predicate``). Exit 0 prints the
subjects, their digests and the key id that signed.

:data:`DOCUMENTS` maps each subcommand to the formats it accepts (``ratchet_stats.evidence.DocumentFormat``, one
per version, exported by the document's module); a new version is one more format in its tuple, a new document
one more entry. Modules that need their own subcommand reuse :func:`add_key_arguments`, :func:`load_public_keys`
and :func:`verify_document`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_stats import certificate, release_manifest
from ratchet_stats.cli import CliError, emit
from ratchet_stats.dsse import VerificationError, parse_statement, verify_envelope_detailed
from ratchet_stats.evidence import DocumentFormat
from ratchet_stats.keys import Ed25519PublicKey, load_private_key, load_public_key

# subcommand -> (the formats it accepts, one per version; one-line help)
DOCUMENTS: dict[str, tuple[tuple[DocumentFormat, ...], str]] = {
    "manifest": ((release_manifest.FORMAT,), "verify a signed release manifest"),
    "certificate": (tuple(certificate.FORMATS.values()), "verify a signed evaluation certificate"),
}

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.S)


@dataclass
class DocumentReport:
    """The outcome of :func:`verify_document`. ``check`` names the failed check when ``ok`` is False."""

    ok: bool
    check: str | None = None
    error: str | None = None
    keyid: str | None = None
    statement: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        st = self.statement or {}
        return {
            "ok": self.ok,
            "check": self.check,
            "error": self.error,
            "key_id": self.keyid,
            "predicate_type": st.get("predicateType"),
            "subjects": st.get("subject", []),
            "problems": self.problems,
            "predicate": st.get("predicate"),
        }


def verify_document(
    envelope: bytes | str | Mapping[str, Any], public_keys: Any, formats: Sequence[DocumentFormat]
) -> DocumentReport:
    """Signature first, then the in-toto Statement, its predicateType (one of `formats`), then that format's check."""
    try:
        verified = verify_envelope_detailed(envelope, public_keys)
        statement = parse_statement(verified.payload)
    except VerificationError as exc:
        return DocumentReport(ok=False, check=exc.check, error=exc.message)
    by_type = {f.predicate_type: f for f in formats}
    fmt = by_type.get(statement["predicateType"])
    if fmt is None:
        expected = " or ".join(sorted(by_type))
        got = statement["predicateType"]
        error = f"predicateType is {got!r}; expected {expected} (is this the right kind of document?)"
        return DocumentReport(ok=False, check="predicate-type", error=error, keyid=verified.keyid)
    problems = list(fmt.check(statement))
    if problems:
        return DocumentReport(
            ok=False,
            check="predicate",
            error="; ".join(problems),
            keyid=verified.keyid,
            statement=statement,
            problems=problems,
        )
    return DocumentReport(
        ok=True, keyid=verified.keyid, statement=statement, summary=list(fmt.summary(statement["predicate"]))
    )


def _key_texts(text: str) -> list[str]:
    blocks = [m.group(0) for m in _PEM_BLOCK.finditer(text)]
    rest = _PEM_BLOCK.sub("", text)
    return blocks + [line.strip() for line in rest.splitlines() if line.strip() and not line.startswith("#")]


def _public_key_from_text(text: str, origin: str) -> Ed25519PublicKey:
    try:
        if "PRIVATE KEY-----" in text:  # an operator's own key file: only its public half is used
            return load_private_key(text).public_key()
        return load_public_key(text)
    except ValueError as exc:
        raise CliError(f"{origin}: {exc}") from None


def _names_a_file(text: str) -> bool:
    """Whether a --key value that is not a key reads as a path (base64 has "/" too, so only after it failed)."""
    return len(text) < 4096 and (
        "/" in text or "\\" in text or text.endswith((".pub", ".pem", ".key", ".txt"))
    )


def load_public_keys(key: str | None, key_file: str | None) -> list[Ed25519PublicKey]:
    """Keys from ``--key`` (comma-separated base64, PEM text or file paths) and ``--key-file`` (PEM blocks and/or
    base64 lines; a private key file contributes its public half)."""
    keys: list[Ed25519PublicKey] = []
    sources: list[tuple[str, str]] = []
    if key_file:
        try:
            sources.append((Path(key_file).read_text(encoding="ascii"), f"--key-file {key_file}"))
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(
                f"cannot read --key-file {key_file}: {exc}; pass a PEM or base64 public key file"
            ) from None
    # A PEM argument is kept whole; base64 keys and paths are comma-separated.
    parts = [key] if key and "-----BEGIN" in key else (key or "").split(",")
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if len(part) < 4096 and not part.startswith("-----") and Path(part).is_file():
            sources.append((Path(part).read_text(encoding="ascii", errors="replace"), f"--key {part}"))
        else:
            sources.append((part, "--key"))
    for text, origin in sources:
        texts = _key_texts(text)
        if not texts:
            raise CliError(
                f"{origin}: holds no key; pass the signer's public key (printed by `ratchet keygen`)"
            )
        try:
            keys.extend(_public_key_from_text(t, origin) for t in texts)
        except CliError:
            if origin == "--key" and _names_a_file(text):  # a path that is not there, not a bad key
                raise CliError(
                    f"--key {text}: no such file; pass the signer's public key file ($RATCHET_HOME/keys/"
                    "signing.pub, written by `ratchet init`; a gateway serves it at GET /ratchet/public-key) "
                    "or the key itself"
                ) from None
            raise
    if not keys:
        raise CliError(
            "no public key given: pass --key PUB (base64 or PEM, comma-separated for several) or --key-file FILE; "
            "`ratchet keygen` prints the public key, and a gateway serves it under /ratchet/"
        )
    return keys


def read_document(path: str) -> bytes:
    """The bytes of FILE (``-`` = standard input); a CliError that says what to do when it cannot be read."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError(
            f"cannot read {path}: {exc.strerror}; pass the path of the signed JSON document"
        ) from None


def add_key_arguments(parser: argparse.ArgumentParser) -> None:
    """``--key PUB[,PUB...]`` and ``--key-file FILE``: the trusted signer keys."""
    parser.add_argument(
        "--key",
        metavar="PUBKEY[,PUBKEY...]",
        help="trusted public key(s): base64 of the raw 32 bytes, PEM, or a key file path; comma-separated",
    )
    parser.add_argument(
        "--key-file", metavar="F", help="file with trusted public key(s): PEM blocks or base64 lines"
    )


def report_text(report: DocumentReport, label: str) -> str:
    st = report.statement or {}
    lines = [
        f"OK: {label} verified",
        f"  signed by key id {report.keyid}",
        f"  predicate type {st.get('predicateType')}",
    ]
    for s in st.get("subject", []):
        digests = " ".join(f"{alg}:{value}" for alg, value in sorted(s["digest"].items()))
        lines.append(f"  subject {s['name']}  {digests}")
    lines += [f"  {line}" for line in report.summary]
    return "\n".join(lines)


def run_document(args: argparse.Namespace, formats: Sequence[DocumentFormat], label: str) -> int:
    """The body of a ``verify <document>`` subcommand: exit 0 verified, 1 failed (named check), 2 input error."""
    keys = load_public_keys(args.key, args.key_file)
    data = read_document(args.file)
    report = verify_document(data, keys, formats)
    if not report.ok:
        if args.json:
            print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        else:
            print(f"FAILED ({report.check}): {report.error}", file=sys.stderr)
        return 1
    emit(args, report.to_dict(), report_text(report, label))
    return 0


def add_document_command(
    subparsers: argparse._SubParsersAction, name: str, formats: Sequence[DocumentFormat], help_text: str
) -> argparse.ArgumentParser:
    """Add ``verify NAME FILE --key ... [--json]`` checking documents of any of `formats`."""
    types = ", ".join(f.predicate_type for f in formats)
    p = subparsers.add_parser(
        name,
        help=help_text,
        description=(
            f"{help_text[0].upper()}{help_text[1:]} offline: the DSSE signature first, then the in-toto Statement "
            f"(predicateType {types}) and the predicate's own checks. Exit 0 verified, 1 failed (the "
            "failed check is named), 2 usage or input error."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the signed document (DSSE envelope JSON); - reads stdin")
    add_key_arguments(p)
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    label = name.replace("-", " ")
    p.set_defaults(func=lambda args: run_document(args, formats, label))
    return p


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, (formats, help_text) in DOCUMENTS.items():
        add_document_command(subparsers, name, formats, help_text)
