"""Receipt formats are a registry: every version keeps its bytes, a new version is picked up by every dispatch path
once registered, and a predicate type nobody registered fails closed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_assets.night.receipts import previous_estimates
from ratchet_core.layout import ArtifactLayout
from ratchet_stats import receipt
from ratchet_stats.canonical import canonical_json, sha256_hex
from ratchet_stats.keys import generate_private_key
from ratchet_stats.receipt import ReceiptError, make_proof, v1, v2, v3, verify_client_view, verify_receipt
from tests.evidence import receipt_v4
from tests.evidence.receipt_days import DAY, KEY, NEXT_DAY, Day, sign, signed_days, v3_day, v3_parts

PUB = KEY.public_key()

# SHA-256 of the canonical JSON of what the code before the receipt package (receipt.py, receipt_v2.py,
# receipt_v3.py) signed, built and reported on receipt_days' fixed input. A change here changes evidence bytes.
PINNED = {
    "v1.envelope": "ff14e1530b28054d60a30c51e1f2666695f33f752e2fd9a8a51a2634b9e9cec7",
    "v1.report": "2c6aca9d4734953ec0d7df5f5bf0b76353c863d9b3515340c207272962715d0c",
    "v2.envelope": "3464dec9cb103d4f338c188652cbd1182713c29613cb56b084fd01df07b3132c",
    "v2.report": "008aa03c8acb83cc435923b2ac50e77badcfafd8494b5aa87322dba5414ac001",
    "v2.view": "389c3ac139f3b9089357628fb7b64467283289d1ed3967d91dd284e37b61b413",
    "v2.view_report": "aa1070c558805662a1e7d503f3ba6caa2e0a1b947f366c24c589cc1c262e6ba2",
    "v3.envelope": "00f0ce0e836b8c1a9f64ffe7fc288eb0fda132ca3a3eb9b8790676b570a465bb",
    "v3.report": "bac04d8ad394add61c3c928b42ae7f83ce03066120e627d78d387363d115df60",
    "v3.view": "ade931c17f7f095ad6660cd106c4e9cd2fdd4c44db06937261251498d2f6bac1",
    "v3.view_report": "10bfe4b1ed85554e1693ae91e31b2b282bd318ccdd6608f980fea8d2527c8b5e",
    "v3.view_small": "46ed15a24acc04c4609f4e9aee3dfc63fce94563a410ed5fb3751144fc28bb2e",
    "v3.view_small_report": "ce7bbf25eeb85162071e7533ba8aebaeab4d02d94646f3512bd4a6624ad7842e",
    "v3-next.envelope": "4619843eb6ecd0ff9603bc322c41118555f803dc2066e419ebff22a8a2121cd9",
    "v3-next.report": "9d3d2a0a63f1379f649513103326a230a9ca7a4dd75c17d01d7e3054125cd702",
}


def _h(obj: object) -> str:
    return sha256_hex(canonical_json(obj))


def test_every_version_keeps_its_bytes_views_and_reports() -> None:
    days = signed_days()
    d1, d2, d3, d4 = days["v1"], days["v2"], days["v3"], days["v3-next"]
    proof = make_proof(DAY, json.loads(d1.leaves[3])["request_id"], 3, d1.leaves, d1.envelope)
    v2_view = v2.make_client_view(d2.envelope, DAY, "acme", d2.clients, d2.estimates, d2.own_rows("acme"))
    globex_pairs = [b for b in d3.pairs if json.loads(b)["client"] == "globex"]
    v3_view = v3.make_client_view(
        d3.envelope, DAY, "globex", d3.clients, d3.estimates, d3.own_rows("globex"), globex_pairs
    )
    v3_small = v3.make_client_view(d3.envelope, DAY, "acme", d3.clients, d3.estimates)
    next_report = verify_receipt(
        d4.envelope, PUB, prev_envelope=d3.envelope, prev_estimates=d3.estimates, **d4.files()
    )
    got = {
        "v1.envelope": _h(d1.envelope),
        "v1.report": _h(verify_receipt(d1.envelope, PUB, proof=proof, **d1.files())),
        "v2.envelope": _h(d2.envelope),
        "v2.report": _h(verify_receipt(d2.envelope, PUB, **d2.files())),
        "v2.view": _h(v2_view),
        "v2.view_report": _h(verify_client_view(v2_view, PUB)),
        "v3.envelope": _h(d3.envelope),
        "v3.report": _h(verify_receipt(d3.envelope, PUB, **d3.files())),
        "v3.view": _h(v3_view),
        "v3.view_report": _h(verify_client_view(v3_view, PUB)),
        "v3.view_small": _h(v3_small),
        "v3.view_small_report": _h(verify_client_view(v3_small, PUB)),
        "v3-next.envelope": _h(d4.envelope),
        "v3-next.report": _h(next_report),
    }
    assert got == PINNED
    # The fixed input exercises what it should: a carried estimate, a chained check, every file.
    assert [json.loads(b)["source"] for b in d4.estimates] == ["none", "day", "previous"]
    assert next_report["checks"] == [
        "signature",
        "predicate",
        "chain",
        "clients",
        "estimates",
        "chained-estimates",
        "pairs",
        "rows",
    ]


def test_the_registry_maps_each_predicate_type_to_its_version() -> None:
    assert {t: f.version for t, f in receipt.FORMATS.items()} == {
        "https://ratchet.dev/receipt/v1": 1,
        "https://ratchet.dev/receipt/v2": 2,
        "https://ratchet.dev/receipt/v3": 3,
    }
    assert [m.FORMAT for m in (v1, v2, v3)] == [receipt.format_of(m.PREDICATE_TYPE) for m in (v1, v2, v3)]
    assert receipt.CURRENT is v3.FORMAT
    # Only versions from v2 on sign estimate lines and a client tree.
    assert v1.FORMAT.check_estimates is None and v1.FORMAT.check_client_view is None
    assert all(f.check_estimates and f.check_client_view for f in (v2.FORMAT, v3.FORMAT))


def _v4_envelope(note: str = "v3 plus a note") -> tuple[Day, dict]:
    day, predicate = v3_parts(DAY, None)
    p4 = receipt_v4.make_predicate(predicate, note)
    day.envelope = sign(receipt_v4.PREDICATE_TYPE, p4, v3.subjects(DAY, p4))
    return day, p4


def test_an_unknown_predicate_type_fails_closed_naming_it() -> None:
    day, _ = _v4_envelope()
    with pytest.raises(ReceiptError) as info:
        verify_receipt(day.envelope, PUB, **day.files())
    assert info.value.check == "predicate-type"
    assert receipt_v4.PREDICATE_TYPE in info.value.message and "newer ratchet" in info.value.message
    assert v3.PREDICATE_TYPE in info.value.message  # says which types it knows
    # The signature is checked first: the same envelope under a key nobody trusts fails on the key.
    with pytest.raises(ReceiptError) as info:
        verify_receipt(day.envelope, generate_private_key().public_key())
    assert info.value.check == "keyid"
    # As a client view, and as the previous receipt of a chain, it fails the same way.
    view = v3.make_client_view(day.envelope, DAY, "acme", day.clients, day.estimates)
    with pytest.raises(ReceiptError, match="predicate-type: receipt: predicateType"):
        verify_client_view(view, PUB)
    following = v3_day(NEXT_DAY, day)
    with pytest.raises(ReceiptError, match="predicate-type: previous receipt: predicateType"):
        verify_receipt(following.envelope, PUB, prev_envelope=day.envelope)
    # A signed document of another kind is not a receipt either.
    other = sign(
        "https://ratchet.dev/evaluation-certificate/v1",
        {"version": "v1"},
        v3.subjects(DAY, _v4_envelope()[1]),
    )
    with pytest.raises(ReceiptError, match="predicate-type"):
        verify_receipt(other, PUB)


def test_a_registered_version_is_picked_up_by_every_dispatch_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A v4 is one module (tests/evidence/receipt_v4.py) and one registry entry."""
    day, _ = _v4_envelope()
    monkeypatch.setitem(receipt.FORMATS, receipt_v4.PREDICATE_TYPE, receipt_v4.FORMAT)
    # The auditor's verification: v4's own predicate check runs between the shape and the chain.
    report = verify_receipt(day.envelope, PUB, **day.files())
    assert report["version"] == 4
    assert report["checks"] == ["signature", "predicate", "note", "clients", "estimates", "pairs", "rows"]
    blank, _ = _v4_envelope(note=" ")
    with pytest.raises(ReceiptError, match="note: the note is empty"):
        verify_receipt(blank.envelope, PUB)
    # A client's view.
    view = v3.make_client_view(day.envelope, DAY, "acme", day.clients, day.estimates)
    assert verify_client_view(view, PUB)["version"] == 4
    # A v3 day chained to the v4 day, its estimates carried through v4's estimate check.
    following = v3_day(NEXT_DAY, day)
    chained = verify_receipt(
        following.envelope, PUB, prev_envelope=day.envelope, prev_estimates=day.estimates, **following.files()
    )
    assert "chained-estimates" in chained["checks"]
    # The night reads the previous day's estimate lines through the same registry.
    layout = ArtifactLayout(tmp_path)
    layout.receipt_dir(DAY).mkdir(parents=True)
    layout.receipt_envelope(DAY).write_bytes(canonical_json(day.envelope))
    layout.receipt_estimates(DAY).write_bytes(b"".join(b + b"\n" for b in day.estimates))
    link = {"day": DAY, "digest": receipt.envelope_digest(day.envelope)}
    carried = previous_estimates(tmp_path, link)
    assert sorted(carried) == sorted(json.loads(b)["task"] for b in day.estimates) and carried
    monkeypatch.delitem(receipt.FORMATS, receipt_v4.PREDICATE_TYPE)
    assert previous_estimates(tmp_path, link) == {}  # unknown again: nothing carried, as for v1
