"""The effect gate over MCP, driven by the official MCP Python SDK as the client: streamable HTTP (``POST /mcp`` on a
real server on loopback) and stdio (a spawned ``ratchet effects mcp``). The tools are the REST routes' operations
with the same tenancy, decisions and OpenAI-shaped errors; the manifest and llms.txt describe the same tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from ratchet_assets.effects import TOOLS, EffectLedger
from ratchet_core.control_db import make_engine
from tests.serve import serve_in_thread

ADMIN_KEY = "sk-admin-gate"
CLIENTS = [("scout", "sk-scout"), ("other", "sk-other")]
TOOL_NAMES = {
    "begin_effect",
    "report_effect",
    "fail_effect",
    "get_effect",
    "list_effects",
    "get_policy",
    "get_usage",
    "resolve_effect",
}
MAIL = {"effect_type": "mail.send", "key": "mail:alice:welcome", "fingerprint": "sha256:aaa"}


@dataclass
class Gate:
    url: str
    ledger: EffectLedger  # the control plane's own door to the same control DB

    def rest(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    from ratchet_assets.effects import create_app

    engine = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    with serve_in_thread(create_app(engine, CLIENTS, ADMIN_KEY)) as url:
        yield Gate(url, EffectLedger(engine))


@asynccontextmanager
async def mcp_over_http(url: str, key: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    """An MCP SDK client of ``url/mcp`` sending `key` as its bearer key (`mode`: the SDK's protocol choice)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with anyio.fail_after(60):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,
        ):
            yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's structured answer; the call must succeed."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert (
        json.loads(result.content[0].text) == result.structured_content
    )  # text for clients without structure
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI error document of a tool call that must fail as a tool error."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    body = json.loads(result.content[0].text)
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 per-request protocol and the 2025 handshake
def test_begin_report_and_a_retried_begin_is_a_duplicate_with_the_stored_result(
    gate: Gate, mode: str
) -> None:
    async def scenario() -> None:
        async with mcp_over_http(gate.url, "sk-scout", mode) as scout:
            began = await call(scout, "begin_effect", {**MAIL, "summary": "welcome mail to alice"})
            assert (began["outcome"], began["effect_type"], began["attempts"]) == (
                "execute",
                "scout/mail.send",
                1,
            )
            while_held = await call(scout, "begin_effect", MAIL)  # the agent retried before reporting
            assert (while_held["outcome"], while_held["token"]) == ("in_flight", None)
            done = await call(
                scout, "report_effect", {"token": began["token"], "result": {"message_id": "m-1"}}
            )
            assert done == {"status": "done"}

            retried = await call(scout, "begin_effect", MAIL)
            assert (retried["outcome"], retried["result"], retried["token"]) == (
                "duplicate",
                {"message_id": "m-1"},
                None,
            )
            other_payload = await call(scout, "begin_effect", {**MAIL, "fingerprint": "sha256:bbb"})
            assert other_payload["outcome"] == "denied" and "sha256:aaa" in other_payload["detail"]

            record = await call(scout, "get_effect", {"effect_type": "mail.send", "key": MAIL["key"]})
            assert (record["status"], record["result"]) == ("done", {"message_id": "m-1"})
            listed = await call(scout, "list_effects", {"status": "done"})
            assert [e["key"] for e in listed["effects"]] == [MAIL["key"]]

    anyio.run(scenario)
    # one state machine behind every door: the ledger and the REST route see what MCP did
    assert gate.ledger.lookup("scout/mail.send", MAIL["key"]).result == {"message_id": "m-1"}
    rest = gate.rest("sk-scout").post("/effects/begin", json=MAIL).json()
    assert (rest["outcome"], rest["result"]) == ("duplicate", {"message_id": "m-1"})


