"""`ratchet gateway`: serve the OpenAI-compatible gateway (uvicorn, uvloop + httptools, no access log).

``--workers N`` starts N processes on one socket; each is its own replica with its own ledger
(``$RATCHET_HOME/ledger/<replica>-<i>.*``; the replica name is ``--replica`` / ``RATCHET_REPLICA_ID``, default the
host name: gateways that share a lake need distinct ones, and one whose name already has segments in the lake
from another ledger refuses to start). Configuration comes from ``RATCHET_*`` variables (``ratchet config
check``). SIGTERM/Ctrl-C drain in-flight requests, then flush and seal the ledger.
"""

from __future__ import annotations

import click


def _replica_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from ratchet_core.names import NameRuleError, check

    try:
        return None if value is None else check("replica", value)
    except NameRuleError as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param=param) from None


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
    "--replica",
    default=None,
    callback=_replica_name,
    help="This gateway's replica name in the lake (RATCHET_REPLICA_ID; each worker adds -<slot>). Gateways that "
    "share a lake need distinct ones; default the host name.",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def gateway(host: str, port: int, workers: int, replica: str | None, log_level: str) -> None:
    """Serve the OpenAI-compatible gateway (POST /v1/chat/completions) with a durable per-replica ledger."""
    import os

    import uvicorn

    from ratchet_core.settings import SettingsError, load_settings

    if replica is not None:  # the workers build their settings from the environment
        os.environ["RATCHET_REPLICA_ID"] = replica

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
