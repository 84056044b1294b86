"""`ratchet student-server`: serve the student base (and its LoRA adapters) on an OpenAI-compatible port."""

from __future__ import annotations

import click


def _adapter_pairs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(
                f"{value!r}: write NAME=PATH, e.g. --adapter v1-abc123=./adapters/v1-abc123"
            )
        pairs[name] = path
    return pairs


def _home_key(home) -> str:
    from ratchet_core.home_files import ensure_student_key, read_student_key

    ensure_student_key(home)
    return read_student_key(home)


@click.command("student-server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8102, show_default=True, type=int, help="TCP port to listen on.")
@click.option(
    "--base",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Local Hugging Face base model folder. Default: $RATCHET_STUDENT_BASE_MODEL, else the demo base "
    "under $RATCHET_HOME (built on first use).",
)
@click.option(
    "--api-key",
    default=None,
    envvar="RATCHET_STUDENT_API_KEY",
    help="Require this bearer key on /v1. Default: $RATCHET_HOME/keys/student.key (`ratchet init` writes it; "
    "created here when absent), the key the gateway sends.",
)
@click.option(
    "--max-batch", default=8, show_default=True, type=int, help="Requests decoded together at most."
)
@click.option(
    "--threads",
    default=None,
    type=click.IntRange(min=1),
    help="torch intra-op threads for decoding. Default: 1 for a base under 50M parameters (the demo base: more "
    "threads only spin between its tiny operations), else torch's default.",
)
@click.option("--served-model-name", default=None, help="Name clients use for the base model.")
@click.option(
    "--adapter", "adapters", multiple=True, callback=_adapter_pairs, help="NAME=PATH to load at start."
)
def student_server(
    host: str,
    port: int,
    base: str | None,
    api_key: str | None,
    max_batch: int,
    threads: int | None,
    served_model_name: str | None,
    adapters: dict[str, str],
) -> None:
    """Serve the local student model with vLLM's LoRA API (/v1/load_lora_adapter, /v1/unload_lora_adapter)."""
    import uvicorn

    from ratchet_core.settings import load_settings
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_gateway.student_server.app import create_app

    settings = load_settings()
    if not api_key:  # never without a key by default: the one the gateway reads from the home
        api_key = settings.student_api_key or _home_key(settings.home)
    if base is None:
        base = settings.student_base_model or str(ensure_demo_base(settings.demo_base_path))
    app = create_app(
        base,
        max_batch=max_batch,
        api_key=api_key,
        served_model_name=served_model_name,
        adapters=adapters,
        adapter_cache=settings.home / "adapter-cache",  # adapters loaded from an s3:// path land here
        threads=threads,
    )
    click.echo(f"student server: base {base} on http://{host}:{port}/v1")
    uvicorn.run(app, host=host, port=port, log_level="info")
