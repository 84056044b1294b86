"""`ratchet verify manifest|certificate FILE --key PUB`: verify a signed Ratchet document offline.

Order (fails closed, naming the failed check; exit 1): the DSSE signature over PAE first (``envelope``,
``payload-type``, ``keyid``, ``signature``), only then the payload is parsed as an in-toto Statement v1
(``payload``, ``statement-type``, ``subject``, ``predicate-type``, ``predicate``), then the predicate-specific
checker registered in :data:`PREDICATE_CHECKERS` (check ``predicate``). Exit 0 prints the subjects, their
digests and the key id that signed.

Other modules extend this one: add ``PREDICATE_CHECKERS[predicate_type] = fn`` (``fn(predicate) -> list of
problems``, empty = consistent) and optionally ``PREDICATE_SUMMARIES[predicate_type] = fn(predicate) -> lines``;
modules that need their own subcommand call :func:`add_document_command` or reuse :func:`add_key_arguments`,
:func:`load_public_keys` and :func:`verify_document`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_stats.canonical import digest
from ratchet_stats.cli import CliError, emit
from ratchet_stats.dsse import VerificationError, parse_statement, verify_envelope_detailed
from ratchet_stats.keys import Ed25519PublicKey, load_private_key, load_public_key

MANIFEST_PREDICATE = "https://ratchet.dev/release-manifest/v1"
CERTIFICATE_PREDICATE = "https://ratchet.dev/evaluation-certificate/v1"

Checker = Callable[[dict[str, Any]], list[str]]

# predicateType -> checker of the predicate (problems; [] = consistent). Extended by other modules.
PREDICATE_CHECKERS: dict[str, Checker] = {}
# predicateType -> human-readable summary lines of the predicate. Optional.
PREDICATE_SUMMARIES: dict[str, Callable[[dict[str, Any]], list[str]]] = {}
# predicateType -> module whose check_certificate-style hooks are loaded on first use if nobody registered one.
_DEFAULT_HOOK_MODULES: dict[str, tuple[str, str, str]] = {
    CERTIFICATE_PREDICATE: ("ratchet_stats.certificate", "check_certificate", "summary_lines"),
}

# subcommand -> (predicateType, one-line help)
DOCUMENTS: dict[str, tuple[str, str]] = {
    "manifest": (MANIFEST_PREDICATE, "verify a signed release manifest"),
    "certificate": (CERTIFICATE_PREDICATE, "verify a signed evaluation certificate"),
}

_STAGES = {"teacher", "shadow", "canary", "live"}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.S)


def check_manifest(predicate: dict[str, Any]) -> list[str]:
    """Structural checks of a release manifest predicate (``ratchet_core.manifest.Manifest``)."""
    problems: list[str] = []
    seq = predicate.get("sequence")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        problems.append(f"sequence is {seq!r}, expected a non-negative integer")
    tasks = predicate.get("tasks")
    if not isinstance(tasks, dict):
        problems.append("tasks is not an object")
        tasks = {}
    for name, release in sorted(tasks.items()):
        if not isinstance(release, dict):
            problems.append(f"tasks.{name} is not an object")
            continue
        if release.get("stage", "teacher") not in _STAGES:
            problems.append(
                f"tasks.{name}.stage is {release.get('stage')!r}, expected one of {sorted(_STAGES)}"
            )
        pct = release.get("canary_percent", 0.0)
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 <= pct <= 100:
            problems.append(f"tasks.{name}.canary_percent is {pct!r}, expected a number in [0, 100]")
    flags = predicate.get("flags", {})
    if not isinstance(flags, dict):
        problems.append("flags is not an object")
    else:
        rate = flags.get("audit_rate", 0.0)
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 <= rate <= 1:
            problems.append(f"flags.audit_rate is {rate!r}, expected a number in [0, 1]")
    pins = predicate.get("pins", [])
    if not isinstance(pins, list) or not all(isinstance(p, str) for p in pins):
        problems.append("pins is not a list of task names")
    return problems


def summarize_manifest(predicate: dict[str, Any]) -> list[str]:
    lines = [
        f"sequence {predicate.get('sequence')}  issued {predicate.get('issued_at')}  by {predicate.get('actor')}"
    ]
    for name, release in sorted((predicate.get("tasks") or {}).items()):
        if isinstance(release, dict):
            extra = f" {release.get('canary_percent')}%" if release.get("stage") == "canary" else ""
            lines.append(f"{name}: {release.get('stage')} {release.get('version') or ''}{extra}".rstrip())
    return lines


PREDICATE_CHECKERS[MANIFEST_PREDICATE] = check_manifest
PREDICATE_SUMMARIES[MANIFEST_PREDICATE] = summarize_manifest


def _hooks(predicate_type: str) -> tuple[Checker | None, Callable[[dict[str, Any]], list[str]] | None]:
    if predicate_type not in PREDICATE_CHECKERS and predicate_type in _DEFAULT_HOOK_MODULES:
        module_name, check_name, summary_name = _DEFAULT_HOOK_MODULES[predicate_type]
        if importlib.util.find_spec(module_name) is not None:
            module = importlib.import_module(module_name)
            if callable(getattr(module, check_name, None)):
                PREDICATE_CHECKERS.setdefault(predicate_type, getattr(module, check_name))
            if callable(getattr(module, summary_name, None)):
                PREDICATE_SUMMARIES.setdefault(predicate_type, getattr(module, summary_name))
    return PREDICATE_CHECKERS.get(predicate_type), PREDICATE_SUMMARIES.get(predicate_type)


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
    envelope: bytes | str | Mapping[str, Any], public_keys: Any, predicate_type: str
) -> DocumentReport:
    """Signature first, then the in-toto Statement and its predicateType, then the registered predicate checker."""
    try:
        verified = verify_envelope_detailed(envelope, public_keys)
        statement = parse_statement(verified.payload, predicate_type)
    except VerificationError as exc:
        return DocumentReport(ok=False, check=exc.check, error=exc.message)
    checker, summarizer = _hooks(predicate_type)
    problems = list(checker(statement["predicate"])) if checker else []
    if predicate_type == MANIFEST_PREDICATE:
        problems += _manifest_subject_problems(statement)
    summary = list(summarizer(statement["predicate"])) if summarizer and not problems else []
    if problems:
        return DocumentReport(
            ok=False,
            check="predicate",
            error="; ".join(problems),
            keyid=verified.keyid,
            statement=statement,
            problems=problems,
        )
    return DocumentReport(ok=True, keyid=verified.keyid, statement=statement, summary=summary)


def _manifest_subject_problems(statement: dict[str, Any]) -> list[str]:
    # ratchet_core.manifest names its subject release-manifest/<sequence> with the predicate's digest.
    predicate = statement["predicate"]
    problems = []
    for s in statement["subject"]:
        if s["name"].startswith("release-manifest/"):
            if s["name"] != f"release-manifest/{predicate.get('sequence')}":
                problems.append(f"subject {s['name']} does not match sequence {predicate.get('sequence')}")
            if s["digest"].get("sha256") != digest(predicate):
                problems.append(f"subject {s['name']} digest is not the digest of the signed predicate")
    return problems


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
        keys.extend(_public_key_from_text(t, origin) for t in texts)
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


def run_document(args: argparse.Namespace, predicate_type: str, label: str) -> int:
    """The body of a ``verify <document>`` subcommand: exit 0 verified, 1 failed (named check), 2 input error."""
    keys = load_public_keys(args.key, args.key_file)
    data = read_document(args.file)
    report = verify_document(data, keys, predicate_type)
    if not report.ok:
        if args.json:
            print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        else:
            print(f"FAILED ({report.check}): {report.error}", file=sys.stderr)
        return 1
    emit(args, report.to_dict(), report_text(report, label))
    return 0


def add_document_command(
    subparsers: argparse._SubParsersAction, name: str, predicate_type: str, help_text: str
) -> argparse.ArgumentParser:
    """Add ``verify NAME FILE --key ... [--json]`` checking documents of `predicate_type`."""
    p = subparsers.add_parser(
        name,
        help=help_text,
        description=(
            f"{help_text[0].upper()}{help_text[1:]} offline: the DSSE signature first, then the in-toto Statement "
            f"(predicateType {predicate_type}) and the predicate's own checks. Exit 0 verified, 1 failed (the "
            "failed check is named), 2 usage or input error."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the signed document (DSSE envelope JSON); - reads stdin")
    add_key_arguments(p)
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    label = name.replace("-", " ")
    p.set_defaults(func=lambda args: run_document(args, predicate_type, label))
    return p


def register(subparsers: argparse._SubParsersAction) -> None:
    for name, (predicate_type, help_text) in DOCUMENTS.items():
        add_document_command(subparsers, name, predicate_type, help_text)
