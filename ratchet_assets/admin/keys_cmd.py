"""`ratchet admin keys list|add|retire|rotate`: the keys gateways trust, as a signed history in the control DB.

Every change is signed by a key trusted at that moment (ARCHITECTURE.md, "Evidence formats") and recorded with
who and why (``ratchet_core.key_history``); gateways follow it on their next manifest poll. ``rotate`` makes a
new signing key, trusts it (signed by the current key), retires the current key (signed by the new one) and
writes the new key where the control plane reads it, so everything is signed with the new key from then on.
Documents signed before stay verifiable: ``list --keyring-out FILE`` writes every key ever trusted, for
``ratchet verify ... --key-file FILE``.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

import click

from ratchet_assets.admin.common import control_db_option, echo_json, engine_for, json_option, reason_option
from ratchet_assets.cli_names import actor_checked

actor_option = click.option(
    "--actor", default="", callback=actor_checked, help="Who is acting (default: the OS user name)."
)
signing_key_option = click.option(
    "--signing-key-file",
    default="",
    help="Ed25519 private key file that signs the change (default: RATCHET_SIGNING_KEY or "
    "$RATCHET_HOME/keys/signing.key); it must be trusted now.",
)


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _signer(path: str) -> Any:
    from ratchet_core.keys import KeyTrustError, signing_key
    from ratchet_core.settings import load_settings

    try:
        return signing_key(load_settings(), path or None)
    except KeyTrustError as exc:
        _fail(str(exc))


def _state(engine: Any) -> Any:
    from ratchet_core.control_db import ensure_schema
    from ratchet_core.key_history import key_state

    ensure_schema(engine)
    return key_state(engine)


@click.group("keys")
def keys() -> None:
    """The keys gateways trust: the signed history, add, retire, rotate."""


@keys.command("list")
@click.option(
    "--keyring-out",
    default="",
    help="Also write every key ever trusted (PEM, with comments) to this file, for `ratchet verify --key-file`.",
)
@control_db_option
@json_option
def list_cmd(keyring_out: str, control_db: str, as_json: bool) -> None:
    """List the keys trusted now and the signed history of changes (oldest first)."""
    from ratchet_core.key_history import keyring_text

    state = _state(engine_for(control_db))
    if keyring_out:
        Path(keyring_out).write_text(keyring_text(list(state.ever.values()), state.changes))
    data = {
        "trusted": sorted(state.trusted),
        "ever_trusted": sorted(state.ever),
        "history": [c.to_dict() for c in state.changes],
    }
    if as_json:
        echo_json(data)
        return
    if not state.changes:
        click.echo(
            "no key history yet: the first key to publish a manifest (or `ratchet init`) becomes trusted"
        )
    else:
        click.echo("trusted now: " + ", ".join(sorted(state.trusted)))
        for c in state.changes:
            mark = "" if c.verified else f"  [NOT APPLIED: {c.error}]"
            click.echo(
                f"{c.sequence:>4} {c.at}  {c.action:<6} {c.key_id[:16]}…  signed by {c.signed_by[:16]}…  "
                f"{c.actor}: {c.reason}{mark}"
            )
    if keyring_out:
        click.echo(f"wrote {len(state.ever)} key(s) to {keyring_out}")


def _load_public(text_or_path: str) -> Any:
    from ratchet_stats.keys import load_private_key, load_public_key

    path = Path(text_or_path)
    text = path.read_text() if len(text_or_path) < 4096 and path.is_file() else text_or_path
    try:
        if "PRIVATE KEY-----" in text:
            return load_private_key(text).public_key()
        return load_public_key(text)
    except ValueError as exc:
        _fail(str(exc))


def _in_transaction(control_db: str, action: str, target: str, reason: str, actor: str, work: Any) -> Any:
    """Run ``work(conn, actor)`` -> (changes, manifest or None) in one control-DB transaction with its audit row."""
    from ratchet_assets.release import registry
    from ratchet_core.keys import KeyTrustError
    from ratchet_core.manifest import ManifestError

    engine = engine_for(control_db)
    _state(engine)
    actor = actor or getpass.getuser()
    try:
        with engine.begin() as conn:
            changes, manifest = work(conn, f"admin:{actor}")
            registry.append_audit(
                conn,
                actor,
                f"keys.{action}",
                target,
                reason,
                {"key_changes": [c.sequence for c in changes]},
                manifest.sequence if manifest is not None else None,
            )
    except (KeyTrustError, ManifestError) as exc:
        _fail(f"{exc}; nothing was changed")
    return changes, manifest


def _report(changes: list[Any], manifest: Any, as_json: bool, extra: dict[str, Any] | None = None) -> None:
    resigned = manifest.sequence if manifest is not None else None
    if as_json:
        echo_json({"changes": [c.to_dict() for c in changes], "manifest_sequence": resigned, **(extra or {})})
        return
    for c in changes:
        click.echo(f"key change {c.sequence}: {c.action} {c.key_id[:16]}… (signed by {c.signed_by[:16]}…)")
    if resigned is not None:
        click.echo(f"published manifest {resigned}: the current release, signed by a key that stays trusted")


@keys.command("add")
@click.argument("public_key")
@reason_option("Why this key is trusted (3-500 characters); signed into the key history.")
@actor_option
@signing_key_option
@control_db_option
@json_option
def add_cmd(
    public_key: str, reason: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
) -> None:
    """Trust PUBLIC_KEY (a file, PEM or base64) for signing manifests; signed by a key trusted now."""
    from ratchet_core.key_history import append_change
    from ratchet_stats.keys import key_id

    public, signer = _load_public(public_key), _signer(signing_key_file)
    changes, manifest = _in_transaction(
        control_db,
        "add",
        key_id(public),
        reason,
        actor,
        lambda conn, who: ([append_change(conn, signer, "add", public, who, reason)], None),
    )
    _report(changes, manifest, as_json)


@keys.command("retire")
@click.argument("key_id")
@reason_option("Why this key is no longer trusted (3-500 characters); signed into the key history.")
@actor_option
@signing_key_option
@control_db_option
@json_option
def retire_cmd(
    key_id: str, reason: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
) -> None:
    """Stop trusting KEY_ID (its hex id, or a unique prefix of at least 8 characters) for new manifests."""
    state = _state(engine_for(control_db))
    matches = [k for kid, k in state.trusted.items() if len(key_id) >= 8 and kid.startswith(key_id.lower())]
    if len(matches) != 1:
        _fail(
            f"{key_id!r} names {'no' if not matches else 'more than one'} trusted key; "
            "see `ratchet admin keys list`"
        )
    from ratchet_assets.release.key_rotation import retire
    from ratchet_stats.keys import key_id as kid

    signer = _signer(signing_key_file)
    changes, manifest = _in_transaction(
        control_db,
        "retire",
        kid(matches[0]),
        reason,
        actor,
        lambda conn, who: retire(conn, signer, matches[0], who, reason),
    )
    _report(changes, manifest, as_json)


@keys.command("rotate")
@reason_option("Why the key changes (3-500 characters); signed into the key history.")
@click.option(
    "--out",
    default="",
    help="Where to write the new private key. Default: $RATCHET_HOME/keys/signing.key (the old key moves to "
    "keys/retired/); required when the key comes from RATCHET_SIGNING_KEY or --signing-key-file.",
)
@actor_option
@signing_key_option
@control_db_option
@json_option
def rotate_cmd(
    reason: str, out: str, actor: str, signing_key_file: str, control_db: str, as_json: bool
) -> None:
    """Make a new signing key, trust it, retire the current one; sign with the new key from then on."""
    from ratchet_assets.release.key_rotation import rotate
    from ratchet_core.key_history import keyring_text
    from ratchet_core.keys import keyring_path, public_key_path, signing_key_source
    from ratchet_core.settings import load_settings
    from ratchet_stats.keys import generate_private_key, key_id, public_key_pem, save_private_key

    settings = load_settings()
    source = signing_key_source(settings, signing_key_file or None)
    default_file = not signing_key_file and source.path == settings.signing_key_path
    if not out and not default_file:
        _fail(
            f"the signing key comes from {source.describe()}: pass --out FILE for the new key, then point "
            "RATCHET_SIGNING_KEY=@FILE (or --signing-key-file) at it"
        )
    if out and Path(out).exists():
        _fail(f"{out} exists: choose a new file for the new key")
    old = _signer(signing_key_file)
    new = generate_private_key()
    target = Path(out) if out else settings.signing_key_path
    # The new key is on disk before it is trusted: a crash in between leaves an untrusted spare file, never a
    # trusted key nobody holds.
    staged = target.with_name(target.name + ".new") if target.exists() else target
    save_private_key(new, staged)
    try:
        changes, manifest = _in_transaction(
            control_db,
            "rotate",
            f"{key_id(old)} -> {key_id(new)}",
            reason,
            actor,
            lambda conn, who: rotate(conn, old, new, who, reason),
        )
    except SystemExit:
        staged.unlink(missing_ok=True)  # nothing was trusted: no spare key file either
        raise
    if staged != target:
        retired = target.parent / "retired" / f"{key_id(old)}.key"
        retired.parent.mkdir(parents=True, exist_ok=True)
        target.replace(retired)
        retired.chmod(0o600)
        staged.replace(target)
    written = {"private_key": str(target), "key_id": key_id(new)}
    if default_file:
        public_key_path(settings).write_text(public_key_pem(new))
        state = _state(engine_for(control_db))
        keyring_path(settings).write_text(keyring_text(list(state.ever.values()), state.changes))
        written.update(public_key=str(public_key_path(settings)), keyring=str(keyring_path(settings)))
    if as_json:
        _report(changes, manifest, True, written)
        return
    _report(changes, manifest, False)
    click.echo(
        f"new signing key {key_id(new)[:16]}… at {target}; the control plane signs with it from now on"
    )
    if not default_file:
        click.echo(f"point RATCHET_SIGNING_KEY=@{target.resolve()} (or --signing-key-file) at it")
    if "keyring" in written:
        click.echo(f"public key {written['public_key']}; every key ever trusted in {written['keyring']}")


COMMANDS = [keys]
