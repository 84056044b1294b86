"""Daily receipts: what the teacher would have cost vs what was paid, per client, committed and signed.

A receipt is a DSSE envelope (Ed25519) over an in-toto Statement whose ``predicateType`` names its version. Each
version is one module exporting one :class:`ReceiptFormat` (``FORMAT``), and :data:`FORMATS` maps the predicate
type to it; every verification below dispatches through that map, so a new version is one module and one line in
``FORMATS`` (and ``CURRENT``, once the night signs it):

- ``v3`` (:data:`CURRENT`, what the night signs now): v2 plus the day's audit and shadow pair calls, committed in
  their own tree and counted in what was paid;
- ``v2``: student-served requests priced at the teacher's prices (``ratchet_stats.teacher_equivalent``), and
  per-client totals committed in their own Merkle tree, so the envelope names no client;
- ``v1``: every client's totals in the predicate; kept so old receipts verify.

A predicate type not in ``FORMATS`` fails closed (check ``predicate-type``). What the versions share (the
error, line and tree checks) is in ``common``; the inclusion proof of one request row, every version's, in
``proof``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ratchet_stats.canonical import canonical_json, sha256_hex
from ratchet_stats.dsse import VerificationError, verify_statement
from ratchet_stats.receipt import v1, v2, v3
from ratchet_stats.receipt.common import (
    AuditorFiles,
    Previous,
    ReceiptError,
    ReceiptFormat,
    envelope_digest,
    micro,
)
from ratchet_stats.receipt.proof import PROOF_TYPE, check_proof, make_proof, make_stored_proof

FORMATS: dict[str, ReceiptFormat] = {f.predicate_type: f for f in (v1.FORMAT, v2.FORMAT, v3.FORMAT)}
CURRENT: ReceiptFormat = v3.FORMAT

__all__ = [
    "CURRENT",
    "FORMATS",
    "PROOF_TYPE",
    "ReceiptError",
    "ReceiptFormat",
    "check_proof",
    "envelope_digest",
    "format_of",
    "make_proof",
    "make_stored_proof",
    "micro",
    "signed_predicate",
    "verify_client_view",
    "verify_receipt",
]


def format_of(predicate_type: Any, what: str = "receipt") -> ReceiptFormat:
    """The registered format of `predicate_type`; fails closed (check ``predicate-type``) for any other."""
    fmt = FORMATS.get(predicate_type) if isinstance(predicate_type, str) else None
    if fmt is None:
        known = ", ".join(sorted(FORMATS))
        raise ReceiptError(
            "predicate-type",
            f"{what}: predicateType is {predicate_type!r}, not a receipt format this verifier knows ({known}); "
            "a receipt of a newer version needs a newer ratchet",
        )
    return fmt


def signed_predicate(
    envelope: Any, public_keys: Any, what: str = "receipt"
) -> tuple[ReceiptFormat, dict[str, Any]]:
    """(format, predicate) of a receipt of any registered version: the signature first, then the payload, its
    predicate type (``format_of``), the predicate's shape and a subject carrying the request root."""
    try:
        statement = verify_statement(envelope, public_keys)
    except VerificationError as exc:
        raise ReceiptError(exc.check, f"{what}: {exc}") from None
    fmt = format_of(statement.get("predicateType"), what)
    predicate = statement["predicate"]
    fmt.check_shape(predicate, what)
    subjects = statement.get("subject") or []
    if not any(s.get("digest", {}).get("sha256") == predicate["requests"]["root"] for s in subjects):
        raise ReceiptError("predicate", f"{what}: no subject carries the request root")
    return fmt, predicate


