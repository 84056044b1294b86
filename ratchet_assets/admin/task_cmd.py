"""`ratchet admin task set|show|list`: per-task policy (``ratchet_core.task_policy``), signed into the manifest.

``set NAME`` changes only the options given (``--comparator``, ``--target``, ``--delta``, ``--audit-rate``,
``--golden-share``, ``--enable/--disable``, and the release rules: ``--release``, ``--promote-evidence``,
``--canary-audit-rate``, ``--calibration``, ``--paired-gate/--no-paired-gate``, ``--min-certified``, the same
names ``ratchet sim`` compares them under; what feedback means: ``--metric NAME:boolean|float[:higher|lower]``
(repeatable, added to the task's declared metrics) and ``--bad-when 'NAME<VALUE'``; ``--clear FIELD`` returns a
field to its default), needs ``--reason``
and is published like every release change: a new signed manifest plus an audit-log row, in one transaction. A task
needs no other definition: its name and ``ratchet admin task set`` are enough for the gateway, the night, the
certificate and the release policy to follow it.
"""

from __future__ import annotations

from typing import Any

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option
from ratchet_assets.admin.release_cmd import (
    _change,
    _fail,
    _private_key,
    actor_option,
    key_option,
    reason_option,
)
from ratchet_assets.cli_names import names_checked
from ratchet_assets.release.options import release_options
from ratchet_core.task_policy import FEEDBACK_FIELDS, RELEASE_FIELDS

FIELDS = ("comparator", "target", "delta", "audit_rate", "golden_share", *RELEASE_FIELDS, *FEEDBACK_FIELDS)


def _resolved_rows(manifest: Any, names: list[str]) -> list[dict[str, Any]]:
    from ratchet_core.task_policy import resolve_in

    # globals: the night's defaults (NightConfig: target 0.95, delta 0.05, golden share 0.2), the manifest's audit rate
    return [resolve_in(manifest, n).as_dict() for n in names]


def _current(control_db: str, signing_key_file: str) -> Any:
    from ratchet_core.control_db import ensure_schema
    from ratchet_core.manifest import Manifest, latest_verified

    engine = engine_for(control_db)
    ensure_schema(engine)
    manifest, _ = latest_verified(engine, [_private_key(signing_key_file).public_key()])
    return manifest or Manifest.default()


@click.group("task")
def task_group() -> None:
    """Per-task policy: comparator, certification target/delta, audit rate, golden share, enabled, release rules."""


