"""`ratchet gateway`: serve the OpenAI-compatible gateway (uvicorn, uvloop + httptools, no access log).

``--workers N`` starts N processes on one socket; each is its own replica with its own ledger
(``$RATCHET_HOME/ledger/<host>-<i>.*``). Configuration comes from ``RATCHET_*`` variables (``ratchet config
check``). SIGTERM/Ctrl-C drain in-flight requests, then flush and seal the ledger.
"""

from __future__ import annotations

import click


@click.command(name="gateway")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8100, show_default=True, type=int, help="TCP port.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes; each is a replica with its own ledger.",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def gateway(host: str, port: int, workers: int, log_level: str) -> None:
    """Serve the OpenAI-compatible gateway (POST /v1/chat/completions) with a durable per-replica ledger."""
    import uvicorn

    from ratchet_core.settings import SettingsError, load_settings

    try:
        load_settings()  # fail here, with every bad variable named, not in each worker
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from exc
    uvicorn.run(
        "ratchet_gateway.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        loop="uvloop",
        http="ratchet_gateway.serve_http:GatewayHttpProtocol",  # httptools, head + body in one write
        access_log=False,
        proxy_headers=False,  # nothing reads the client address: one ASGI layer less per request
        log_level=log_level,
        timeout_graceful_shutdown=30,
    )