def test_another_client_can_neither_see_nor_settle_it_and_only_the_admin_resolves(gate: Gate) -> None:
    async def scenario() -> None:
        async with (
            mcp_over_http(gate.url, "sk-scout") as scout,
            mcp_over_http(gate.url, "sk-other") as other,
            mcp_over_http(gate.url, ADMIN_KEY) as admin,
        ):
            began = await call(scout, "begin_effect", MAIL)
            stolen = await refused(
                other, "report_effect", {"token": began["token"], "result": {"hacked": True}}
            )
            assert (stolen["error"]["code"], stolen["error"]["param"]) == ("stale_token", "token")
            assert (await refused(other, "fail_effect", {"token": began["token"], "error": "no"}))["error"][
                "code"
            ] == "stale_token"
            unseen = await refused(other, "get_effect", {"effect_type": "mail.send", "key": MAIL["key"]})
            assert unseen["error"]["type"] == "not_found_error"
            foreign = await refused(
                other, "get_effect", {"effect_type": "scout/mail.send", "key": MAIL["key"]}
            )
            assert foreign["error"]["code"] == "forbidden_effect_type"
            assert (await call(other, "list_effects", {}))["effects"] == []
            # the same name is the other client's own type: its own execute, not scout's effect
            theirs = await call(other, "begin_effect", MAIL)
            assert (theirs["outcome"], theirs["effect_type"]) == ("execute", "other/mail.send")

            resolve = {
                "effect_type": "scout/mail.send",
                "key": MAIL["key"],
                "resolution": "failed",
                "reason": "the mail server lost it",
            }
            assert (await refused(scout, "resolve_effect", resolve))["error"]["type"] == "permission_error"
            resolved = await call(admin, "resolve_effect", resolve)
            assert (resolved["status"], resolved["error"]) == ("failed", "the mail server lost it")

    anyio.run(scenario)
    assert gate.ledger.lookup("scout/mail.send", MAIL["key"]).status == "failed"
    assert gate.ledger.lookup("other/mail.send", MAIL["key"]).status == "in_flight"


def test_a_spend_cap_denies_and_usage_shows_the_callers_own_spend(gate: Gate) -> None:
    cap = {"reason": "scout's daily budget", "cap_usd": 1.0, "cap_window_seconds": 86400}
    assert gate.rest(ADMIN_KEY).put("/rules/scout/*", json=cap).status_code == 200

    async def scenario() -> None:
        async with mcp_over_http(gate.url, "sk-scout") as scout, mcp_over_http(gate.url, "sk-other") as other:
            first = await call(scout, "begin_effect", {**MAIL, "cost_usd": 0.6})
            assert first["outcome"] == "execute" and first["remaining_usd"] == pytest.approx(0.4)
            over = await call(
                scout,
                "begin_effect",
                {"effect_type": "search", "key": "q", "fingerprint": "f", "cost_usd": 0.5},
            )
            assert over["outcome"] == "denied" and over["token"] is None and "scout/*" in over["detail"]
            assert over["remaining_usd"] == pytest.approx(0.4)
            unpriced = await call(
                scout, "begin_effect", {"effect_type": "search", "key": "r", "fingerprint": "f"}
            )
            assert unpriced["outcome"] == "denied" and "cost_usd" in unpriced["detail"]

            usage = await call(scout, "get_usage", {})
            assert usage == {
                "effect_type": "scout/*",
                "cap_usd": 1.0,
                "window_seconds": 86400,
                "used_usd": pytest.approx(0.6),
                "remaining_usd": pytest.approx(0.4),
            }
            policy = await call(scout, "get_policy", {"effect_type": "mail.send"})
            assert policy["effect_type"] == "scout/mail.send" and policy["client_spend"] == usage
            assert (await call(other, "get_usage", {}))["used_usd"] == 0.0  # scout's spend is not other's
            peek = await refused(other, "get_usage", {"client": "scout"})
            assert (peek["error"]["type"], peek["error"]["param"]) == ("permission_error", "client")

    anyio.run(scenario)
    # REST's /usage is the same operation
    assert gate.rest("sk-scout").get("/usage").json()["used_usd"] == pytest.approx(0.6)
    assert gate.rest(ADMIN_KEY).get("/usage", params={"client": "scout"}).json()[
        "remaining_usd"
    ] == pytest.approx(0.4)
    assert gate.rest(ADMIN_KEY).get("/usage").json()["error"]["code"] == "missing_client"


@pytest.mark.parametrize(
    ("tool", "route", "arguments", "param"),
    [
        ("begin_effect", "/effects/begin", {"effect_type": "t", "key": "k"}, "fingerprint"),
        ("begin_effect", "/effects/begin", {**MAIL, "surprise": 1}, "surprise"),
        ("begin_effect", "/effects/begin", {**MAIL, "cost_usd": -0.01}, "cost_usd"),
        ("begin_effect", "/effects/begin", {**MAIL, "cost_usd": "5"}, "cost_usd"),
        ("begin_effect", "/effects/begin", {**MAIL, "cost_usd": True}, "cost_usd"),
        ("begin_effect", "/effects/begin", {**MAIL, "cost_usd": 1e308}, "cost_usd"),
        ("begin_effect", "/effects/begin", {**MAIL, "key": "mail:\u202ealice"}, "key"),
        ("begin_effect", "/effects/begin", {**MAIL, "effect_type": "other/mail.send"}, "effect_type"),
        ("begin_effect", "/effects/begin", {**MAIL, "effect_type": "mail send"}, "effect_type"),
        ("report_effect", "/effects/report", {"token": "0" * 32, "result": {}}, "token"),
        ("report_effect", "/effects/report", {"token": "t", "result": "not an object"}, "result"),
    ],
)
def test_bad_input_is_a_tool_error_with_the_rest_routes_openai_error(
    gate: Gate, tool: str, route: str, arguments: dict[str, Any], param: str
) -> None:
    async def scenario() -> dict[str, Any]:
        async with mcp_over_http(gate.url, "sk-scout") as scout:
            return await refused(scout, tool, arguments)

    over_mcp = anyio.run(scenario)
    over_rest = gate.rest("sk-scout").post(route, json=arguments)
    assert over_rest.status_code in (400, 403, 409)
    assert over_mcp == over_rest.json()  # the same decision, word for word
    assert over_mcp["error"]["param"] == param
    assert gate.ledger.list_effects() == []


