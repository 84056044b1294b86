"""The effect gate: max_attempts, approvals and spend caps in the ledger, over HTTP (a real server on loopback,
OpenAPI documented, per-client keys) and through `ratchet admin approve` / `admin effects rules`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ratchet_assets.effects import EffectLedger
from ratchet_core.control_db import make_engine
from tests.serve import serve_in_thread

ADMIN_KEY = "sk-admin-gate"
CLIENTS = [("scout", "sk-scout"), ("other", "sk-other")]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'control.db').as_posix()}"


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t


def test_max_attempts_blocks_a_retry_policy_after_n_attempts(tmp_path) -> None:
    gate = EffectLedger(make_engine(_url(tmp_path)), policies={"adapter.load": "retry"})
    gate.set_rules("adapter.load", reason="loads are cheap but not free", max_attempts=2)
    first = gate.begin("adapter.load", "ep|v1", "fp")
    gate.fail(first.token, "endpoint refused")
    second = gate.begin("adapter.load", "ep|v1", "fp")
    assert second.outcome == "execute" and second.attempts == 2
    gate.fail(second.token, "endpoint refused again")
    third = gate.begin("adapter.load", "ep|v1", "fp")
    assert third.outcome == "blocked" and "max_attempts 2" in third.detail
    assert gate.lookup("adapter.load", "ep|v1").attempts == 2


def test_approval_required_waits_then_grant_executes_and_deny_refuses_with_the_reason(tmp_path) -> None:
    gate = EffectLedger(make_engine(_url(tmp_path)))
    gate.set_rules("release.publish", reason="promotion to live needs a person", approval_required=True)
    waiting = gate.begin("release.publish", "v1/tickets/live", "fp", summary="promote v1 to live")
    assert waiting.outcome == "awaiting_approval" and "ratchet admin approve" in waiting.detail
    assert gate.lookup("release.publish", "v1/tickets/live") is None  # nothing began
    assert [a.summary for a in gate.approvals()] == ["promote v1 to live"]
    assert gate.begin("release.publish", "v1/tickets/live", "fp").outcome == "awaiting_approval"
    gate.decide("release.publish", "v1/tickets/live", True, "canary looked fine all week")
    go = gate.begin("release.publish", "v1/tickets/live", "fp")
    assert go.outcome == "execute"
    gate.report(go.token, {"sequence": 7})
    assert gate.begin("release.publish", "v1/tickets/live", "fp").outcome == "duplicate"
    # A denial is final for that effect and says why; another payload under an approved key is refused.
    gate.begin("release.publish", "v2/tickets/live", "fp2")
    gate.decide("release.publish", "v2/tickets/live", False, "audits disagree on refunds")
    denied = gate.begin("release.publish", "v2/tickets/live", "fp2")
    assert denied.outcome == "denied" and "audits disagree on refunds" in denied.detail
    assert gate.begin("release.publish", "v2/tickets/live", "other-fp").outcome == "denied"


def test_spend_cap_denies_with_the_remaining_budget_and_resets_with_its_window(tmp_path) -> None:
    clock = Clock()
    gate = EffectLedger(make_engine(_url(tmp_path)), clock=clock)
    gate.set_rules("teacher.call", reason="live run budget", cap_usd=1.0, cap_window_seconds=3600)
    assert gate.begin("teacher.call", "nocost", "fp").outcome == "denied"  # a capped type needs an estimate
    a = gate.begin("teacher.call", "a", "fp", cost_usd=0.6)
    assert a.outcome == "execute" and a.remaining_usd == pytest.approx(0.4)
    b = gate.begin("teacher.call", "b", "fp", cost_usd=0.5)
    assert b.outcome == "denied" and b.remaining_usd == pytest.approx(0.4) and "$0.400000 remains" in b.detail
    gate.report(a.token, {"ok": True}, cost_usd=0.3)  # the actual cost replaces the estimate
    assert gate.spend("teacher.call")["used_usd"] == pytest.approx(0.3)
    c = gate.begin("teacher.call", "b", "fp", cost_usd=0.5)
    assert c.outcome == "execute"
    gate.fail(c.token, "timeout")  # unknown spend: the reservation stays
    assert gate.spend("teacher.call")["remaining_usd"] == pytest.approx(0.2)
    clock.t += timedelta(seconds=3601)
    assert gate.spend("teacher.call")["remaining_usd"] == pytest.approx(1.0)
    assert gate.begin("teacher.call", "d", "fp", cost_usd=0.9).outcome == "execute"


def test_http_api_per_client_namespaces_admin_decisions_and_openapi(tmp_path) -> None:
    from ratchet_assets.effects import create_app

    app = create_app(make_engine(_url(tmp_path)), CLIENTS, ADMIN_KEY)
    with serve_in_thread(app) as url:
        scout = httpx.Client(base_url=url, headers={"Authorization": "Bearer sk-scout"})
        other = httpx.Client(base_url=url, headers={"Authorization": "Bearer sk-other"})
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_KEY}"})

        assert httpx.get(f"{url}/effects").status_code == 401
        bad = httpx.get(f"{url}/effects", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"
        assert scout.put("/rules/scout/report.file", json={"reason": "x" * 10}).status_code == 403

        # The admin sets the rules of scout's own type `report.file` under its full name.
        rules = {"reason": "filing needs a person", "approval_required": True, "max_attempts": 3}
        assert admin.put("/rules/scout/report.file", json=rules).json()["approval_required"] is True
        body = {"effect_type": "report.file", "key": "q1", "fingerprint": "f1", "summary": "file report q1"}
        began = scout.post("/effects/begin", json=body).json()
        assert began["outcome"] == "awaiting_approval"
        assert (began["effect_type"], began["key"]) == ("scout/report.file", "q1")
        pending = admin.get("/approvals").json()
        assert [(p["effect_type"], p["key"], p["requested_by"]) for p in pending] == [
            ("scout/report.file", "q1", "scout")
        ]
        too_short = admin.post(
            "/approvals/grant", json={"effect_type": "scout/report.file", "key": "q1", "reason": "x"}
        )
        assert too_short.status_code == 400 and "3-500" in too_short.json()["error"]["message"]
        ok = admin.post(
            "/approvals/grant",
            json={"effect_type": "scout/report.file", "key": "q1", "reason": "looks right"},
        )
        assert ok.json()["state"] == "granted"
        go = scout.post("/effects/begin", json=body).json()
        assert go["outcome"] == "execute"
        # The same type and key from another client is another client's effect (its own type, no rules on it),
        # and invisible to scout.
        theirs = other.post("/effects/begin", json=body).json()
        assert (theirs["outcome"], theirs["effect_type"]) == ("execute", "other/report.file")
        assert (
            scout.post("/effects/report", json={"token": go["token"], "result": {"filed": "r1"}}).status_code
            == 200
        )
        stale = scout.post("/effects/report", json={"token": go["token"], "result": {}})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_token"
        again = scout.post("/effects/begin", json=body).json()
        assert again["outcome"] == "duplicate" and again["result"] == {"filed": "r1"}
        assert [(e["effect_type"], e["key"]) for e in scout.get("/effects").json()] == [
            ("scout/report.file", "q1")
        ]
        assert [e["effect_type"] for e in other.get("/effects").json()] == ["other/report.file"]
        assert scout.get("/effects/report.file/q1").json()["status"] == "done"
        assert other.get("/effects/report.file/q1").json()["status"] == "in_flight"
        assert scout.get("/effects/report.file/q2").status_code == 404
        assert len(admin.get("/effects").json()) == 2

        spec = httpx.get(f"{url}/openapi.json").json()
        paths = set(spec["paths"])
        assert {
            "/effects/begin",
            "/effects/report",
            "/effects/fail",
            "/effects/resolve",
            "/effects",
            "/approvals",
            "/approvals/grant",
            "/approvals/deny",
            "/rules/{effect_type}",
        } <= paths
        assert "clientKey" in spec["components"]["securitySchemes"]
        assert spec["components"]["schemas"]["BeginBody"]["additionalProperties"] is False


def test_admin_approve_and_rules_commands(tmp_path) -> None:
    from ratchet_assets.admin.cli import admin

    url = _url(tmp_path)
    runner = CliRunner()
    set_rules = runner.invoke(
        admin,
        [
            "effects",
            "rules",
            "training.launch",
            "--approval-required",
            "--cap-usd",
            "5",
            "--reason",
            "training costs money",
            "--json",
            "--control-db",
            url,
        ],
    )
    assert set_rules.exit_code == 0, set_rules.output
    gate = EffectLedger(make_engine(url))
    assert gate.begin("training.launch", "train:abc", "fp", cost_usd=1.0).outcome == "awaiting_approval"
    listed = runner.invoke(admin, ["approve", "--list", "--control-db", url])
    assert "train:abc" in listed.output
    missing_reason = runner.invoke(admin, ["approve", "training.launch", "train:abc", "--control-db", url])
    assert missing_reason.exit_code == 2 and "--reason" in missing_reason.output
    done = runner.invoke(
        admin, ["approve", "training.launch", "train:abc", "--reason", "budget ok", "--control-db", url]
    )
    assert done.exit_code == 0 and "granted" in done.output
    assert gate.begin("training.launch", "train:abc", "fp", cost_usd=1.0).outcome == "execute"
    nothing = runner.invoke(
        admin, ["approve", "training.launch", "nope", "--reason", "why not", "--control-db", url]
    )
    assert nothing.exit_code == 2 and "no approval requested" in nothing.output


def test_ratchet_effects_serve_reads_the_settings_and_serves_the_gate(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from tests.serve import free_port, wait_healthy

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(
        RATCHET_HOME=str(tmp_path / "home"), RATCHET_API_KEYS="scout:sk-scout", RATCHET_ADMIN_KEY=ADMIN_KEY
    )
    cmd = [sys.executable, "-m", "ratchet_cli.main", "effects", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, f"{url}/healthz", "ratchet effects serve")
        began = httpx.post(
            f"{url}/effects/begin",
            headers={"Authorization": "Bearer sk-scout"},
            json={"effect_type": "report.file", "key": "k", "fingerprint": "f"},
        )
        assert began.json()["outcome"] == "execute"
        # the gate's control DB is the settings' one: the CLI sees the same effect
        assert EffectLedger(make_engine(f"sqlite:///{tmp_path / 'home' / 'control.db'}")).lookup(
            "scout/report.file", "k"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=15)
