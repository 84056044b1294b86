"""What every kind of evidence shares: the error its verifier raises, and the format of a signed document.

**The error.** Evidence failed a check, and ``check`` names it.
A signed envelope (``ratchet_stats.dsse.VerificationError``), a receipt and its files
(``ratchet_stats.receipt.ReceiptError``), a BOM (``ratchet_stats.bom_format.BomError``) and a training-set
proof (``ratchet_stats.commitment.ProofError``) each raise their own subclass, so a caller catches one kind
or, with ``EvidenceError``, any. ``str(exc)`` is ``"<check>: <message>"``; the CLIs print ``check`` and
``message`` apart.

**The format.** A signed document that ``ratchet verify NAME`` checks (``ratchet_stats.cli_verify``) exports one
:class:`DocumentFormat` per version (the release manifest's is ``ratchet_stats.release_manifest.FORMAT``, the
certificate's ``ratchet_stats.certificate.FORMATS``); the CLI keys them by predicate type, so a new version of a
document is one format object and one entry there. Receipts, which carry files beside the envelope, have their
own richer format (``ratchet_stats.receipt.ReceiptFormat``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class EvidenceError(Exception):
    """Evidence failed the check ``check`` (e.g. ``signature``, ``rows``); ``message`` says what and what next."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(check, message)  # both in args, so the error pickles and unpickles whole
        self.check = check
        self.message = message

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


@dataclass(frozen=True)
class DocumentFormat:
    """One version of a signed document: its in-toto ``predicate_type``; ``check(statement)``, the problems of a
    statement whose signature verified ([] = consistent; reported as check ``predicate``); ``summary(predicate)``,
    the lines a person reads once it verified."""

    predicate_type: str
    check: Callable[[Mapping[str, Any]], list[str]]
    summary: Callable[[Mapping[str, Any]], list[str]]