def check_chain(predicate: Mapping[str, Any], prev_envelope: Any, public_keys: Any) -> Previous:
    """The receipt names ``prev_envelope`` (any version) as its predecessor (day and digest); returns it."""
    prev_format, prev = signed_predicate(prev_envelope, public_keys, "previous receipt")
    link = predicate.get("previous")
    if link is None:
        raise ReceiptError("chain", f"receipt {predicate['day']} names no previous receipt")
    if link["day"] != prev["day"]:
        raise ReceiptError("chain", f"receipt chains to day {link['day']}, the file given is {prev['day']}")
    if not prev["day"] < predicate["day"]:
        raise ReceiptError("chain", "the previous receipt is not from an earlier day")
    got = envelope_digest(_envelope_dict(prev_envelope))
    if link["digest"] != got:
        raise ReceiptError("chain", f"previous receipt digest is {got}, the receipt names {link['digest']}")
    return Previous(prev_format, prev)


def _envelope_dict(envelope: Any) -> dict[str, Any]:
    return dict(envelope) if isinstance(envelope, Mapping) else json.loads(envelope)


def verify_receipt(
    envelope: Any,
    public_keys: Any,
    prev_envelope: Any = None,
    proof: Mapping[str, Any] | None = None,
    leaves: Sequence[bytes] | None = None,
    clients: Sequence[bytes] | None = None,
    estimates: Sequence[bytes] | None = None,
    prev_estimates: Sequence[bytes] | None = None,
    pairs: Sequence[bytes] | None = None,
) -> dict[str, Any]:
    """Verify a receipt of any registered version offline; returns a report. Raises ReceiptError naming the check.

    In order: the signature, the predicate (its type and shape), the version's checks of the predicate alone (v1:
    its totals), the chain to `prev_envelope`, an inclusion `proof` of one row, then the version's checks of the
    auditor's files (``ReceiptFormat.check_files``): for v2 and v3 the `clients` and `estimates` lines (with them
    the report has every client's totals and the overall totals), the estimates chained from `prev_estimates`
    (the previous receipt's estimate lines), v3's `pairs` against the signed pair root, and `leaves` (every row),
    which recompute the request root and every line.
    """
    fmt, predicate = signed_predicate(envelope, public_keys, "receipt")
    checks = ["signature", "predicate", *fmt.check_predicate(predicate)]
    previous = None
    if prev_envelope is not None:
        previous = check_chain(predicate, prev_envelope, public_keys)
        checks.append("chain")
    row = None
    if proof is not None:
        row = check_proof(predicate, proof)
        checks.append("proof")
    files = AuditorFiles(leaves, clients, estimates, pairs, prev_estimates)
    found = fmt.check_files(predicate, files, previous)
    return {
        "ok": True,
        "version": fmt.version,
        "day": predicate["day"],
        "checks": [*checks, *found.checks],
        "root": predicate["requests"]["root"],
        "size": predicate["requests"]["size"],
        "totals": found.totals,
        "clients": found.clients,
        "teacher_equivalent": predicate.get("teacher_equivalent"),
        "previous": predicate["previous"],
        "row": row,
        "envelope_sha256": sha256_hex(canonical_json(_envelope_dict(envelope))),
    }


def verify_client_view(view: Mapping[str, Any], public_keys: Any) -> dict[str, Any]:
    """Verify what a client received for a day (a client view, v2 on): the signature, its own line against the
    signed client root, the estimate lines it was given, and its rows against its line."""
    if not isinstance(view, Mapping) or "envelope" not in view:
        raise ReceiptError("client-view", "not a client view: it has no envelope")
    fmt, predicate = signed_predicate(view["envelope"], public_keys, "receipt")
    if fmt.check_client_view is None:
        raise ReceiptError(
            "client-view", f"the receipt is v{fmt.version}, which has no client tree; ask the auditor"
        )
    line, checks = fmt.check_client_view(predicate, view)
    return {
        "ok": True,
        "version": fmt.version,
        "day": predicate["day"],
        "client": line["client"],
        "checks": ["signature", "predicate", *checks],
        "totals": line["totals"],
        "teacher_equivalent": predicate["teacher_equivalent"],
        "rows": len(view.get("rows") or []),
        "envelope_sha256": sha256_hex(canonical_json(dict(view["envelope"]))),
    }
