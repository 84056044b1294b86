"""`ratchet proof key|make|disjoint`: example keys and training-set proofs for clients and auditors.

Why here and not in ratchet_stats: the example key hashes the REDACTED request (``ratchet_core.example_key``,
which calls ``ratchet_core.redact``), and the verifier kit stays free of ratchet_core. Checking a proof needs only
the verifier kit: ``ratchet verify proof --bom BOM --proof FILE --key PUB``.

- ``ratchet proof key --body request.json [--task T]``: the example key of an OpenAI chat request body (task from
  ``--task``, else ``metadata.ratchet_task``, else ``default``, as the gateway does);
- ``ratchet proof make --keys train-keys.txt (--example-key K | --body request.json) [--out FILE]``: a membership proof
  when the key is in the sorted key list, else a non-membership proof (``ratchet_stats.commitment``);
- ``ratchet proof disjoint --train-keys FILE --golden-keys FILE [--out FILE]``: per-key non-membership proofs that
  no golden key is in the training set.

An adapter's key lists are written next to its BOM: ``<artifacts>/boms/<version>/train-keys.txt`` and
``golden-keys.txt`` (one key a line, sorted).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


def body_example_key(body: dict[str, Any], task: str | None = None) -> str:
    """The example key of a chat request body, computed as the gateway and the night compute it.

    Redaction follows this machine's ``RATCHET_REDACT_PII`` (it must match the gateway's setting).
    """
    from ratchet_core.example_key import body_example_key as key_of_body
    from ratchet_core.settings import SettingsError, load_settings

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise click.UsageError(
            "the body has no 'messages' list: pass an OpenAI chat completions request body"
        )
    try:
        redact = load_settings().redact_pii
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    task = task or (body.get("metadata") or {}).get("ratchet_task") or "default"
    return key_of_body(body, task, redact=redact)


def _load_body(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        body = json.loads(text)
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot read the request body {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise click.UsageError(f"{path} must hold a JSON object (a chat completions request body)")
    return body


def _load_keys(path: str) -> list[str]:
    from ratchet_stats.commitment import sorted_keys

    try:
        lines = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
        return sorted_keys(lines)
    except OSError as exc:
        raise click.UsageError(f"cannot read key list {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise click.UsageError(f"{path}: {exc}") from exc


def _write(obj: dict[str, Any], out: str | None) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text)


@click.group(name="proof", help="Training-set membership helpers: example keys and proofs.")
def proof() -> None:
    pass


@proof.command("key", help="Print the example key of a chat request body (JSON file, or - for stdin).")
@click.option(
    "--body", "body_path", required=True, help="request.json: the body you POSTed to /v1/chat/completions"
)
@click.option("--task", default=None, help="task name if the body carries no metadata.ratchet_task")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def key_cmd(body_path: str, task: str | None, as_json: bool) -> None:
    key = body_example_key(_load_body(body_path), task)
    click.echo(json.dumps({"key": key}) if as_json else key)


@proof.command("make", help="Prove that an example is (or is not) in a sorted key list.")
@click.option(
    "--keys", "keys_path", required=True, help="sorted key list, e.g. boms/<version>/train-keys.txt"
)
@click.option(
    "--example-key", "key", default=None, help="the example key (64 hex chars, `ratchet proof key`)"
)
@click.option("--body", "body_path", default=None, help="or a request body to compute the key from")
@click.option("--task", default=None, help="task name for --body")
@click.option("--out", default=None, help="write the proof here (default: stdout)")
def make_cmd(
    keys_path: str, key: str | None, body_path: str | None, task: str | None, out: str | None
) -> None:
    from ratchet_stats.commitment import KeyTree, check_key

    if (key is None) == (body_path is None):
        raise click.UsageError("pass exactly one of --example-key or --body")
    if body_path is not None:
        key = body_example_key(_load_body(body_path), task)
    try:
        check_key(key or "")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    _write(KeyTree(_load_keys(keys_path)).prove(key or ""), out)


@proof.command("disjoint", help="Prove that no golden key is in the training set.")
@click.option("--train-keys", required=True, help="boms/<version>/train-keys.txt")
@click.option("--golden-keys", required=True, help="boms/<version>/golden-keys.txt")
@click.option("--out", default=None, help="write the proof here (default: stdout)")
def disjoint_cmd(train_keys: str, golden_keys: str, out: str | None) -> None:
    from ratchet_stats.commitment import KeyTree

    try:
        proof_obj = KeyTree(_load_keys(train_keys)).prove_disjoint(_load_keys(golden_keys))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    _write(proof_obj, out)
