"""The effect gate against a hostile client with a valid key, over real HTTP on loopback: costs are JSON numbers
within the maximum per effect, so no client can make a spend infinite and break its own usage and rules; spend rows
stored before that (infinite, huge, negative) still read; effect keys and types with control or bidi characters
are a 400 that names the field; the API docs page (which would load a CDN script where operators type the admin
key) is not served."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratchet_assets.effects import EffectError, EffectLedger
from ratchet_core.control_db import effect_spend, make_engine
from tests.serve import serve_in_thread

ADMIN_KEY = "sk-admin-gate"
CLIENTS = [("scout", "sk-scout"), ("other", "sk-other")]
MAIL = {"effect_type": "mail.send", "key": "mail:alice:welcome", "fingerprint": "sha256:aaa"}


@dataclass
class Gate:
    ledger: EffectLedger  # the control plane's own door to the same control DB
    scout: httpx.Client
    admin: httpx.Client
    url: str


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    from ratchet_assets.effects import create_app

    engine = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    with serve_in_thread(create_app(engine, CLIENTS, ADMIN_KEY)) as url:

        def client(key: str) -> httpx.Client:
            return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

        yield Gate(EffectLedger(engine), client("sk-scout"), client(ADMIN_KEY), url)


def _error(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    """The OpenAI error document of `response`, which must have `status`."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


@pytest.mark.parametrize("cost", ["5", True, False, "0.5", [1], {"usd": 1}])
def test_a_cost_that_is_not_a_json_number_is_refused_on_every_route(gate: Gate, cost: Any) -> None:
    assert _error(gate.scout.post("/effects/begin", json={**MAIL, "cost_usd": cost}))["param"] == "cost_usd"
    began = gate.scout.post("/effects/begin", json=MAIL).json()
    assert began["outcome"] == "execute"
    report = gate.scout.post(
        "/effects/report", json={"token": began["token"], "result": {}, "cost_usd": cost}
    )
    assert _error(report)["param"] == "cost_usd"
    fail = gate.scout.post("/effects/fail", json={"token": began["token"], "error": "no", "cost_usd": cost})
    assert _error(fail)["param"] == "cost_usd"
    rules = gate.admin.put("/rules/scout/*", json={"reason": "the client's own cap", "cap_usd": cost})
    assert _error(rules)["param"] == "cap_usd"
    assert gate.ledger.lookup("scout/mail.send", MAIL["key"]).status == "in_flight"  # nothing was settled


def test_a_cost_over_the_maximum_per_effect_is_refused_and_spend_never_becomes_infinite(gate: Gate) -> None:
    huge = {**MAIL, "cost_usd": 1e308}
    refused = _error(gate.scout.post("/effects/begin", json=huge))
    assert refused["param"] == "cost_usd" and "RATCHET_EFFECTS_MAX_COST_USD" in refused["message"]
    assert _error(gate.scout.post("/effects/begin", json={**huge, "key": "another"}))["param"] == "cost_usd"
    began = gate.scout.post("/effects/begin", json=MAIL).json()
    report = gate.scout.post(
        "/effects/report", json={"token": began["token"], "result": {}, "cost_usd": 1e308}
    )
    assert _error(report)["param"] == "cost_usd"
    # usage and the rules still answer, with finite numbers
    usage = gate.scout.get("/usage")
    assert usage.status_code == 200 and usage.json()["used_usd"] == 0.0
    rules = gate.scout.get("/rules/mail.send")
    assert rules.status_code == 200 and rules.json()["spend"]["used_usd"] == 0.0
    # the Python door refuses the same, so no caller can store it
    with pytest.raises(EffectError, match="maximum per effect"):
        gate.ledger.begin("training.launch", "k", "fp", cost_usd=1e308)
    with pytest.raises(EffectError, match="not a string or boolean"):
        gate.ledger.begin("training.launch", "k", "fp", cost_usd="5")  # type: ignore[arg-type]


