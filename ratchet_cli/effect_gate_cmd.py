"""`ratchet effects serve|mcp`: the effect gate over HTTP (REST and MCP) or MCP over stdio, on the control DB."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def effects() -> None:
    """The effect gate as a service: begin/report/fail/resolve, approvals, max_attempts, spend caps."""


@effects.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8104, show_default=True, help="Port to bind.")
def serve(host: str, port: int) -> None:
    """Serve the gate (control DB from RATCHET_CONTROL_DB, clients RATCHET_API_KEYS, admin RATCHET_ADMIN_KEY).

    The REST API is documented at /openapi.json (no /docs page: it would load scripts from a CDN); MCP clients connect to /mcp with their
    bearer key; /.well-known/agent-manifest.json and /llms.txt describe the gate for agents.
    """
    import uvicorn

    from ratchet_assets.effects import app_from_settings

    uvicorn.run(app_from_settings(), host=host, port=port, log_level="warning", access_log=False)


@effects.command("mcp")
@click.option(
    "--api-key",
    default=None,
    help="Client bearer key from RATCHET_API_KEYS (or RATCHET_ADMIN_KEY) the tools act as "
    "(default $RATCHET_EFFECTS_API_KEY).",
)
def mcp(api_key: str | None) -> None:
    """Serve the gate's MCP tools over stdin/stdout, for an agent host (Claude Desktop, Cursor, the Agents SDK).

    The process opens the control DB itself (RATCHET_CONTROL_DB) and acts as the client its key names, with the
    tenancy of `ratchet effects serve`; stdout carries only MCP messages.
    """
    from ratchet_assets.effects import serve_stdio, stdio_caller
    from ratchet_core.settings import SettingsError

    try:
        ledger, caller = stdio_caller(api_key)
    except (SettingsError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    serve_stdio(ledger, caller)
