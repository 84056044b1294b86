"""`ratchet config check`: every RATCHET_* setting, its value (secrets masked) and every problem at once."""

from __future__ import annotations

import json
import sys

import click

from ratchet_core.settings import Settings, SettingsError, describe, load_settings, unknown_variables

SECRET_FIELDS = {
    "api_keys",
    "admin_key",
    "effects_api_key",
    "signing_key",
    "pepper",
    "teacher_api_key",
    "embedding_api_key",
    "student_api_key",
}


def key_problems(settings: Settings) -> list[str]:
    """What the settings hold only as text and the services read at start: the client keys (the same parse the
    gateway and the effect gate run, ``ratchet_core.api_keys.parse_api_keys``) and the signing key when one is
    configured or present (``ratchet_core.keys.signing_key``). A key file not made yet is no problem: `ratchet init`
    makes it. Messages name the variable or file, never a secret."""
    from ratchet_core.api_keys import parse_api_keys
    from ratchet_core.keys import KeyTrustError, signing_key, signing_key_source

    problems = []
    try:
        parse_api_keys(settings.api_keys)
    except (ValueError, OSError) as exc:
        problems.append(str(exc))
    source = signing_key_source(settings)
    explicit = settings.signing_key.strip().startswith("@")
    if source.kind == "setting" or explicit or (source.path is not None and source.path.exists()):
        try:
            signing_key(settings)
        except (KeyTrustError, ValueError, OSError) as exc:
            text = str(exc)
            if source.kind == "setting":
                problems.append(text)  # already "RATCHET_SIGNING_KEY: ..."
            else:
                where = f"RATCHET_SIGNING_KEY=@{source.path}: " if explicit else "signing key file "
                problems.append(where + text)
    return problems


def _mask(name: str, value: object) -> object:
    if name in SECRET_FIELDS and value:
        return "***set***"
    if name == "control_db" and value:  # a database URL may carry a password
        from ratchet_cli.config_probe import safe_url

        return safe_url(str(value))
    return str(value) if value is not None else None


@click.group()
def config() -> None:
    """Inspect Ratchet's configuration (environment variables prefixed RATCHET_, and .env)."""


@config.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--offline", is_flag=True, help="Do not connect to the control DB, lake, student or teacher.")
@click.option("--strict", is_flag=True, help="Also exit 1 when something configured cannot be reached.")
def check(as_json: bool, offline: bool, strict: bool) -> None:
    """List every setting with its value and source, connect to what is configured (control DB, lake, artifacts,
    student, teacher) and report each; exit 1 naming each unknown or invalid variable (--strict: or unreachable)."""
    problems: list[str] = []
    settings: Settings | None = None
    try:
        settings = load_settings()
    except SettingsError as exc:
        problems = [line.strip() for line in str(exc).splitlines()[1:]]
    if settings is not None:
        problems += key_problems(settings)
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
            "control_db": _mask("control_db", settings.control_db_url),
            "signing_key_file": str(settings.signing_key_path),
        }
    connections = []
    if settings is not None and not offline:
        from ratchet_cli.config_probe import probe_all

        connections = [p.to_dict() for p in probe_all(settings)]
    unreachable = [f"{c['name']}: {c['detail']}" for c in connections if c["ok"] is False]
    failed = bool(problems) or (strict and bool(unreachable))
    result = {
        "ok": not failed,
        "problems": problems,
        "settings": rows,
        "derived": derived,
        "connections": connections,
        "unreachable": unreachable,
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
        if connections:
            click.echo("")
        for c in connections:
            mark = {True: "ok", False: "FAILED", None: "skipped"}[c["ok"]]
            click.echo(f"{'(connect) ' + c['name']:<{width}}  {mark:<8}{c['target']}: {c['detail']}")
        if problems:
            click.echo("\nproblems:", err=True)
            for p in problems:
                click.echo(f"  {p}", err=True)
        elif failed:
            click.echo(f"\nunreachable (--strict): {'; '.join(unreachable)}", err=True)
        else:
            click.echo("\nconfiguration OK")
    sys.exit(1 if failed else 0)
