"""The effect gate as a multi-tenant service, over real HTTP on loopback: a hostile client (a valid key) cannot
touch the control plane's effect types or another client's, spend against anyone's cap but its own, settle an
effect it did not begin, read others' spend, or get past the body limit, finite costs and OpenAI-shaped errors."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ratchet_assets.effects import EffectLedger
from ratchet_core.control_db import make_engine
from tests.serve import serve_in_thread

ADMIN_KEY = "sk-admin-gate"
CLIENTS = [("scout", "sk-scout"), ("other", "sk-other")]


@dataclass
class Gate:
    ledger: EffectLedger  # the control plane's own door to the same control DB
    scout: httpx.Client
    other: httpx.Client
    admin: httpx.Client


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    from ratchet_assets.effects import create_app

    engine = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    with serve_in_thread(create_app(engine, CLIENTS, ADMIN_KEY)) as url:

        def client(key: str) -> httpx.Client:
            return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

        yield Gate(EffectLedger(engine), client("sk-scout"), client("sk-other"), client(ADMIN_KEY))


def _error(response: httpx.Response, status: int) -> dict:
    """The OpenAI error document of `response`, which must have `status`."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


def test_a_client_cannot_begin_read_settle_or_exhaust_the_control_planes_types(gate: Gate) -> None:
    gate.ledger.set_rules(
        "training.launch", reason="training costs money", cap_usd=5.0, cap_window_seconds=86400
    )
    # A client's `training.launch` is its own type: booking $5 there leaves the control plane's cap whole.
    mine = gate.scout.post(
        "/effects/begin",
        json={"effect_type": "training.launch", "key": "k", "fingerprint": "f", "cost_usd": 5.0},
    ).json()
    assert (mine["outcome"], mine["effect_type"]) == ("execute", "scout/training.launch")
    launch = gate.ledger.begin("training.launch", "train:2026-01-01", "fp", cost_usd=4.0)
    assert launch.outcome == "execute"
    assert gate.ledger.spend("training.launch")["used_usd"] == pytest.approx(4.0)

    # Another namespace is refused by name, and the control plane's token settles nothing for a client.
    foreign = gate.scout.post(
        "/effects/begin", json={"effect_type": "other/x", "key": "k", "fingerprint": "f"}
    )
    assert _error(foreign, 403)["code"] == "forbidden_effect_type"
    stolen = gate.scout.post("/effects/report", json={"token": launch.token, "result": {"hacked": True}})
    assert _error(stolen, 409)["code"] == "stale_token"
    assert gate.scout.post("/effects/fail", json={"token": launch.token, "error": "no"}).status_code == 409
    assert gate.ledger.lookup("training.launch", "train:2026-01-01").status == "in_flight"

    # What the client reads under that name is its own type and its own spend only.
    rules = gate.scout.get("/rules/training.launch").json()
    assert rules["effect_type"] == "scout/training.launch" and rules["cap_usd"] is None
    assert rules["spend"]["used_usd"] == pytest.approx(5.0)
    assert gate.scout.get("/effects/training.launch/train:2026-01-01").status_code == 404
    assert gate.scout.get("/effects", params={"effect_type": "training.launch"}).json()[0]["key"] == "k"
    assert _error(gate.scout.get("/rules/other/x"), 403)["param"] == "effect_type"
    gate.ledger.report(launch.token, {"run": 1}, cost_usd=4.0)


def test_report_and_fail_only_by_the_client_that_began_the_effect(gate: Gate) -> None:
    began = gate.scout.post(
        "/effects/begin", json={"effect_type": "file", "key": "q", "fingerprint": "f"}
    ).json()
    assert began["outcome"] == "execute"
    for path, body in (("/effects/report", {"result": {"x": 1}}), ("/effects/fail", {"error": "stolen"})):
        theirs = gate.other.post(path, json={"token": began["token"], **body})
        assert _error(theirs, 409)["code"] == "stale_token"
    assert gate.ledger.lookup("scout/file", "q").status == "in_flight"
    assert (
        gate.scout.post("/effects/report", json={"token": began["token"], "result": {"x": 2}}).status_code
        == 200
    )
    assert gate.ledger.lookup("scout/file", "q").result == {"x": 2}


