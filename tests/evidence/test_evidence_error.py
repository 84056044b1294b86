"""Every verifier fails with an EvidenceError naming its check: one ``except`` catches a bad envelope, receipt, BOM
or training-set proof, and the error survives pickling (Dagster carries errors between processes)."""

from __future__ import annotations

import pickle

import pytest

from ratchet_stats.bom_format import BomError, verify_bom
from ratchet_stats.commitment import ProofError, verify_key_proof
from ratchet_stats.dsse import VerificationError, verify_envelope
from ratchet_stats.evidence import EvidenceError
from ratchet_stats.receipt import ReceiptError, verify_receipt


@pytest.mark.parametrize(
    ("kind", "fail", "check"),
    [
        (VerificationError, lambda key: verify_envelope(b"{}", key), "envelope"),
        (ReceiptError, lambda key: verify_receipt(b"not json", key), "envelope"),
        (BomError, lambda key: verify_bom(b"{}", key), "signature"),
        (ProofError, lambda key: verify_key_proof({"_type": "other"}, "00" * 32, 1), "type"),
    ],
)
def test_each_verifier_fails_with_an_evidence_error_naming_the_check(signing_key, kind, fail, check) -> None:
    with pytest.raises(EvidenceError) as info:
        fail(signing_key.public_key())
    exc = info.value
    assert type(exc) is kind and exc.check == check
    assert str(exc) == f"{check}: {exc.message}" and exc.message
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is kind and (again.check, again.message) == (exc.check, exc.message)