def test_a_body_over_the_limit_is_refused_and_an_unknown_tool_is_a_tool_error(gate: Gate) -> None:
    async def scenario() -> None:
        async with mcp_over_http(gate.url, "sk-scout", "legacy") as scout:
            began = await call(scout, "begin_effect", MAIL)
            with pytest.raises(MCPError):  # the REST routes' 64 KiB body limit holds for /mcp too
                await scout.call_tool(
                    "report_effect", {"token": began["token"], "result": {"blob": "x" * 70_000}}
                )
            unknown = await refused(scout, "send_mail", {})  # and the client goes on
            assert (
                unknown["error"]["code"] == "unknown_tool" and "begin_effect" in unknown["error"]["message"]
            )

    anyio.run(scenario)
    assert gate.ledger.lookup("scout/mail.send", MAIL["key"]).status == "in_flight"
    raw = httpx.post(
        f"{gate.url}/mcp", content=b"{" + b" " * 70_000 + b"}", headers={"Authorization": "Bearer sk-scout"}
    )
    assert raw.status_code == 413 and raw.json()["error"]["code"] == "body_too_large"


def test_no_key_or_a_wrong_key_is_refused_before_the_mcp_server(gate: Gate) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer sk-nobody"}, {"Authorization": "Basic sk-scout"}):
        response = httpx.post(f"{gate.url}/mcp", json=listing, headers={**accept, **headers})
        assert response.status_code == 401, response.text
        assert response.json()["error"]["type"] == "authentication_error"
        assert response.headers["www-authenticate"].startswith("Bearer")
    cross = httpx.post(
        f"{gate.url}/mcp",
        json=listing,
        headers={**accept, "Origin": "http://evil.example", "Authorization": "Bearer sk-scout"},
    )
    assert cross.status_code == 403 and cross.json()["error"]["code"] == "cross_origin"
    stream = httpx.get(
        f"{gate.url}/mcp", headers={"Accept": "text/event-stream", "Authorization": "Bearer sk-scout"}
    )
    assert stream.status_code == 405  # stateless: no event stream a client could hold open

    async def without_key() -> None:
        async with mcp_over_http(gate.url, None) as client:
            await client.list_tools()

    with pytest.raises(BaseExceptionGroup) as refusal:
        anyio.run(without_key)
    assert refusal.group_contains(MCPError, depth=None)

    async def with_key() -> set[str]:  # the same client with a key gets in: the refusal was the key's
        async with mcp_over_http(gate.url, "sk-scout") as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    assert anyio.run(with_key) == TOOL_NAMES


def test_tools_are_the_rest_routes_with_schemas_from_the_same_models(gate: Gate) -> None:
    async def listed() -> list[Any]:
        async with mcp_over_http(gate.url, "sk-scout") as scout:
            return (await scout.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listed)}
    assert set(tools) == TOOL_NAMES
    openapi = httpx.get(f"{gate.url}/openapi.json").json()
    components = openapi["components"]["schemas"]

    def refs(schema: dict[str, Any]) -> set[str]:
        """The models an OpenAPI schema refers to."""
        return {part.split('"')[0] for part in json.dumps(schema).split("#/components/schemas/")[1:]}

    def models(schema: dict[str, Any]) -> set[str]:
        """The models a tool's schema is or holds (its `title`, its `$defs`)."""
        return ({schema["title"]} if "title" in schema else set()) | set(schema.get("$defs", {}))

    for spec in TOOLS:
        tool = tools[spec.name]
        assert tool.description == spec.description and tool.input_schema["type"] == "object"
        assert tool.input_schema == spec.arguments.model_json_schema()
        assert tool.annotations.read_only_hint == spec.read_only
        method, path = spec.route.split(" ")
        operation = openapi["paths"][path][method.lower()]
        if "requestBody" in operation:  # the body model of the route is the tool's arguments
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert refs(body) == {spec.arguments.__name__}
            route_fields = set(components[spec.arguments.__name__]["properties"])
        else:  # query or path parameters: the same fields
            route_fields = {p["name"] for p in operation.get("parameters", [])}
        assert set(tool.input_schema["properties"]) == route_fields, spec.name
        answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert refs(answer) and refs(answer) <= models(tool.output_schema), spec.name


def test_agent_manifest_and_llms_txt_describe_the_same_tools_and_every_route(gate: Gate) -> None:
    manifest = httpx.get(f"{gate.url}/.well-known/agent-manifest.json").json()
    assert [tool["name"] for tool in manifest["tools"]] == [tool.name for tool in TOOLS]
    assert any("perform the action" in line for line in manifest["does_not"])
    assert set(manifest["begin_outcomes"]) == {
        "execute",
        "duplicate",
        "in_flight",
        "blocked",
        "denied",
        "awaiting_approval",
    }
    assert manifest["mcp"]["streamable_http"]["path"] == "/mcp"
    assert manifest["limits"]["max_body_bytes"] == 64 * 1024
    openapi = httpx.get(f"{gate.url}/openapi.json").json()
    routes = {(r["method"], r["path"]) for r in manifest["rest"]["routes"]}
    assert routes == {(m.upper(), p) for p, ops in openapi["paths"].items() for m in ops}
    assert {tuple(t["rest_route"].split(" ")) for t in manifest["tools"]} <= routes
    assert {r["auth"] for r in manifest["rest"]["routes"] if r["path"].startswith("/approvals")} == {"admin"}

    llms = httpx.get(f"{gate.url}/llms.txt")
    assert llms.headers["content-type"].startswith("text/plain")
    text = llms.text
    assert text.startswith("# Ratchet effect gate\n\n> ") and "never performs the action" in text
    assert all(f"`{tool.name}` (`{tool.route}`)" in text for tool in TOOLS)
    assert "`POST /mcp`" in text and "`POST /effects/resolve` (admin key only)" in text


# stdio: a spawned `ratchet effects mcp` --------------------------------------------------------------------------
def _stdio_env(home: Path, key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(
        RATCHET_HOME=str(home), RATCHET_API_KEYS="scout:sk-scout,other:sk-other", RATCHET_ADMIN_KEY=ADMIN_KEY
    )
    if key is not None:
        env["RATCHET_EFFECTS_API_KEY"] = key
    return env


COMMAND = [sys.executable, "-m", "ratchet_cli.main", "effects", "mcp"]


@asynccontextmanager
async def mcp_over_stdio(home: Path, key: str) -> AsyncIterator[Client]:
    server = StdioServerParameters(command=COMMAND[0], args=COMMAND[1:], env=_stdio_env(home, key))
    with anyio.fail_after(120):
        async with Client(server) as client:
            yield client


def test_stdio_serves_the_same_tools_and_tenancy_on_the_settings_control_db(tmp_path: Path) -> None:
    home = tmp_path / "home"

    async def scenario() -> None:
        async with mcp_over_stdio(home, "sk-scout") as scout:
            assert {tool.name for tool in (await scout.list_tools()).tools} == TOOL_NAMES
            began = await call(scout, "begin_effect", MAIL)
            assert (began["outcome"], began["effect_type"]) == ("execute", "scout/mail.send")
            await call(scout, "report_effect", {"token": began["token"], "result": {"message_id": "m-1"}})
            retried = await call(scout, "begin_effect", MAIL)
            assert (retried["outcome"], retried["result"]) == ("duplicate", {"message_id": "m-1"})
            bad = await refused(scout, "begin_effect", {"effect_type": "mail.send", "key": "k"})
            assert (bad["error"]["type"], bad["error"]["param"]) == ("invalid_request_error", "fingerprint")
            big = {
                "token": "t",
                "result": {"blob": "x" * 70_000},
            }  # stdio has the same limit, as a tool error
            assert (await refused(scout, "report_effect", big))["error"]["code"] == "body_too_large"
        async with mcp_over_stdio(home, "sk-other") as other:
            unseen = await refused(other, "get_effect", {"effect_type": "mail.send", "key": MAIL["key"]})
            assert unseen["error"]["code"] == "not_found"

    anyio.run(scenario)
    ledger = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
    assert ledger.lookup("scout/mail.send", MAIL["key"]).result == {"message_id": "m-1"}


@pytest.mark.parametrize(
    ("key", "says"),
    [(None, "set RATCHET_EFFECTS_API_KEY"), ("sk-nobody", "neither a client's key in RATCHET_API_KEYS")],
)
def test_stdio_without_a_known_key_refuses_to_start(tmp_path: Path, key: str | None, says: str) -> None:
    done = subprocess.run(
        COMMAND,
        env=_stdio_env(tmp_path / "home", key),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stdout == ""  # stdout is the MCP channel: nothing but messages ever goes there
    assert "sk-nobody" not in done.stderr  # the key is never echoed
