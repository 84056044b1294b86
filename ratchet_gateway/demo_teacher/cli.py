"""`ratchet demo-teacher`: serve the demo teacher (OpenAI-compatible, answers the built-in workloads)."""

from __future__ import annotations

import click


@click.command("demo-teacher")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8101, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--model", default="demo-teacher", show_default=True, help="Model name clients must send.")
@click.option(
    "--latency-ms", default=0.0, show_default=True, type=click.FloatRange(min=0), help="Fixed latency."
)
@click.option(
    "--error-rate",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of injected errors.",
)
@click.option(
    "--error-status",
    default=500,
    show_default=True,
    type=click.IntRange(400, 599),
    help="Status of injected errors.",
)
@click.option(
    "--wrong-rate",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of wrong answers.",
)
@click.option(
    "--reasoning-tokens",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Reasoning tokens to bill.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of error injection and wrong answers.")
@click.option("--api-key", default=None, help="Require `Authorization: Bearer KEY` (default: no auth).")
def demo_teacher(
    host: str,
    port: int,
    model: str,
    latency_ms: float,
    error_rate: float,
    error_status: int,
    wrong_rate: float,
    reasoning_tokens: int,
    seed: int,
    api_key: str | None,
) -> None:
    """Serve the demo teacher: an OpenAI-compatible model that answers the built-in workloads correctly."""
    import uvicorn

    from .app import DemoTeacherConfig, create_app

    config = DemoTeacherConfig(
        model=model,
        latency_ms=latency_ms,
        error_rate=error_rate,
        error_status=error_status,
        seed=seed,
        reasoning_tokens=reasoning_tokens,
        wrong_rate=wrong_rate,
        api_key=api_key,
    )
    auth = "bearer key required" if api_key else "no auth"
    click.echo(f"demo teacher: http://{host}:{port}/v1 model={model} ({auth})", err=True)
    uvicorn.run(create_app(config), host=host, port=port, access_log=False, log_level="warning")