def test_the_maximum_per_effect_is_a_setting(tmp_path: Path) -> None:
    from ratchet_assets.effects import create_app

    engine = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    with serve_in_thread(create_app(engine, CLIENTS, ADMIN_KEY, max_cost_usd=2.0)) as url:
        scout = httpx.Client(base_url=url, headers={"Authorization": "Bearer sk-scout"}, timeout=30)
        assert scout.post("/effects/begin", json={**MAIL, "cost_usd": 2.0}).json()["outcome"] == "execute"
        over = _error(scout.post("/effects/begin", json={**MAIL, "key": "k2", "cost_usd": 2.01}))
        assert "from 0 to 2" in over["message"]


def test_usage_and_rules_stay_readable_over_spend_rows_stored_before_the_maximum(gate: Gate) -> None:
    gate.ledger.set_rules("scout/*", reason="the client's own cap", cap_usd=100.0)
    with gate.ledger.engine.begin() as conn:  # rows an older gate accepted: infinite, huge, negative
        for i, usd in enumerate([math.inf, 1e308, 1e308, -5.0, 1.5]):
            conn.execute(
                effect_spend.insert().values(
                    effect_type="scout/mail.send",
                    key=f"old{i}",
                    token=f"t{i}",
                    usd=usd,
                    state="spent",
                    at="2026-01-01T00:00:00+00:00",
                )
            )
    usage = gate.scout.get("/usage")
    assert usage.status_code == 200, usage.text
    used = usage.json()["used_usd"]
    # each out-of-range row counts as the maximum per effect (10,000) or 0, never infinity
    assert math.isfinite(used) and used == pytest.approx(3 * 10_000 + 1.5)
    assert usage.json()["remaining_usd"] == 0.0
    rules = gate.scout.get("/rules/mail.send")
    assert rules.status_code == 200, rules.text
    assert rules.json()["client_spend"]["used_usd"] == pytest.approx(used)
    # the cap still decides, with a clear refusal rather than an internal error
    denied = gate.scout.post("/effects/begin", json={**MAIL, "cost_usd": 1.0})
    assert denied.status_code == 200 and denied.json()["outcome"] == "denied"
    assert math.isfinite(gate.ledger.spend("scout/*")["used_usd"])


def test_rules_stay_readable_over_caps_stored_before_they_were_checked(gate: Gate) -> None:
    from ratchet_core.control_db import effect_policies

    with gate.ledger.engine.begin() as conn:  # an infinite cap on a type, a negative one on the client's own
        for effect_type, cap in (("scout/mail.send", math.inf), ("scout/*", -1.0)):
            conn.execute(
                effect_policies.insert().values(
                    effect_type=effect_type,
                    approval_required=False,
                    cap_usd=cap,
                    actor="older-gate",
                    reason="stored before caps were checked",
                    updated_at="2026-01-01T00:00:00+00:00",
                )
            )
    rules = gate.scout.get("/rules/mail.send")
    assert rules.status_code == 200, rules.text
    assert rules.json()["cap_usd"] is None  # infinite: no cap, what it meant
    assert rules.json()["client_spend"]["cap_usd"] == 0.0  # negative: nothing spends until an operator says
    denied = gate.scout.post("/effects/begin", json={**MAIL, "cost_usd": 0.5}).json()
    assert denied["outcome"] == "denied" and denied["remaining_usd"] == 0.0
    assert gate.scout.get("/usage").json()["cap_usd"] == 0.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("key", "mail:alice\x00"),
        ("key", "mail:alice\nforged log line"),
        ("key", "invoice-\u202egnp.exe"),  # right-to-left override: shows as "invoice-exe.png"
        ("key", "mail:\u2066alice"),  # left-to-right isolate
        ("key", "mail alice"),
        ("fingerprint", "sha256:\u202eaaa"),
        ("fingerprint", "sha256:aaa\r\nX-Forged: 1"),
        ("effect_type", "mail.send\u202e"),
        ("effect_type", "mail.send\x1b[31m"),
    ],
)
def test_control_and_bidi_characters_in_keys_and_types_are_a_400_that_names_the_field(
    gate: Gate, field: str, value: str
) -> None:
    error = _error(gate.scout.post("/effects/begin", json={**MAIL, field: value}))
    assert error["param"] == field
    assert error["message"].isprintable()  # the value is echoed escaped, never raw
    assert gate.ledger.list_effects() == []
    # the admin names types in full, and is held to the same rule
    admin_type = "scout/" + (value if field == "effect_type" else "mail.send")
    admin = gate.admin.post("/effects/begin", json={**MAIL, "effect_type": admin_type, field: value})
    assert _error(admin)["param"] == field
    assert gate.ledger.list_effects() == []


