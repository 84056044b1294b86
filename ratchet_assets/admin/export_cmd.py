"""`ratchet admin export-adapter --version V --out DIR`: copy an adapter with its BOM, NOTICE and certificate.

The export is what you hand to another team or a vLLM host: ``DIR/adapter/`` (the PEFT files, loadable with
``--lora-modules V=DIR/adapter``), ``DIR/bom.dsse.json``, ``DIR/NOTICE.md``, ``DIR/certificate.dsse.json`` and the
sorted key lists. The BOM is verified against the copied files before the command succeeds (with the control plane's
key and every key its trusted-key history ever held, or ``--key``), so a tampered artifact is never exported.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from ratchet_assets.admin.common import echo_json, json_option
from ratchet_assets.cli_names import names_checked
from ratchet_core.layout import BOM_FILE, BOM_FILES, BOM_NOTICE_FILE, AdapterExport, ArtifactLayout


def _public_key(key: str | None):
    from ratchet_stats.keys import load_public_key

    if key:
        path = Path(key)
        return load_public_key(path.read_bytes() if path.is_file() else key)
    from ratchet_assets.defs.resources import Signer

    return Signer(create_if_missing=False).verify_keys()  # BOMs signed before a key rotation verify too


@click.command("export-adapter")
@click.option(
    "--version",
    "version",
    required=True,
    callback=names_checked("version"),
    help="adapter version, e.g. v3-1a2b3c4d (`ratchet admin versions`)",
)
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="folder to create")
@click.option(
    "--artifacts", default="", help="artifacts root (default: RATCHET_ARTIFACTS / $RATCHET_HOME/artifacts)"
)
@click.option(
    "--key", default=None, help="public key to verify the BOM with (default: the control plane's key)"
)
@json_option
def export_adapter(version: str, out: str, artifacts: str, key: str | None, as_json: bool) -> None:
    """Copy an adapter with its signed BOM, NOTICE.md and certificate into OUT (verified first)."""
    from ratchet_core.artifact_store import from_settings
    from ratchet_core.settings import load_settings
    from ratchet_stats.bom_format import BomError, verify_bom

    settings = load_settings()
    root = artifacts or settings.artifacts_root
    layout = ArtifactLayout(root, store=from_settings(settings, root))  # fetches what the cache lacks
    try:
        adapter, boms = layout.adapter_dir(version), layout.bom_dir(version)
    except ValueError as exc:
        raise click.ClickException(f"{exc}; list versions with `ratchet admin versions`") from exc
    if not adapter.is_dir():
        raise click.ClickException(
            f"no adapter {version} under {layout.adapters_dir()}; list them with `ratchet admin versions`"
        )
    if not (boms / BOM_FILE).exists():
        raise click.ClickException(
            f"{version} has no BOM ({boms}): only certified adapters get one; materialise `bom` for its night first"
        )
    dest = Path(out)
    export = AdapterExport(dest)
    if dest.exists() and any(dest.iterdir()):
        raise click.ClickException(f"{dest} is not empty: choose a new folder")
    try:
        public = _public_key(key)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"no public key to verify with ({exc}); pass --key PUB") from exc
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(adapter, export.adapter_dir)
    copied = []
    for name in BOM_FILES:
        if (boms / name).exists():
            shutil.copyfile(boms / name, export.file(name))
            copied.append(name)
    notice_file = export.file(BOM_NOTICE_FILE)
    notice = notice_file.read_bytes() if notice_file.exists() else None
    try:
        report = verify_bom(
            export.file(BOM_FILE).read_bytes(), public, notice=notice, adapter_dir=export.adapter_dir
        )
    except BomError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise click.ClickException(
            f"the BOM of {version} does not verify ({exc.check}): {exc.message}; nothing exported"
        ) from exc
    data = {"version": version, "out": str(dest), "files": ["adapter/", *copied], "checks": report.checks}
    if as_json:
        echo_json(data)
    else:
        click.echo(f"exported {version} to {dest} (verified: {', '.join(report.checks)})")


COMMANDS = [export_adapter]
