"""Tenant privacy over HTTP: GET /ratchet/receipts/{day} gives a client its own proven line and rows, nothing about
other clients, and the view verifies offline; the auditor's route needs the admin key and holds every line."""

from __future__ import annotations

import json

import httpx
import pytest

from .conftest import ADMIN_KEY, API_KEY, OTHER_KEY, running_gateway

DAY = "2026-01-02"


def test_a_client_gets_only_its_own_line_proven_and_the_auditor_gets_the_whole(tmp_path) -> None:
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.receipts import build_receipt
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_core.control_db import make_engine
    from ratchet_stats.receipt import ReceiptError, verify_client_view, verify_receipt

    with running_gateway(tmp_path, "http://127.0.0.1:9/v1") as g:  # no model is called
        home, art = tmp_path / "home", tmp_path / "home" / "artifacts"
        write_day(home / "lake", DAY, 80, seed=4, clients=("app1", "app2"), student_share=0.5)
        consolidate_traffic(home / "lake", art, DAY)
        ledger = EffectLedger(make_engine(f"sqlite:///{(tmp_path / 'night.db').as_posix()}"))
        build_receipt(art, DAY, g.private_key, ledger, teacher_model="openai/demo-teacher")
        pub = g.private_key.public_key()

        def get(path: str, key: str | None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return httpx.get(f"{g.url}{path}", headers=headers, timeout=30)

        brief = get(f"/ratchet/receipts/{DAY}", API_KEY).json()  # the stored line alone: no rows scanned
        assert "rows" not in brief and verify_client_view(brief, pub)["checks"][-1] == "estimates"
        mine = get(f"/ratchet/receipts/{DAY}?rows=true", API_KEY)
        assert mine.status_code == 200
        assert "app2" not in mine.text  # no other client's name, totals or rows
        view = mine.json()
        report = verify_client_view(view, pub)
        assert report["client"] == "app1" and report["rows"] == report["totals"]["requests"] > 0
        assert {json.loads(r["leaf"])["client"] for r in view["rows"]} == {"app1"}
        theirs = get(f"/ratchet/receipts/{DAY}", OTHER_KEY).json()
        assert verify_client_view(theirs, pub)["client"] == "app2"
        # A client cannot pass the other's line off as its own.
        with pytest.raises(ReceiptError) as info:
            verify_client_view({**view, "client": "app2"}, pub)
        assert info.value.check == "client-line"
        # The auditor's view: admin key only, every line, and it verifies the whole.
        assert get(f"/ratchet/receipts/{DAY}/audit", API_KEY).status_code == 403
        whole = get(f"/ratchet/receipts/{DAY}/audit", ADMIN_KEY).json()
        full = verify_receipt(
            whole["envelope"],
            pub,
            clients=[c.encode() for c in whole["clients"]],
            estimates=[e.encode() for e in whole["estimates"]],
        )
        assert full["clients"] == ["app1", "app2"]
        other = verify_client_view(theirs, pub)["totals"]["requests"]
        assert full["totals"]["requests"] == report["totals"]["requests"] + other