@task_group.command("set")
@click.argument("name", callback=names_checked("task"))
@click.option("--comparator", default=None, help="label | json | tool_call | custom:<registered name>.")
@click.option("--target", type=float, default=None, help="Certification and release target, in (0, 1).")
@click.option("--delta", type=float, default=None, help="Certification level delta, in (0, 1).")
@click.option(
    "--audit-rate", type=float, default=None, help="Share of student answers re-asked of the teacher."
)
@click.option(
    "--golden-share", type=float, default=None, help="Share of new example keys held out as golden."
)
@click.option("--enable/--disable", "enabled", default=None, help="--disable sends the task to the teacher.")
@release_options
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="A feedback metric clients may send: NAME:boolean or NAME:float:higher|lower (repeatable).",
)
@click.option(
    "--bad-when",
    default=None,
    help="The feedback that says an answer was bad, e.g. 'thumbs_up=false' or 'rating<3' (a declared metric).",
)
@click.option("--clear", multiple=True, type=click.Choice(FIELDS), help="Return a field to its default.")
@reason_option
@actor_option
@key_option
@control_db_option
@json_option
def set_cmd(
    name: str,
    comparator: str | None,
    target: float | None,
    delta: float | None,
    audit_rate: float | None,
    golden_share: float | None,
    enabled: bool | None,
    release_rule: str | None,
    promote_evidence: str | None,
    canary_audit_rate: float | None,
    calibration: str | None,
    paired_gate: bool | None,
    min_certified: float | None,
    max_candidate_days: int | None,
    evidence_spend_usd: float | None,
    metrics: tuple[str, ...],
    bad_when: str | None,
    clear: tuple[str, ...],
    reason: str,
    actor: str,
    signing_key_file: str,
    control_db: str,
    as_json: bool,
) -> None:
    """Set TASK's policy (only the options given change); signed into a new release manifest."""
    from pydantic import ValidationError

    from ratchet_core.task_policy import TaskPolicy, parse_metric

    try:
        declared = dict(parse_metric(m) for m in metrics)
    except ValueError as exc:
        _fail(str(exc))
    given = {
        k: v
        for k, v in dict(
            comparator=comparator,
            target=target,
            delta=delta,
            audit_rate=audit_rate,
            golden_share=golden_share,
            enabled=enabled,
            release_rule=release_rule,
            promote_evidence=promote_evidence,
            canary_audit_rate=canary_audit_rate,
            calibration=calibration,
            paired_gate=paired_gate,
            min_certified=min_certified,
            max_candidate_days=max_candidate_days,
            evidence_spend_usd=evidence_spend_usd,
            bad_when=bad_when,
        ).items()
        if v is not None
    }
    if declared:
        given["metrics"] = declared
    if not given and not clear:
        _fail(
            "nothing to set: give at least one of --comparator/--target/--delta/--audit-rate/--golden-share/"
            "--enable/--disable/--release/--promote-evidence/--canary-audit-rate/--calibration/--paired-gate/"
            "--min-certified/--max-candidate-days/--evidence-spend-usd/--metric/--bad-when/--clear"
        )
    both = set(clear) & set(given)
    if both:
        _fail(f"--clear {sorted(both)[0]} and a value for it: choose one")

    def change(conn: Any, m: Any) -> dict:
        old = m.policies.get(name) or TaskPolicy()
        data = {**old.model_dump(), **given, **dict.fromkeys(clear)}
        if declared and "metrics" not in clear:  # --metric adds to the metrics the task declares
            data["metrics"] = {
                **(old.model_dump().get("metrics") or {}),
                **{k: v.model_dump() for k, v in declared.items()},
            }
        try:
            m.policies[name] = TaskPolicy.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"{'.'.join(map(str, first['loc'])) or name}: {first['msg']}") from None
        return {}

    shown = {
        k: (",".join(f"{n}:{s.type}:{s.direction}" for n, s in v.items()) if k == "metrics" else v)
        for k, v in given.items()
    }
    summary = ",".join(f"{k}={v}" for k, v in sorted(shown.items())) + "".join(f",{c}=default" for c in clear)
    _change(
        control_db, signing_key_file, "task", f"{name}:{summary.strip(',')}", reason, actor, change, as_json
    )


@task_group.command("show")
@click.argument("name", callback=names_checked("task"))
@key_option
@control_db_option
@json_option
def show_cmd(name: str, signing_key_file: str, control_db: str, as_json: bool) -> None:
    """TASK's effective policy and where each value comes from (task policy, built-in workload, global)."""
    m = _current(control_db, signing_key_file)
    [row] = _resolved_rows(m, [name])
    if as_json:
        echo_json(row)
        return
    for field in FIELDS:
        click.echo(f"{field:<17} {row[field]!s:<12} ({row['source'][field]})")
    click.echo(f"{'enabled':<17} {row['enabled']}")


@task_group.command("list")
@key_option
@control_db_option
@json_option
def list_cmd(signing_key_file: str, control_db: str, as_json: bool) -> None:
    """Every task with a signed policy, plus the built-in workloads, with their effective policies."""
    from ratchet_core.workloads import TASKS

    m = _current(control_db, signing_key_file)
    rows = _resolved_rows(m, sorted(set(m.policies) | set(TASKS)))
    if as_json:
        echo_json(rows)
        return
    click.echo(
        f"{'task':<20} {'comparator':<16} {'target':<7} {'delta':<6} {'audit':<6} {'golden':<7} {'enabled':<8}"
        f"{'release':<11} {'promote':<8} {'calibr.':<8} paired"
    )
    for r in rows:
        click.echo(
            f"{r['task']:<20} {r['comparator']:<16} {r['target']:<7g} {r['delta']:<6g} {r['audit_rate']:<6g} "
            f"{r['golden_share']:<7g} {r['enabled']!s:<8}{r['release_rule']:<11} {r['promote_evidence']:<8} "
            f"{r['calibration']:<8} {r['paired_gate']}"
        )


COMMANDS = [task_group]
