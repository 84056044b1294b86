"""`ratchet doctor teacher`: a day-1 check of the configured teacher, within a spend cap of a few cents.

It asks the teacher (``RATCHET_TEACHER_MODEL`` at ``RATCHET_TEACHER_API_BASE`` with its key, through the gateway's
own client) whether the model exists, for a plain answer, logprobs, JSON mode, strict ``json_schema``, a call of a
declared function, and each generation parameter the gateway forwards (``ratchet_cli.teacher_checks``); prints a
table (check, result, detail) and the spend, and exits 1 when a check fails.

A teacher without strict ``json_schema`` is a warning: the gateway can send such requests as ``json_object`` with
the schema in the system message (``ratchet_gateway.schema_prompt``). ``--apply`` records what the checks found
for this teacher in ``$RATCHET_HOME/teacher.json`` (``ratchet_core.teacher_capabilities``), which the settings read
as ``RATCHET_TEACHER_JSON_SCHEMA`` when that variable is unset; a gateway applies it from its next start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import click

from ratchet_core.settings import Settings, SettingsError, load_settings

DEFAULT_CAP_USD = 0.05


@click.group()
def doctor() -> None:
    """Check what Ratchet depends on outside itself (the teacher) with real, capped requests."""


@doctor.command("teacher")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--max-usd",
    type=click.FloatRange(min=0.0),
    default=DEFAULT_CAP_USD,
    show_default=True,
    help="Spend cap: a request whose estimated cost would pass it is not sent, nor any after it.",
)
@click.option(
    "--apply",
    is_flag=True,
    help="Record how the gateway sends json_schema to this teacher in $RATCHET_HOME/teacher.json.",
)
def teacher(as_json: bool, max_usd: float, apply: bool) -> None:
    """Check the configured teacher: model id, a plain answer, logprobs, json_object, strict json_schema, tool calls,
    max_tokens, stop, seed, temperature and streaming; exit 1 when a check fails."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise click.ClickException(f"{exc}\n(see `ratchet config check`)") from None
    try:
        report = asyncio.run(_run(settings, max_usd))
    except ValueError as exc:  # e.g. an API key an HTTP header cannot carry
        raise click.ClickException(str(exc)) from None
    if apply:
        report["applied"] = _apply(settings, report)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print(report)
    sys.exit(0 if report["ok"] else 1)


async def _run(settings: Settings, cap_usd: float) -> dict[str, Any]:
    from ratchet_cli.teacher_checks import FAIL, OK, TeacherDoctor
    from ratchet_gateway.upstream import Upstream

    # litellm's notice that a model missing from its price map got the fallback prices: the header says so
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    upstream = Upstream(
        settings.teacher_model, settings.teacher_api_base, settings.teacher_api_key, timeout_s=60.0
    )
    await upstream.start()
    try:
        doc = TeacherDoctor(upstream, settings.teacher_model, cap_usd)
        checks = await doc.run()
    finally:
        await upstream.close()
    by_name = {c.name: c.result for c in checks}
    strict = by_name.get("json_schema (strict)")
    fallback = by_name.get("json_schema via json_object")
    recommended = "strict" if strict == OK else "json_object" if fallback == OK else None
    p = doc.prices
    return {
        "ok": all(c.result != FAIL for c in checks),
        "teacher": {
            "model": settings.teacher_model,
            "api_base": settings.teacher_api_base,
            "provider": upstream.provider,
            "path": "OpenAI-compatible fast path" if upstream.fast else "litellm",
        },
        "prices_per_1m_usd": {
            "input": round(p.input_per_token * 1e6, 6),
            "output": round(p.output_per_token * 1e6, 6),
            "known": doc.priced,
        },
        "checks": [c.to_dict() for c in checks],
        "spend_usd": round(doc.spend.spent_usd, 8),
        "cap_usd": cap_usd,
        "requests": doc.spend.requests,
        "json_schema": {
            "current": settings.teacher_json_schema,
            "source": _source(settings),
            "recommended": recommended,
        },
        "checked_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "applied": None,
    }


def _source(settings: Settings) -> str:
    from ratchet_core.settings import describe

    row = next(r for r in describe(settings) if r["name"] == "teacher_json_schema")
    return str(row["source"])


def _apply(settings: Settings, report: dict[str, Any]) -> dict[str, Any] | None:
    from ratchet_core.teacher_capabilities import record

    mode = report["json_schema"]["recommended"]
    if mode is None:
        return None
    path = record(
        settings.home,
        settings.teacher_model,
        settings.teacher_api_base,
        mode,
        report["checked_at"],
        {c["name"]: c["result"] for c in report["checks"]},
    )
    return {"file": str(path), "json_schema": mode}


def _print(report: dict[str, Any]) -> None:
    t, prices = report["teacher"], report["prices_per_1m_usd"]
    click.echo(f"teacher {t['model']} at {t['api_base'] or '(provider default)'} ({t['path']})")
    note = "" if prices["known"] else f" (litellm has no price for {t['model']}: priced like gpt-4o)"
    click.echo(f"prices  ${prices['input']:g} in, ${prices['output']:g} out per 1M tokens{note}\n")
    rows = report["checks"]
    width = max(len(c["name"]) for c in rows)
    click.echo(f"{'check':<{width}}  result  detail")
    for c in rows:
        click.echo(f"{c['name']:<{width}}  {c['result']:<6}  {c['detail']}")
    click.echo(
        f"\nspent ${report['spend_usd']:.6f} of the ${report['cap_usd']:g} cap in {report['requests']} requests"
    )
    js = report["json_schema"]
    click.echo(f"json_schema is sent to this teacher: {js['current']} ({js['source']})")
    applied = report["applied"]
    if applied:
        click.echo(
            f"recorded json_schema={applied['json_schema']} for this teacher in {applied['file']}; "
            "gateways apply it from their next start"
        )
        if js["source"] == "environment":
            click.echo("note: RATCHET_TEACHER_JSON_SCHEMA is set and wins over the file", err=True)
    elif js["recommended"] and js["recommended"] != js["current"]:
        click.echo(f"this teacher needs json_schema={js['recommended']}: rerun with --apply to record it")
    elif any(c["name"] == "json_schema via json_object" and c["result"] == "fail" for c in rows):
        click.echo("json_schema requests cannot be served by this teacher either way", err=True)
    fails = [c["name"] for c in rows if c["result"] == "fail"]
    warns = [c["name"] for c in rows if c["result"] == "warn"]
    if fails:
        click.echo(f"FAILED: {', '.join(fails)}", err=True)
    else:
        click.echo("teacher OK" + (f" (warnings: {', '.join(warns)})" if warns else ""))
