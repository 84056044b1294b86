"""`ratchet effects serve`: the effect gate's HTTP API (ratchet_assets.effects_api) on the control DB."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def effects() -> None:
    """The effect gate as a service: begin/report/fail/resolve, approvals, max_attempts, spend caps."""


@effects.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8104, show_default=True, help="Port to bind.")
def serve(host: str, port: int) -> None:
    """Serve the gate (control DB from RATCHET_CONTROL_DB, clients RATCHET_API_KEYS, admin RATCHET_ADMIN_KEY).

    The OpenAPI document is at /openapi.json, the interactive page at /docs.
    """
    import uvicorn

    from ratchet_assets.effects_api import app_from_settings

    uvicorn.run(app_from_settings(), host=host, port=port, log_level="warning", access_log=False)
