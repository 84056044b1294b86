"""The demo's last lines: each day's verified receipt beside its cost report, priced as the demo's deployment (a
vLLM student on one GPU), so both say the student saves money; a receipt that does not verify is said so."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ratchet_cli.demo.costs import DEMO_PRICES, demo_price_env, side_by_side

DAY = "2026-02-03"


def _night(home: Path) -> None:
    from ratchet_assets.effects import EffectLedger
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.receipts import build_receipt
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_core.control_db import make_engine
    from ratchet_core.layout import ArtifactLayout
    from ratchet_stats.keys import load_private_key

    write_day(home / "lake", DAY, 200, seed=3, student_share=0.5, audit_share=0.3)
    art = home / "artifacts"
    consolidate_traffic(home / "lake", art, DAY)
    key = load_private_key((home / "keys" / "signing.key").read_bytes())
    engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
    build_receipt(art, DAY, key, EffectLedger(engine), teacher_model="openai/demo-teacher")
    engine.dispose()
    pointer = ArtifactLayout(art).adapter_pointer(DAY)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(json.dumps({"version": "v1-x", "train_day": DAY, "seconds": 120.0}))


def test_the_last_lines_put_the_verified_receipt_beside_the_cost_report(keyed_home, monkeypatch) -> None:
    from ratchet_assets.defs.cost_report import cost
    from ratchet_cli.main import cli

    home = keyed_home
    _night(home)
    monkeypatch.setenv("RATCHET_HOME", str(home))
    monkeypatch.delenv("RATCHET_STUDENT_GPU_PRICE_PER_HOUR", raising=False)
    monkeypatch.setenv("RATCHET_TRAINING_PRICE_PER_HOUR", "0.25")  # the operator's own setting wins
    for name, value in demo_price_env({"RATCHET_TRAINING_PRICE_PER_HOUR": "0.25"}).items():
        monkeypatch.setenv(name, value)

    lines = side_by_side(home, [DAY])
    [row] = [line for line in lines if line.startswith(DAY)]
    receipt_part, report_part = row.split(" | ")[1:]

    # the receipt's side: what `ratchet verify receipt` reports for that day
    pub = home / "keys" / "signing.pub"
    envelope = home / "artifacts" / "receipts" / DAY / "receipt.dsse.json"
    verified = CliRunner().invoke(cli, ["verify", "receipt", str(envelope), "--key", str(pub), "--json"])
    assert verified.exit_code == 0, verified.output
    t = json.loads(verified.output)["totals"]
    requests, share, teacher_eq, paid, saved = receipt_part.split()
    assert int(requests) == t["requests"] == 200
    assert share == f"{t['served_by']['student'] / t['requests']:.1%}"
    assert float(saved) == round(t["saved_micro_usd"] / 1e6, 4)
    assert (float(teacher_eq), float(paid)) == (
        round(t["teacher_cost_micro_usd"] / 1e6, 4),
        round(t["actual_cost_micro_usd"] / 1e6, 4),
    )

    # the cost report's side: what `ratchet cost report` says with the same settings, training charged too
    report = CliRunner().invoke(cost, ["report", "--day", DAY, "--json"])
    assert report.exit_code == 0, report.output
    data = json.loads(report.output)
    totals = data["days"][0]["totals"]
    student, training, report_saved, break_even = report_part.split()
    assert float(student) == round(totals["student_cost_usd"], 4)
    assert float(training) == round(120 / 3600 * 0.25, 4) == round(totals["training_cost_usd"], 4)
    assert float(report_saved) == round(totals["saved_usd"], 4) > 0  # the student saves here too
    assert break_even.endswith("/day")  # it pays for its training at some volume
    assert data["config"]["tokens_per_second"] == float(DEMO_PRICES["RATCHET_STUDENT_TOKENS_PER_SECOND"])
    assert f"  {data['student_pricing']}" in lines
    assert "configured vLLM throughput" in data["student_pricing"]


def test_a_receipt_that_does_not_verify_is_named_in_the_last_lines(keyed_home, monkeypatch) -> None:
    home = keyed_home
    _night(home)
    monkeypatch.setenv("RATCHET_HOME", str(home))
    clients = home / "artifacts" / "receipts" / DAY / "clients.jsonl"
    clients.write_bytes(clients.read_bytes().replace(b'"requests":', b'"requests":1', 1))
    lines = side_by_side(home, [DAY])
    assert any(line.startswith(f"  receipt of {DAY} does not verify: ") for line in lines), lines
    assert not any(line.startswith(DAY) and "does not verify" not in line for line in lines)