def test_the_python_door_refuses_control_characters_in_keys_types_and_fingerprints(gate: Gate) -> None:
    with pytest.raises(EffectError, match="effect key"):
        gate.ledger.begin("webhook", "hook\u202e", "fp")
    with pytest.raises(EffectError, match="effect type"):
        gate.ledger.begin("web\x07hook", "hook", "fp")
    with pytest.raises(EffectError, match="fingerprint"):
        gate.ledger.begin("webhook", "hook", "fp\u2067")
    with pytest.raises(EffectError, match="effect type"):
        gate.ledger.set_rules("web\nhook", reason="a rule for a forged type", max_attempts=1)
    assert gate.ledger.list_effects() == []


@pytest.mark.parametrize(
    "text",
    ["\x1b[2J\x1b[32mapproved by security", "invoice\u202etxt.exe", "ok\rforged line", "a\x85b", "x\u2028y"],
)
def test_free_text_a_person_reads_holds_no_control_or_bidi_character(gate: Gate, text: str) -> None:
    """A summary the operator approves from, an error a client reports, the reason an operator writes: an ANSI
    escape, a bidi override, a carriage return, a C1 control or a line separator is a 400 naming the field (the
    character named by code point, never echoed), on every door; tab and newline stay allowed."""
    error = _error(gate.scout.post("/effects/begin", json={**MAIL, "summary": text}))
    assert error["param"] == "summary" and error["message"].isprintable()
    assert gate.ledger.list_effects() == []
    with pytest.raises(EffectError, match="summary"):
        gate.ledger.begin("webhook", "hook", "fp", summary=text)
    token = gate.scout.post("/effects/begin", json={**MAIL, "summary": "line one\n\tline two"}).json()[
        "token"
    ]
    assert _error(gate.scout.post("/effects/fail", json={"token": token, "error": text}))["param"] == "error"
    (effect,) = gate.ledger.list_effects()
    assert effect.status == "in_flight" and effect.error is None  # nothing of it stored
    resolve = {"effect_type": "scout/mail.send", "key": MAIL["key"], "resolution": "forget", "reason": text}
    assert _error(gate.admin.post("/effects/resolve", json=resolve))["param"] == "reason"
    with pytest.raises(EffectError, match="reason"):
        gate.ledger.resolve("scout/mail.send", MAIL["key"], "forget", text)
    assert (
        gate.scout.post("/effects/fail", json={"token": token, "error": "smtp said\n\t550"}).status_code
        == 200
    )


def test_lookups_with_control_characters_are_a_400_not_an_echo(gate: Gate) -> None:
    got = gate.scout.get("/effects/mail.send/k%E2%80%AEx")
    assert _error(got)["param"] == "key"
    approve = gate.admin.post(
        "/approvals/grant", json={"effect_type": "scout/mail.send", "key": "k\u202ex", "reason": "looks fine"}
    )
    assert _error(approve)["param"] == "key"


def test_the_api_docs_page_is_not_served_but_the_openapi_document_is(gate: Gate) -> None:
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert httpx.get(gate.url + page).status_code == 404
    assert httpx.get(gate.url + "/openapi.json").json()["info"]["title"] == "Ratchet effect gate"
    manifest = httpx.get(gate.url + "/.well-known/agent-manifest.json").json()
    assert "docs" not in manifest["rest"]
