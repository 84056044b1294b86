"""`ratchet scout "question"`: run Scout's team against a gateway, filing the report through the effect gate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.command("scout", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("question")
@click.option(
    "--base-url", default="http://127.0.0.1:8100/v1", show_default=True, help="The gateway's /v1 URL."
)
@click.option(
    "--api-key",
    envvar="OPENAI_API_KEY",
    required=True,
    help="Client bearer key for the gateway (or $OPENAI_API_KEY).",
)
@click.option(
    "--effects-url",
    default="http://127.0.0.1:8104",
    show_default=True,
    help="The effect gate (`ratchet effects serve`).",
)
@click.option(
    "--effects-api-key",
    "effects_key",
    default=None,
    help="API key for the effect gate (default: the --api-key).",
)
@click.option("--out", "out_dir", default="scout-reports", show_default=True, type=click.Path(path_type=Path))
@click.option("--model", default="ratchet", show_default=True, help="Model name sent to the gateway.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
def scout(
    question: str,
    base_url: str,
    api_key: str,
    effects_url: str,
    effects_key: str | None,
    out_dir: Path,
    model: str,
    as_json: bool,
) -> None:
    """Answer QUESTION with a planner, researchers and a writer that talk only through the gateway."""
    from ratchet_agents.scout import GateClient, GateError, Scout

    gate = GateClient(effects_url, effects_key or api_key)
    try:
        result = Scout(base_url, api_key, gate, out_dir, model=model).run(question)
    except GateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    finally:
        gate.close()
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    click.echo(result.markdown)
    said = {
        "execute": f"filed: {result.path}",
        "duplicate": f"already filed (not filed again): {result.path}",
        "in_flight": "another attempt is filing this report now; not filed again",
        "blocked": "an earlier attempt vanished mid-filing; resolve with `ratchet admin effects resolve`",
        "awaiting_approval": f"filing waits for `ratchet admin approve scout.file_report <client>/{result.effect_key}`",
        "denied": "filing denied by the effect gate",
    }
    click.echo(said.get(result.filing, result.filing))
    served = {}
    for call in result.calls:
        served[call["served_by"]] = served.get(call["served_by"], 0) + 1
    click.echo(f"{len(result.calls)} model calls through the gateway: {served}")
