"""The one error every verifier in this package raises: evidence failed a check, and ``check`` names it.

A signed envelope (``ratchet_stats.dsse.VerificationError``), a receipt and its files
(``ratchet_stats.receipt.ReceiptError``), a BOM (``ratchet_stats.bom.BomError``) and a training-set proof
(``ratchet_stats.commitment.ProofError``) each raise their own subclass, so a caller catches one kind or, with
``EvidenceError``, any. ``str(exc)`` is ``"<check>: <message>"``; the CLIs print ``check`` and ``message`` apart.
"""

from __future__ import annotations


class EvidenceError(Exception):
    """Evidence failed the check ``check`` (e.g. ``signature``, ``rows``); ``message`` says what and what next."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(check, message)  # both in args, so the error pickles and unpickles whole
        self.check = check
        self.message = message

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"
