"""The gateway's HTTP contract as clients and fuzzers read it: /openapi.json documents every route with its body
and bearer scheme, and every non-chat answer (errors included) has OpenAI's error shape and the x-ratchet-*
headers. Also the package layout the contract relies on: routers never import the app factory."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from ratchet_gateway.routers import CHAT_ROUTE, ROUTERS

from .conftest import ADMIN_KEY, API_KEY, running_gateway

CLIENT = {"Authorization": f"Bearer {API_KEY}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

# Every route the gateway promises (ARCHITECTURE.md, "Contracts and their homes"), with the bearer scheme it needs (None: open).
EXPECTED = {
    ("post", "/v1/chat/completions"): "clientKey",
    ("post", "/v1/responses"): "clientKey",
    ("post", "/v1/messages"): ("clientKey", "anthropicKey"),  # a bearer key, or x-api-key
    ("post", "/v1/embeddings"): "clientKey",
    ("get", "/v1/models"): "clientKey",
    ("get", "/healthz"): None,
    ("get", "/readyz"): None,
    ("get", "/metrics"): "adminKey",  # optional: without it, only the series that name no client
    ("post", "/ratchet/admin/student-disabled"): "adminKey",
    ("post", "/ratchet/admin/pin"): "adminKey",
    ("get", "/ratchet/receipts/{day}"): "clientKey",
    ("get", "/ratchet/receipts/{day}/audit"): "adminKey",
    ("get", "/ratchet/receipts/{day}/proof/{request_id}"): "clientKey",
    ("get", "/ratchet/public-key"): None,
    ("post", "/ratchet/proofs/{version}"): "clientKey",
    ("get", "/ratchet/proofs/{version}/{request_id}"): "clientKey",
    ("get", "/ratchet/boms/{version}"): "clientKey",
    ("get", "/ratchet/dashboard"): None,
    ("get", "/ratchet/dashboard/data"): "clientKey",
    ("post", "/ratchet/feedback"): "clientKey",
    ("post", "/ratchet/feedback:batch"): "clientKey",
    ("get", "/ratchet/feedback/{feedback_id}"): "clientKey",
    ("get", "/"): None,
    ("get", "/ratchet/serving"): "clientKey",
    ("get", "/ratchet/scout"): None,
    ("get", "/ratchet/scout/team"): None,
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    # No model call in this module: the teacher address is never dialled.
    with running_gateway(tmp_path_factory.mktemp("gw"), "http://127.0.0.1:9/v1") as g:
        yield g


def _assert_ratchet_headers(r: httpx.Response) -> None:
    assert r.headers["x-ratchet-request-id"].startswith("req_")
    assert r.headers["x-ratchet-served-by"] == "teacher" and "x-ratchet-version" in r.headers


def _assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"] and err["type"]
    if code is not None:
        assert err["code"] == code
    _assert_ratchet_headers(r)
    return err


def test_openapi_documents_every_route_with_its_body_and_bearer_scheme(gateway):
    r = httpx.get(gateway.url + "/openapi.json")
    assert r.status_code == 200
    _assert_ratchet_headers(r)
    doc = r.json()
    documented = {(m, p): op for p, ops in doc["paths"].items() for m, op in ops.items()}
    # every route the app serves is in the document (the admin catch-all and /openapi.json itself excepted) ...
    routes = [route for router in ROUTERS for route in router.routes]
    served = {
        (m.lower(), r.path)
        for r in routes
        if isinstance(r, APIRoute) and r.include_in_schema
        for m in r.methods
    }
    served.add(("post", CHAT_ROUTE["path"]))
    assert served == set(documented)
    # ... and it is exactly the contract
    assert set(EXPECTED) == set(documented)
    schemes = doc["components"]["securitySchemes"]
    assert schemes["clientKey"] == schemes["clientKey"] | {"type": "http", "scheme": "bearer"}
    assert schemes["adminKey"]["scheme"] == "bearer"
    assert schemes["anthropicKey"] == schemes["anthropicKey"] | {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
    }
    for key, scheme in EXPECTED.items():
        want = [{s: []} for s in ((scheme,) if isinstance(scheme, str) else scheme)] if scheme else None
        assert documented[key].get("security") == want, key
    # the bodies the handlers read themselves (not FastAPI) are documented with their schemas
    schemas = doc["components"]["schemas"]
    for key, model in (
        (("post", "/v1/chat/completions"), "ChatRequest"),
        (("post", "/ratchet/proofs/{version}"), "ProofRequest"),
        (("post", "/v1/responses"), "ResponsesRequest"),
        (("post", "/v1/messages"), "MessagesRequest"),
        (("post", "/v1/embeddings"), "EmbeddingsRequest"),
    ):
        body = documented[key]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
    assert schemas["ProofRequest"]["required"] == ["request_id"]
    assert set(schemas["ResponsesRequest"]["required"]) == {"model", "input"}
    assert set(schemas["MessagesRequest"]["required"]) == {"model", "max_tokens", "messages"}
    messages_401 = documented[("post", "/v1/messages")]["responses"]["401"]["content"]["application/json"]
    assert messages_401["schema"] == {"$ref": "#/components/schemas/AnthropicError"}
    chat = schemas["ChatRequest"]
    assert set(chat["required"]) == {"model", "messages"} and "stream" in chat["properties"]
    assert chat["properties"]["messages"]["items"] == {"$ref": "#/components/schemas/ChatMessage"}
    assert "role" in schemas["ChatMessage"]["properties"]
    assert set(schemas["PinBody"]["required"]) == {"reason", "task"}
    # the feedback bodies (read by the routes themselves, with the body limit) are documented inline
    item = documented[("post", "/ratchet/feedback")]["requestBody"]["content"]["application/json"]["schema"]
    assert {"feedback_id", "metric", "value"} <= set(item["required"]) and item[
        "additionalProperties"
    ] is False
    batch = documented[("post", "/ratchet/feedback:batch")]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    assert batch["properties"]["items"]["maxItems"] == 1000
    # errors are documented in OpenAI's shape, never as FastAPI's 422
    assert "422" not in r.text and "HTTPValidationError" not in schemas
    models_401 = documented[("get", "/v1/models")]["responses"]["401"]
    assert models_401["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }


def test_client_routes_need_a_client_key(gateway):
    for path in ("/v1/models", "/ratchet/receipts/2026-01-01", "/ratchet/boms/v1-abc"):
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": f"Basic {API_KEY}"}):
            err = _assert_error(httpx.get(gateway.url + path, headers=headers), 401, "invalid_api_key")
            assert err["type"] == "authentication_error" and "sk-wrong" not in err["message"]
    models = httpx.get(gateway.url + "/v1/models", headers=CLIENT)
    assert models.status_code == 200 and "ratchet" in {m["id"] for m in models.json()["data"]}
    _assert_ratchet_headers(models)
    lower = httpx.get(gateway.url + "/v1/models", headers={"Authorization": f"bearer  {API_KEY}"})
    assert lower.status_code == 200


def test_framework_and_route_errors_have_the_openai_shape(gateway):
    u = gateway.url
    assert "/v1" in _assert_error(httpx.get(u + "/nope"), 404)["message"]
    _assert_error(httpx.get(u + "/v1/chat/completions"), 405)
    _assert_error(httpx.get(u + "/ratchet/receipts/yesterday", headers=CLIENT), 400)
    _assert_error(httpx.get(u + "/ratchet/receipts/2026-01-01", headers=CLIENT), 404, "receipt_not_found")
    _assert_error(httpx.get(u + "/ratchet/boms/..", headers=CLIENT), 404)  # normalised away by the client
    _assert_error(httpx.get(u + "/ratchet/boms/v1%20x", headers=CLIENT), 400)
    _assert_error(httpx.get(u + "/ratchet/boms/v9-none", headers=CLIENT), 404, "bom_not_found")
    for path in ("/healthz", "/metrics"):
        r = httpx.get(u + path)
        assert r.status_code == 200
        _assert_ratchet_headers(r)


def test_admin_routes_check_the_key_first_then_the_body(gateway):
    url = gateway.url + "/ratchet/admin"
    body = {"task": "tickets", "reason": "audits disagree"}
    for headers in ({}, CLIENT, {"Authorization": "Bearer admin-key-for-test"}):
        _assert_error(httpx.post(f"{url}/pin", json=body, headers=headers), 403, "forbidden")
    # an invalid body from an unknown caller is still a 403: the key is checked before the body
    _assert_error(httpx.post(f"{url}/pin", json={"reason": "x"}, headers=CLIENT), 403, "forbidden")
    err = _assert_error(httpx.post(f"{url}/pin", json={"task": "tickets", "reason": "x"}, headers=ADMIN), 400)
    assert "reason" in err["message"] and "3-500 characters" in err["message"]
    err = _assert_error(httpx.post(f"{url}/pin", json={"reason": "no task given"}, headers=ADMIN), 400)
    assert "task" in err["message"]
    _assert_error(httpx.post(f"{url}/pin", content=b"{not json", headers=ADMIN), 400)
    widen = httpx.post(f"{url}/pin", json={**body, "pinned": False}, headers=ADMIN)
    _assert_error(widen, 403, "widening_forbidden")
    no_flag = httpx.post(f"{url}/student-disabled", json={"reason": "no flag given"}, headers=ADMIN)
    _assert_error(no_flag, 403, "widening_forbidden")
    _assert_error(httpx.delete(f"{url}/flags", headers=ADMIN), 403, "forbidden")
    assert not gateway.gw.safety.pins and not gateway.gw.safety.student_disabled  # nothing was applied


def test_routers_never_import_the_app_factory():
    """No import cycle inside ratchet_gateway: the app imports routers, routers import state/deps, not the app."""
    pkg = Path(__file__).resolve().parents[2] / "ratchet_gateway"
    for path in [*pkg.glob("*.py"), *pkg.glob("routers/*.py")]:
        if path.name == "app.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
                assert "ratchet_gateway.app" not in names, f"{path.name} imports the app factory"
                if path.parent.name == "routers" and path.name != "__init__.py":
                    assert not any(n.startswith("ratchet_gateway.routers.") for n in names), path.name
