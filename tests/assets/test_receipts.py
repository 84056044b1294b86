"""Daily receipts verify offline; a changed byte, a dropped row, a broken chain or a bad proof fail, named."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ratchet_assets.effects import EffectLedger
from ratchet_assets.night.receipts import build_receipt, export_rows_jsonl, receipt_proof
from ratchet_assets.night.traffic import consolidate_traffic
from ratchet_core.control_db import make_engine
from ratchet_stats.cli import main as stats_main
from ratchet_stats.keys import load_private_key_file, load_public_key
from ratchet_stats.receipt import ReceiptError, verify_receipt

from .conftest import DAY1, DAY2


@pytest.fixture
def signed(two_days: Path) -> dict:
    art = two_days / "artifacts"
    key = load_private_key_file(two_days / "keys" / "signing.key")
    ledger = EffectLedger(make_engine(f"sqlite:///{(two_days / 'control.db').as_posix()}"))
    out = {}
    for day in (DAY1, DAY2):
        consolidate_traffic(two_days / "lake", art, day)
        out[day] = build_receipt(art, day, key, ledger)
    out["pub"] = load_public_key((two_days / "keys" / "signing.pub").read_text())
    out["pub_path"] = two_days / "keys" / "signing.pub"
    out["art"] = art
    return out


def _traffic_totals(art: Path, day: str) -> tuple[int, int, int]:
    """Independent oracle from the traffic file: (requests, teacher micro-USD, paid micro-USD)."""
    t = pq.read_table(art / "traffic" / f"day={day}" / "traffic.parquet").to_pylist()
    req = [r for r in t if r["kind"] == "request"]
    return (
        len(req),
        sum(round(r["teacher_cost_usd"] * 1e6) for r in req),
        sum(round(r["actual_cost_usd"] * 1e6) for r in req),
    )


def test_receipt_verifies_offline_with_chain_proof_and_rows(signed: dict, tmp_path: Path) -> None:
    art = signed["art"]
    day1 = (art / "receipts" / DAY1 / "receipt.dsse.json").read_bytes()
    day2 = (art / "receipts" / DAY2 / "receipt.dsse.json").read_bytes()
    rows = pq.read_table(art / "receipts" / DAY2 / "rows.parquet")
    proof = receipt_proof(DAY2, rows["request_id"][7].as_py(), art)
    leaves = export_rows_jsonl(art, DAY2, tmp_path / "rows.jsonl").read_bytes().splitlines()
    report = verify_receipt(day2, signed["pub"], prev_envelope=day1, proof=proof, leaves=leaves)
    assert report["checks"] == ["signature", "predicate", "totals", "chain", "proof", "rows"]
    n, teacher, paid = _traffic_totals(art, DAY2)
    assert (
        report["size"],
        report["totals"]["teacher_cost_micro_usd"],
        report["totals"]["actual_cost_micro_usd"],
    ) == (
        n,
        teacher,
        paid,
    )
    assert report["row"]["request_id"] == rows["request_id"][7].as_py()
    assert verify_receipt(day1, signed["pub"])["previous"] is None


def _fails(check: str, *args, **kwargs) -> str:
    with pytest.raises(ReceiptError) as info:
        verify_receipt(*args, **kwargs)
    assert info.value.check == check, str(info.value)
    return str(info.value)


def test_tampering_fails_naming_the_check(signed: dict, tmp_path: Path) -> None:
    art, pub = signed["art"], signed["pub"]
    day1 = (art / "receipts" / DAY1 / "receipt.dsse.json").read_bytes()
    day2 = (art / "receipts" / DAY2 / "receipt.dsse.json").read_bytes()
    # One changed byte in the signed payload.
    env = json.loads(day2)
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b'"saved_micro_usd":') + 18] ^= 1
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    _fails("signature", json.dumps(env), pub)
    # A dropped row.
    leaves = export_rows_jsonl(art, DAY2, tmp_path / "rows.jsonl").read_bytes().splitlines()
    assert "rows dropped" in _fails("rows", day2, pub, leaves=leaves[:5] + leaves[6:])
    # An altered row (same count).
    altered = [*leaves[:-1], leaves[-1].replace(b'"status_code":200', b'"status_code":201')]
    _fails("rows", day2, pub, leaves=altered)
    # A broken chain: day 2 against a receipt that is not its predecessor (day 2 itself, or day 1 re-signed).
    _fails("chain", day2, pub, prev_envelope=day2)
    # (The chain digest is over the canonical envelope: a pretty-printed copy of day 1 still links.)
    verify_receipt(day2, pub, prev_envelope=json.dumps(json.loads(day1), indent=2).encode())
    _fails("chain", day1, pub, prev_envelope=day1)  # day 1 names no predecessor
    # A proof with a swapped leaf.
    rows = pq.read_table(art / "receipts" / DAY2 / "rows.parquet")
    proof = receipt_proof(DAY2, rows["request_id"][3].as_py(), art)
    proof["leaf"] = rows["leaf"][4].as_py()
    _fails("proof", day2, pub, proof=proof)
    # The wrong key.
    from ratchet_stats.keys import generate_private_key

    _fails("keyid", day2, generate_private_key().public_key())


def test_cli_verify_receipt_exit_codes(signed: dict, tmp_path: Path, capsys) -> None:
    art = signed["art"]
    f1 = art / "receipts" / DAY1 / "receipt.dsse.json"
    f2 = art / "receipts" / DAY2 / "receipt.dsse.json"
    key = str(signed["pub_path"])
    assert stats_main(["verify", "receipt", str(f2), "--prev", str(f1), "--key", key]) == 0
    assert "OK receipt 2026-01-02" in capsys.readouterr().out
    assert stats_main(["verify", "receipt", str(f2), "--prev", str(f2), "--key", key, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["check"] == "chain"
    assert stats_main(["verify", "receipt", str(tmp_path / "nope.json"), "--key", key]) == 2
    assert "check the path" in capsys.readouterr().err
