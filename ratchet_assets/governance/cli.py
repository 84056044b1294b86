"""``ratchet import`` and ``ratchet export`` (registered in ratchet_cli.main)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import click

from ratchet_assets.cli_names import names_checked
from ratchet_assets.governance.when import parse_when


def _when(value: str | None, what: str) -> datetime | None:
    try:
        return parse_when(value, what)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=what) from None


@click.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--task", required=True, help="Task the rows belong to.")
@click.option(
    "--as",
    "role",
    type=click.Choice(["golden", "train"]),
    required=True,
    help="golden: evaluation only, never trained on; train: training rows.",
)
@click.option("--source", required=True, help="Where the rows come from (carried to the BOM and NOTICE).")
@click.option("--license", "license_", required=True, help="Licence of the rows (e.g. CC-BY-4.0).")
@click.option(
    "--label-source",
    type=click.Choice(["import", "people", "teacher"]),
    default="import",
    show_default=True,
    help="Who labelled the rows: people (counted with people's labels in the certificate), teacher, or import.",
)
@click.option("--day", default=None, help="First night that uses them (YYYY-MM-DD; default today, UTC).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def import_cmd(
    path: str,
    task: str,
    role: str,
    source: str,
    license_: str,
    label_source: str,
    day: str | None,
    as_json: bool,
) -> None:
    """Import labelled chat examples (JSONL or Parquet: messages + answer) as golden or training rows."""
    from ratchet_assets.governance.importer import ImportRowError, import_examples
    from ratchet_core.settings import load_settings

    try:
        result = import_examples(
            path,
            artifacts_root=load_settings().artifacts_root,
            task=task,
            role=role,
            source=source,
            license=license_,
            day=day,
            label_source=label_source,
        )
    except (ImportRowError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        return
    click.echo(
        f"imported {result.imported} {role} rows for {task} as {result.import_id} (from night {result.day}); "
        f"{result.duplicates} duplicates, {result.refused} refused (key already assigned the other way)"
    )


@click.command("export")
@click.option(
    "--out",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder to write the export to (outside the Ratchet home, the lake and the artifacts).",
)
@click.option("--task", default=None, callback=names_checked("task"), help="Only this task.")
@click.option(
    "--client",
    default=None,
    callback=names_checked("client"),
    help="Only this client's requests (and the examples they taught).",
)
@click.option("--since", default=None, help="From this UTC time (ISO).")
@click.option("--until", default=None, help="Before this UTC time (ISO).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "parquet"]), default="jsonl", show_default=True)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["requests", "examples", "golden", "receipts", "feedback"]),
    help="What to export (repeatable; default all five).",
)
@click.option(
    "--sign/--no-sign", default=True, show_default=True, help="Sign the manifest (manifest.dsse.json)."
)
@click.option("--verify", "verify_dir", default=None, help="Verify an export folder instead of writing one.")
@click.option(
    "--control-db", default="", help="SQLAlchemy URL of the control DB (erased requests are left out)."
)
def export_cmd(
    out: str | None,
    task: str | None,
    client: str | None,
    since: str | None,
    until: str | None,
    fmt: str,
    kinds: tuple[str, ...],
    sign: bool,
    verify_dir: str | None,
    control_db: str,
) -> None:
    """Export requests, examples, golden rows and receipt rows with a verifiable manifest (Merkle root)."""
    from ratchet_assets.governance.export import KINDS, ExportError, ExportFilters, export_data, verify_export
    from ratchet_core.control_db import make_engine
    from ratchet_core.keys import root_public_keys, signing_key
    from ratchet_core.settings import load_settings

    settings = load_settings()
    try:
        if verify_dir:
            signed = Path(verify_dir, "manifest.dsse.json").exists()  # check the signature when there is one
            manifest = verify_export(verify_dir, root_public_keys(settings) if signed else None)
            click.echo(f"ok: {verify_dir} verifies (root {manifest['root']}{', signed' if signed else ''})")
            return
        if not out:
            raise click.UsageError("give --out DIR (or --verify DIR)")
        manifest = export_data(
            out,
            lake_root=settings.lake_root,
            artifacts_root=settings.artifacts_root,
            filters=ExportFilters(task, client, _when(since, "--since"), _when(until, "--until")),
            fmt=fmt,
            kinds=kinds or KINDS,
            engine=make_engine(control_db or settings.control_db_url),
            private_key=signing_key(settings) if sign else None,
            home=settings.home,
        )
    except (ExportError, ValueError, FileNotFoundError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for entry in manifest["files"].values():
        click.echo(f"{entry['path']:<20} {entry['rows']:>8} rows  root {entry['root']}")
    click.echo(f"manifest root {manifest['root']} -> {out}/manifest.json")