def test_each_client_spends_against_its_own_cap_and_sees_only_its_own_spend(gate: Gate) -> None:
    cap = {"reason": "scout's monthly budget", "cap_usd": 1.0, "cap_window_seconds": 86400}
    put = gate.admin.put("/rules/scout/*", json=cap)
    assert put.status_code == 200 and put.json()["cap_usd"] == 1.0
    refused = gate.admin.put("/rules/scout/*", json={**cap, "approval_required": True})
    assert _error(refused, 400)["code"] == "effect_error"

    def begin(client: httpx.Client, effect_type: str, key: str, cost: float) -> dict:
        body = {"effect_type": effect_type, "key": key, "fingerprint": "f", "cost_usd": cost}
        return client.post("/effects/begin", json=body).json()

    assert begin(gate.scout, "search", "a", 0.6)["outcome"] == "execute"
    over = begin(gate.scout, "write", "b", 0.5)  # another type of the same client: the client's cap holds
    assert over["outcome"] == "denied" and "scout/*" in over["detail"]
    assert over["remaining_usd"] == pytest.approx(0.4)
    assert begin(gate.other, "search", "a", 0.9)["outcome"] == "execute"  # other's spend is not scout's
    assert gate.ledger.spend("search")["used_usd"] == 0.0  # nor the control plane's

    scout_view = gate.scout.get("/rules/search").json()
    assert scout_view["spend"]["used_usd"] == pytest.approx(0.6)
    assert scout_view["client_spend"] == {
        "effect_type": "scout/*",
        "cap_usd": 1.0,
        "window_seconds": 86400,
        "used_usd": pytest.approx(0.6),
        "remaining_usd": pytest.approx(0.4),
    }
    assert gate.scout.get("/rules/*").json()["spend"]["used_usd"] == pytest.approx(0.6)
    other_view = gate.other.get("/rules/search").json()
    assert other_view["spend"]["used_usd"] == pytest.approx(0.9)
    assert other_view["client_spend"]["cap_usd"] is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"effect_type": "t", "key": "k", "fingerprint": "f", "cost_usd": NaN}',
        b'{"effect_type": "t", "key": "k", "fingerprint": "f", "cost_usd": Infinity}',
        b'{"effect_type": "t", "key": "k", "fingerprint": "f", "cost_usd": 1e999}',
        b'{"effect_type": "t", "key": "k", "fingerprint": "f", "cost_usd": -0.01}',
        b'{"effect_type": "t", "key": "k", "fingerprint": "f", "summary": [1e999]}',
        b'{"effect_type": "t", "key": "k", "fingerprint": "f"',
    ],
)
def test_costs_are_finite_and_non_negative_and_bodies_strict_json(gate: Gate, raw: bytes) -> None:
    response = gate.scout.post("/effects/begin", content=raw, headers={"content-type": "application/json"})
    error = _error(response, 400)
    assert error["type"] == "invalid_request_error"
    assert gate.ledger.list_effects() == []


def test_a_result_that_is_not_finite_is_refused_and_the_effect_stays_in_flight(gate: Gate) -> None:
    began = gate.scout.post(
        "/effects/begin", json={"effect_type": "t", "key": "k", "fingerprint": "f"}
    ).json()
    raw = b'{"token": "%s", "result": {"score": 1e999}}' % began["token"].encode()
    assert _error(gate.scout.post("/effects/report", content=raw), 400)["code"] == "invalid_json"
    negative = gate.scout.post("/effects/report", json={"token": began["token"], "cost_usd": -1})
    assert _error(negative, 400)["param"] == "cost_usd"
    assert gate.ledger.lookup("scout/t", "k").status == "in_flight"


def test_a_body_over_64_kib_is_413_declared_or_streamed_and_stores_nothing(gate: Gate) -> None:
    began = gate.scout.post(
        "/effects/begin", json={"effect_type": "t", "key": "k", "fingerprint": "f"}
    ).json()
    big = {"token": began["token"], "result": {"blob": "x" * (70 * 1024)}}
    assert _error(gate.scout.post("/effects/report", json=big), 413)["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no content-length: the gate counts what arrives
        yield b'{"token": "%s", "result": {"blob": "' % began["token"].encode()
        for _ in range(80):
            yield b"x" * 1024
        yield b'"}}'

    streamed = gate.scout.post("/effects/report", content=chunks())
    assert _error(streamed, 413)["code"] == "body_too_large"
    assert gate.ledger.lookup("scout/t", "k").status == "in_flight"


def test_validation_and_routing_errors_have_openai_shape(gate: Gate) -> None:
    missing = _error(gate.scout.post("/effects/begin", json={"effect_type": "t", "key": "k"}), 400)
    assert missing["param"] == "fingerprint" and missing["code"] == "invalid_request"
    extra = _error(
        gate.scout.post("/effects/begin", json={"effect_type": "t", "key": "k", "fingerprint": "f", "x": 1}),
        400,
    )
    assert extra["param"] == "x"
    bad_name = _error(
        gate.scout.post("/effects/begin", json={"effect_type": "../t", "key": "k", "fingerprint": "f"}), 403
    )
    assert bad_name["code"] == "forbidden_effect_type"
    assert (
        _error(
            gate.scout.post("/effects/begin", json={"effect_type": "t t", "key": "k", "fingerprint": "f"}),
            400,
        )["code"]
        == "invalid_effect_type"
    )
    assert _error(gate.scout.get("/effects", params={"limit": 0}), 400)["param"] == "limit"
    typo = gate.scout.get("/effects", params={"stauts": "done"})  # an unknown parameter is not ignored
    assert _error(typo, 400)["param"] == "stauts"
    assert _error(gate.scout.get("/effects/t/" + "k" * 600), 400)["param"] == "key"  # path parameters too
    assert _error(gate.scout.get("/nowhere"), 404)["code"] == "not_found"
    assert _error(gate.scout.delete("/effects/begin"), 405)["type"] == "invalid_request_error"
    assert _error(httpx.get(f"{gate.scout.base_url}/effects"), 401)["type"] == "authentication_error"
    spec = httpx.get(f"{gate.scout.base_url}/openapi.json").json()  # documented as it answers: 400, not 422
    responses = spec["paths"]["/effects/begin"]["post"]["responses"]
    assert "422" not in responses and responses["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }
