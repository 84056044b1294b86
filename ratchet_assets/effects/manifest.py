"""``/.well-known/agent-manifest.json`` and ``/llms.txt`` of ``ratchet effects serve``: the gate described for agents.

Both are rendered from one source: what the gate does, does not do and answers, its authentication and limits,
and its tools come from ``ratchet_assets.effects.tools`` (the table the MCP server serves), and its REST routes
from the app's own OpenAPI document. So a tool or route added to the gate shows up here without an edit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ratchet_assets.effects.tools import AUTH, DOES, DOES_NOT, LIMITS, NAME, OUTCOMES, SUMMARY, TITLE, TOOLS

MANIFEST_VERSION = "1"
MCP_PATH = "/mcp"
STDIO = {"command": "ratchet", "args": ["effects", "mcp"], "env": {"RATCHET_EFFECTS_API_KEY": "<client key>"}}
HTTP_METHODS = ("get", "put", "post", "delete", "patch")


def _routes(openapi: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operation of the OpenAPI document: method, path, its docstring's first line, who may call it."""
    routes = []
    for path, operations in openapi.get("paths", {}).items():
        for method in HTTP_METHODS:
            if (operation := operations.get(method)) is None:
                continue
            text = (operation.get("description") or operation.get("summary") or "").strip()
            tags = operation.get("tags", [])
            routes.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": " ".join(text.split("\n\n")[0].split()).replace("``", "`"),  # first paragraph
                    "auth": "admin"
                    if "admin" in tags
                    else "none"
                    if {"discovery", "health"} & set(tags)
                    else "client",
                }
            )
    return routes


def agent_manifest(openapi: dict[str, Any]) -> dict[str, Any]:
    """The machine-readable description: what the gate is for, what it never does, its doors and limits."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": NAME,
        "title": TITLE,
        "description": SUMMARY,
        "does": list(DOES),
        "does_not": list(DOES_NOT),
        "begin_outcomes": dict(OUTCOMES),
        "authentication": dict(AUTH),
        "limits": dict(LIMITS),
        "mcp": {
            "streamable_http": {
                "path": MCP_PATH,
                "auth": AUTH["header"],
                "stateless": True,
                "answers": "application/json (no session id, no event stream)",
            },
            "stdio": STDIO,
        },
        "tools": [
            {
                "name": tool.name,
                "title": tool.title,
                "description": tool.description,
                "rest_route": tool.route,
                "read_only": tool.read_only,
                "admin_only": tool.admin_only,
                "input_schema": tool.input_schema(),
                "output_schema": tool.output_schema(),
            }
            for tool in TOOLS
        ],
        "rest": {"openapi": "/openapi.json", "routes": _routes(openapi)},
    }


def _section(title: str, items: Iterable[str]) -> list[str]:
    return ["", f"## {title}", "", *(f"- {item}" for item in items)]


def llms_txt(openapi: dict[str, Any]) -> str:
    """The same description as Markdown in the llms.txt layout: a title, a summary, then sections of links."""
    lines = [f"# {TITLE}", "", f"> {SUMMARY}", "", "The gate:", *(f"- {item}" for item in DOES)]
    lines += ["", "The gate does not:", *(f"- {item}" for item in DOES_NOT)]
    outcomes = (f"`{name}`: {meaning}" for name, meaning in OUTCOMES.items())
    lines += _section("Outcomes of begin_effect (POST /effects/begin)", outcomes)
    stdio = f"{STDIO['command']} {' '.join(STDIO['args'])}"
    lines += _section(
        "MCP",
        [
            f"Streamable HTTP: `POST {MCP_PATH}` with `{AUTH['header']}` (stateless, JSON answers)",
            f"stdio: `{stdio}` with `RATCHET_EFFECTS_API_KEY=<client key>` in its environment",
        ],
    )
    lines += _section("Tools", (f"`{tool.name}` (`{tool.route}`): {tool.description}" for tool in TOOLS))
    who = {"admin": " (admin key only)", "none": " (no key)"}
    routes = [
        f"`{r['method']} {r['path']}`{who.get(r['auth'], '')}: {r['summary']}" for r in _routes(openapi)
    ]
    lines += _section("REST", ["[OpenAPI document](/openapi.json): every route, body and error", *routes])
    lines += _section("Authentication", (f"{name}: {text}" for name, text in AUTH.items()))
    lines += _section("Limits", (f"{name}: {text}" for name, text in LIMITS.items()))
    lines += _section("Optional", ["[Agent manifest](/.well-known/agent-manifest.json): all of this as JSON"])
    return "\n".join(lines) + "\n"
