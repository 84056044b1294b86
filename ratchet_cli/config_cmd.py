"""`ratchet config check`: every RATCHET_* setting, its value (secrets masked) and every problem at once."""

from __future__ import annotations

import json
import sys

import click

from ratchet_core.settings import Settings, SettingsError, describe, load_settings, unknown_variables

SECRET_FIELDS = {"api_keys", "admin_key", "signing_key", "pepper", "teacher_api_key", "student_api_key"}


def _mask(name: str, value: object) -> object:
    if name in SECRET_FIELDS and value:
        return "***set***"
    return str(value) if value is not None else None


@click.group()
def config() -> None:
    """Inspect Ratchet's configuration (environment variables prefixed RATCHET_, and .env)."""


@config.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def check(as_json: bool) -> None:
    """List every setting with its value and source; exit 1 naming each unknown or invalid variable."""
    problems: list[str] = []
    settings: Settings | None = None
    try:
        settings = load_settings()
    except SettingsError as exc:
        problems = [line.strip() for line in str(exc).splitlines()[1:]]
    rows = [
        {
            "variable": row["variable"],
            "value": _mask(str(row["name"]), row["value"]),
            "source": row["source"],
            "description": row["description"],
        }
        for row in describe(settings)
    ]
    derived = {}
    if settings is not None:
        derived = {
            "lake": settings.lake_root,
            "artifacts": settings.artifacts_root,
            "control_db": settings.control_db_url,
            "signing_key_file": str(settings.signing_key_path),
        }
    result = {
        "ok": not problems,
        "problems": problems,
        "settings": rows,
        "derived": derived,
        "unknown": unknown_variables(),
    }
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        width = max(len(r["variable"]) for r in rows)
        for r in rows:
            click.echo(f"{r['variable']:<{width}}  {r['value']!s:<40}  ({r['source']})")
        for k, v in derived.items():
            click.echo(f"{'(derived) ' + k:<{width}}  {v}")
        if problems:
            click.echo("\nproblems:", err=True)
            for p in problems:
                click.echo(f"  {p}", err=True)
        else:
            click.echo("\nconfiguration OK")
    sys.exit(0 if not problems else 1)
