"""`ratchet admin versions|promote|rollback|retire|pin|unpin|flag|audit-log|export`: operate releases by hand.

Every change needs ``--reason`` (3-500 characters), is published as a new signed release manifest (the gateways
follow it within seconds) and appended to the release audit log, both in one control-DB transaction. The signing
key is the control plane's (``RATCHET_SIGNING_KEY`` or ``$RATCHET_HOME/keys/signing.key``); the admin CLI never
creates one, since gateways would not trust manifests signed by a key they do not hold.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option
from ratchet_assets.admin.common import reason_option as common_reason_option
from ratchet_assets.cli_names import actor_checked, names_checked
from ratchet_assets.release.registry import VERSION_STATUSES
from ratchet_core.control_db import ensure_schema

FLAG_NAMES = ("student_disabled", "releases_frozen", "training_paused", "audit_rate")
TARGETS = ("shadow", "canary-5", "canary-25", "canary-50", "live")

reason_option = common_reason_option("Why (3-500 characters); signed into the manifest and the audit log.")
actor_option = click.option(
    "--actor", default="", callback=actor_checked, help="Who is acting (default: the OS user name)."
)
key_option = click.option(
    "--signing-key-file",
    default="",
    help="Ed25519 private key file (default: RATCHET_SIGNING_KEY or $RATCHET_HOME/keys/signing.key).",
)


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _private_key(path: str) -> Any:
    from ratchet_core.keys import KeyTrustError, signing_key
    from ratchet_core.settings import load_settings

    try:
        return signing_key(load_settings(), path or None)
    except KeyTrustError as exc:
        _fail(str(exc))


def _change(
    control_db: str,
    key_file: str,
    action: str,
    target: str,
    reason: str,
    actor: str,
    change: Callable[[Any, Any], dict[str, str] | None],
    as_json: bool,
    details: dict[str, Any] | None = None,
) -> None:
    """Publish one change: ``change(conn, draft_manifest)`` edits the draft and returns registry updates;
    `details` (filled in by `change`, e.g. ``forced``) go into the audit-log row."""
    from ratchet_assets.release import registry
    from ratchet_core import manifest as mf

    engine = engine_for(control_db)
    key = _private_key(key_file)
    ensure_schema(engine)
    actor = actor or getpass.getuser()
    statuses: dict[str, Any] = {}
    try:
        with engine.begin() as conn:

            def apply(m: Any) -> None:
                statuses.clear()
                statuses.update(change(conn, m) or {})

            new = mf.publish_in(conn, key, apply, reason, f"admin:{actor}")
            for (version, task), (status, stage) in statuses.items():
                registry.set_status(conn, version, task, status, stage, f"{action} by {actor}: {reason}")
            registry.append_audit(
                conn,
                actor,
                action,
                target,
                reason.strip(),
                {"statuses": {f"{v}|{t}": s for (v, t), (s, _) in statuses.items()}, **(details or {})},
                new.sequence,
            )
    except (mf.ManifestError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        echo_json(
            {"action": action, "target": target, "sequence": new.sequence, "manifest": new.to_predicate()}
        )
    else:
        click.echo(f"published manifest {new.sequence}: {action} {target}")


def _current_version_row(conn: Any, version: str, task: str) -> dict[str, Any] | None:
    from ratchet_assets.release import registry

    return registry.get_version(conn, version, task)


@click.command("versions")
@click.option(
    "--status",
    type=click.Choice(VERSION_STATUSES),
    default=None,
    help="Only versions with this status.",
)
@click.option(
    "--artifacts",
    default="",
    help="Artifacts folder with certificates/ (default: RATCHET_ARTIFACTS or $RATCHET_HOME/artifacts).",
)
@control_db_option
@json_option
def versions_cmd(status: str | None, artifacts: str, control_db: str, as_json: bool) -> None:
    """List adapter versions per task with their status and what the manifest serves.

    Every verified certificate under the artifacts is listed, also one the release sensor has not seen yet
    (e.g. the last night's, when the sensor was stopped right after it): it is registered first."""
    from ratchet_assets.release import registry
    from ratchet_core.key_history import keys_ever_trusted
    from ratchet_core.keys import root_public_keys
    from ratchet_core.settings import load_settings

    engine = engine_for(control_db)
    settings = load_settings()
    folder = Path(artifacts) if artifacts else Path(settings.artifacts_root)
    ensure_schema(engine)
    keys = keys_ever_trusted(engine, roots=root_public_keys(settings) or None)
    for note in registry.register_certificates(engine, folder, keys):
        if "not registered" in note:
            click.echo(f"warning: {note}", err=True)
    rows = registry.list_versions(engine, status=status)
    certs: dict[str, list[dict]] = {}
    for c in registry.certificates_of(engine):
        certs.setdefault(c["version"], []).append(
            {k: c[k] for k in ("day", "certificate_path", "digest", "previous_digest", "certified_tasks")}
        )
    if as_json:
        echo_json([{**r, "certificates": certs.get(r["version"], [])} for r in rows])
        return
    if not rows:
        if status and registry.list_versions(engine):
            click.echo(f"no version is {status} (`ratchet admin versions` lists them all)")
        else:
            click.echo("no versions yet: a passing evaluation certificate registers one")
        return
    shown: set[str] = set()
    for r in rows:
        thr = "-" if r["threshold"] is None else f"{r['threshold']:.3f}"
        click.echo(
            f"{r['version']:<24} {r['task']:<16} {r['status']:<12} stage={r['stage']:<8} threshold={thr}"
        )
        if r["version"] in shown:
            continue
        shown.add(r["version"])
        for c in certs.get(r["version"], []):  # a version's certificates, each chained to the one before
            chain = f"chained to {c['previous_digest'][:12]}" if c["previous_digest"] else "first"
            click.echo(
                f"  certificate {c['day']} {c['certificate_path']} sha256 {c['digest'][:12]} ({chain})"
            )


@click.command("promote")
@click.argument("version", callback=names_checked("version"))
@click.option("--task", required=True, callback=names_checked("task"), help="Task to promote the version on.")
@click.option(
    "--to", "to", type=click.Choice(TARGETS), default=None, help="Target stage (default: next step)."
)
@click.option(
    "--force",
    is_flag=True,
    help="Promote without a verified certificate for the task at the release target, a rejected/rolled-back "
    "version, or while frozen; recorded as forced in the manifest and the audit log.",
)
@click.option(
    "--artifacts",
    default="",
    help="Artifacts folder with certificates/ (default: RATCHET_ARTIFACTS or $RATCHET_HOME/artifacts).",
)
@reason_option
@actor_option
@key_option
@control_db_option
@json_option
def promote_cmd(
    version: str,
    task: str,
    to: str | None,
    force: bool,
    artifacts: str,
    reason: str,
    actor: str,
    signing_key_file: str,
    control_db: str,
    as_json: bool,
) -> None:
    """Move VERSION on --task one step along shadow -> canary 5/25/50% -> live (or straight --to a stage).

    VERSION needs a verified evaluation certificate that certifies --task at the release target; the release
    carries the certificate's calibrated confidence threshold. Without one, nothing is published unless --force.
    """
    from ratchet_assets.release.decision import LIVE, ReleaseRule, step_of
    from ratchet_assets.release.guard import NotCertified, certified_task
    from ratchet_assets.release.registry import certificate_file
    from ratchet_assets.release.tick import release_for
    from ratchet_core.key_history import keys_ever_trusted
    from ratchet_core.layout import ArtifactLayout
    from ratchet_core.manifest import ManifestError
    from ratchet_core.settings import load_settings

    folder = Path(artifacts) if artifacts else Path(load_settings().artifacts_root)
    signer = _private_key(signing_key_file).public_key()
    details: dict[str, Any] = {}

    def change(conn: Any, m: Any) -> dict:
        row = _current_version_row(conn, version, task)
        problems = []
        task_rule = ReleaseRule().for_task(task, m)  # the task's own target and calibration (its policy)
        if row and row["status"] in ("rejected", "rolled_back", "retired"):
            problems.append(f"{version} is {row['status']} on {task}")
        try:
            cert = certified_task(
                certificate_file(folder, row, version),
                version,
                task,
                keys_ever_trusted(conn, roots=[signer]),  # a certificate signed before a key rotation counts
                task_rule.target,
                task_rule.calibration,
            )
        except NotCertified as exc:
            cert = None
            problems.append(str(exc))
        if m.flags.releases_frozen:
            problems.append(
                "releases are frozen (unfreeze with `ratchet admin flag releases_frozen false --reason ...`)"
            )
        if problems and not force:
            raise ManifestError(
                f"refusing to promote {version} on {task}, nothing was published: {'; '.join(problems)}. "
                'An operator may override with --force --reason "..." (recorded as forced)'
            )
        cur = m.task(task)
        now = step_of(cur) if cur.version == version else None
        if to:
            step = TARGETS.index(to)
        elif now is None:
            step = 0
        elif now >= LIVE:
            raise ManifestError(f"{version} is already live on {task}")
        else:
            step = now + 1
        if cert is not None:
            threshold = cert.threshold
        else:
            threshold = row["threshold"] if row else (cur.threshold if cur.version == version else None)
        forced = bool(problems)  # only --force gets here with problems: it overrode them
        new = release_for(step, version, threshold, cur, forced=forced)
        m.tasks[task] = new
        details.clear()
        details.update(
            forced=forced,
            overridden=problems,
            certificate=ArtifactLayout(folder).name_of(cert.certificate) if cert else None,
            threshold=threshold,
        )
        out = {(version, task): ("live" if new.stage == "live" else new.stage, new.stage)}
        if new.stage == "live" and new.previous_live and new.previous_live != version:
            out[(new.previous_live, task)] = ("retired", "teacher")
        return out

    _change(
        control_db, signing_key_file, "promote", f"{version}/{task}", reason, actor, change, as_json, details
    )


@click.command("rollback")
@click.option(
    "--task",
    required=True,
    callback=names_checked("task"),
    help="Task to roll back to its previous live version (or the teacher).",
)
@reason_option
@actor_option
@key_option
@control_db_option
@json_option
def rollback_cmd(
    task: str, reason: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
) -> None:
    """Roll --task back to its previous live version, or to the teacher when there is none."""
    from ratchet_assets.release.tick import rolled_back
    from ratchet_core.manifest import ManifestError

    def change(conn: Any, m: Any) -> dict:
        cur = m.task(task)
        if cur.stage == "teacher":
            raise ManifestError(f"{task} is already served by the teacher; nothing to roll back")
        m.tasks[task] = back = rolled_back(cur)
        out = {(cur.version, task): ("rolled_back", "teacher")}
        if back.stage == "live":
            out[(back.version, task)] = ("live", "live")
        return out

    _change(control_db, signing_key_file, "rollback", task, reason, actor, change, as_json)


@click.command("retire")
@click.argument("version", callback=names_checked("version"))
@click.option("--task", required=True, callback=names_checked("task"), help="Task to retire the version on.")
@reason_option
@actor_option
@key_option
@control_db_option
@json_option
def retire_cmd(
    version: str, task: str, reason: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
) -> None:
    """Take VERSION out of service on --task for good (it falls back like a rollback if it is serving)."""
    from ratchet_assets.release.tick import rolled_back
    from ratchet_core.manifest import TaskRelease

    def change(conn: Any, m: Any) -> dict:
        cur = m.task(task)
        out = {(version, task): ("retired", "teacher")}
        if cur.version == version and cur.stage != "teacher":
            m.tasks[task] = back = rolled_back(cur)
            if back.stage == "live":
                out[(back.version, task)] = ("live", "live")
        elif cur.previous_live == version:
            m.tasks[task] = TaskRelease(
                **{**cur.model_dump(), "previous_live": None, "previous_threshold": None}
            )
        return out

    _change(control_db, signing_key_file, "retire", f"{version}/{task}", reason, actor, change, as_json)


def _pin_cmd(pin: bool) -> click.Command:
    @click.command("pin" if pin else "unpin")
    @click.argument("task", callback=names_checked("task"))
    @reason_option
    @actor_option
    @key_option
    @control_db_option
    @json_option
    def cmd(
        task: str, reason: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
    ) -> None:
        def change(conn: Any, m: Any) -> dict:
            pins = set(m.pins)
            pins.add(task) if pin else pins.discard(task)
            m.pins = sorted(pins)
            return {}

        _change(control_db, signing_key_file, "pin" if pin else "unpin", task, reason, actor, change, as_json)

    cmd.help = (
        "Pin TASK to the teacher (the student never answers it)."
        if pin
        else "Unpin TASK (its release applies again)."
    )
    return cmd


@click.command("flag")
@click.argument("name", type=click.Choice(FLAG_NAMES))
@click.argument("value")
@reason_option
@actor_option
@key_option
@control_db_option
@json_option
def flag_cmd(
    name: str, value: str, reason: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
) -> None:
    """Set a flag: student_disabled|releases_frozen|training_paused true/false, or audit_rate 0..1."""
    if name == "audit_rate":
        try:
            parsed: Any = float(value)
        except ValueError:
            _fail(f"audit_rate takes a number between 0 and 1, e.g. 0.05 (got {value!r})")
        if not 0.0 <= parsed <= 1.0:
            _fail(f"audit_rate takes a number between 0 and 1, e.g. 0.05 (got {value!r})")
    else:
        lowered = value.strip().lower()
        if lowered not in ("true", "false", "on", "off", "1", "0", "yes", "no"):
            _fail(f"{name} takes true or false (got {value!r})")
        parsed = lowered in ("true", "on", "1", "yes")

    def change(conn: Any, m: Any) -> dict:
        setattr(m.flags, name, parsed)
        return {}

    _change(control_db, signing_key_file, "flag", f"{name}={parsed}", reason, actor, change, as_json)


@click.command("audit-log")
@click.option("--limit", default=100, show_default=True, help="Newest first, at most this many.")
@control_db_option
@json_option
def audit_log_cmd(limit: int, control_db: str, as_json: bool) -> None:
    """Every release change (admin and sensor) and every gateway safety event, newest first."""
    from ratchet_assets.release import registry

    rows = registry.read_audit_log(engine_for(control_db), limit=limit)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no release changes yet")
    for r in rows:
        seq = f"manifest {r['manifest_sequence']}" if r["manifest_sequence"] else r["source"]
        click.echo(f"{r['at']}  {r['actor']:<16} {r['action']:<9} {r['target']:<28} {seq:<12} {r['reason']}")


@click.command("export")
@click.option("--out", "out", default="-", help="NDJSON file to write (default: stdout).")
@key_option
@control_db_option
def export_cmd(out: str, signing_key_file: str, control_db: str) -> None:
    """Export manifests (with verification status), versions, the audit log and the signed key history as NDJSON,
    one object a line. Each manifest and key change carries its signed DSSE envelope (``envelope``), the file
    ``ratchet verify manifest`` checks offline."""
    from ratchet_assets.release import registry
    from ratchet_core import manifest as mf
    from ratchet_core.key_history import signed_history

    engine = engine_for(control_db)
    ensure_schema(engine)
    pub = _private_key(signing_key_file).public_key()
    lines = [
        {"type": "manifest", **h, "envelope": mf.envelope_of(engine, h["sequence"])}
        for h in mf.history(engine, pub)
    ]
    lines += [{"type": "version", **v} for v in registry.list_versions(engine)]
    lines += [{"type": "audit", **a} for a in reversed(registry.read_audit_log(engine, limit=10**9))]
    lines += [{"type": "key_change", **c} for c in signed_history(engine)]
    text = "".join(json.dumps(line, sort_keys=True, default=str) + "\n" for line in lines)
    if out == "-":
        click.echo(text, nl=False)
    else:
        Path(out).write_text(text)
        click.echo(f"wrote {len(lines)} records to {out}")


COMMANDS = [
    versions_cmd,
    promote_cmd,
    rollback_cmd,
    retire_cmd,
    _pin_cmd(True),
    _pin_cmd(False),
    flag_cmd,
    audit_log_cmd,
    export_cmd,
]
