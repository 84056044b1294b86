"""`ratchet admin keys list|add|retire|rotate` as an operator runs them, and old evidence after a rotation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ratchet_assets.admin.cli import admin
from ratchet_cli.init_cmd import ensure_home
from ratchet_core import manifest as mf
from ratchet_core.control_db import make_engine
from ratchet_stats.cli import main as ratchet_stats_main
from ratchet_stats.keys import (
    generate_private_key,
    key_id,
    load_private_key_file,
    public_key_pem,
    save_private_key,
)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    for name in ("RATCHET_SIGNING_KEY", "RATCHET_CONTROL_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    info = ensure_home()
    assert info["trusted"] == "true"
    return Path(info["home"])


def _admin(args: list[str], ok: bool = True):
    result = CliRunner().invoke(admin, args, catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def _engine(home: Path):
    return make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")


def test_init_trusts_its_key_and_rotation_moves_signing_to_a_new_key(home, tmp_path, capsys) -> None:
    keys_dir = home / "keys"
    k1 = load_private_key_file(keys_dir / "signing.key")
    listed = json.loads(_admin(["keys", "list", "--json"]).output)
    assert listed["trusted"] == [key_id(k1)] and listed["history"][0]["actor"] == "ratchet init"
    _admin(["pin", "extract", "--reason", "before the rotation"])
    old_manifest = tmp_path / "m1.json"
    old_manifest.write_text(json.dumps(mf.envelope_of(_engine(home), 1)))

    too_short = _admin(["keys", "rotate", "--reason", "x"], ok=False)
    assert too_short.exit_code == 2 and "3-500 characters" in too_short.output
    out = json.loads(_admin(["keys", "rotate", "--reason", "yearly rotation", "--json"]).output)
    k2 = load_private_key_file(keys_dir / "signing.key")
    assert out["key_id"] == key_id(k2) != key_id(k1)
    assert [c["action"] for c in out["changes"]] == ["add", "retire"]
    assert [c["signed_by"] for c in out["changes"]] == [key_id(k1), key_id(k2)]
    retired = keys_dir / "retired" / f"{key_id(k1)}.key"
    assert key_id(load_private_key_file(retired)) == key_id(k1) and retired.stat().st_mode & 0o077 == 0
    assert (keys_dir / "signing.pub").read_text() == public_key_pem(k2)
    assert not (keys_dir / "signing.key.new").exists()
    # The current release is re-signed with the new key before the old one is retired: gateways never see a gap.
    assert out["manifest_sequence"] == 2
    resigned, rejected = mf.latest_verified(_engine(home), [k1.public_key()])
    assert (resigned.sequence, resigned.pins, rejected) == (2, ["extract"], 0)

    # From now on the default key (the new one) publishes; the retired key is refused, nothing written.
    _admin(["pin", "tools", "--reason", "after the rotation"])
    refused = _admin(
        ["unpin", "extract", "--reason", "with the old key", "--signing-key-file", str(retired)], ok=False
    )
    assert refused.exit_code == 2 and "not trusted" in refused.output
    latest, _ = mf.latest_verified(_engine(home), [k1.public_key()])  # a gateway still holding the old pub
    assert latest.sequence == 3 and latest.pins == ["extract", "tools"]

    # Evidence signed before the rotation verifies with the keyring (every key ever trusted).
    keyring = keys_dir / "keyring.pem"
    assert keyring.read_text().count("BEGIN PUBLIC KEY") == 2
    assert ratchet_stats_main(["verify", "manifest", str(old_manifest), "--key-file", str(keyring)]) == 0
    assert ratchet_stats_main(["verify", "manifest", str(old_manifest), "--key", str(keyring)]) == 0
    assert (
        ratchet_stats_main(
            ["verify", "manifest", str(old_manifest), "--key-file", str(keys_dir / "signing.pub")]
        )
        == 1
    )
    capsys.readouterr()

    # The signed key history travels with the auditors' export; each change verifies with the key before it.
    from ratchet_stats.dsse import verify_statement

    export = tmp_path / "export.ndjson"
    _admin(["export", "--out", str(export)])
    changes = [json.loads(line) for line in export.read_text().splitlines() if '"key_change"' in line]
    assert [(c["action"], c["signed_by"]) for c in changes] == [
        ("add", key_id(k1)),
        ("add", key_id(k1)),
        ("retire", key_id(k2)),
    ]
    signers = {key_id(k1): k1.public_key(), key_id(k2): k2.public_key()}
    for c in changes:
        verify_statement(c["envelope"], [signers[c["signed_by"]]], "https://ratchet.dev/key-change/v1")


def test_add_and_retire_need_a_trusted_signer_and_name_keys_unambiguously(home, tmp_path) -> None:
    k3 = generate_private_key()
    pub = tmp_path / "k3.pub"
    pub.write_text(public_key_pem(k3))
    _admin(["keys", "add", str(pub), "--reason", "second signer for the CI job"])
    stranger = generate_private_key()
    save_private_key(stranger, tmp_path / "stranger.key")
    denied = _admin(
        ["keys", "add", str(pub), "--reason", "again", "--signing-key-file", str(tmp_path / "stranger.key")],
        ok=False,
    )
    assert (
        denied.exit_code == 2
        and "not trusted here" in denied.output
        and "nothing was changed" in denied.output
    )
    ambiguous = _admin(["keys", "retire", "abc", "--reason", "too short an id"], ok=False)
    assert ambiguous.exit_code == 2 and "no trusted key" in ambiguous.output
    _admin(["keys", "retire", key_id(k3)[:12], "--reason", "the CI job moved"])
    listed = json.loads(
        _admin(["keys", "list", "--json", "--keyring-out", str(tmp_path / "ring.pem")]).output
    )
    assert key_id(k3) not in listed["trusted"] and key_id(k3) in listed["ever_trusted"]
    assert [h["action"] for h in listed["history"]] == ["add", "add", "retire"]
    assert all(h["verified"] for h in listed["history"])
    assert (tmp_path / "ring.pem").read_text().count("BEGIN PUBLIC KEY") == 2


def test_rotate_asks_for_out_when_the_key_comes_from_the_environment(home, tmp_path, monkeypatch) -> None:
    env_key = tmp_path / "env.key"
    env_key.write_bytes((home / "keys" / "signing.key").read_bytes())
    monkeypatch.setenv("RATCHET_SIGNING_KEY", f"@{env_key}")
    need_out = _admin(["keys", "rotate", "--reason", "move to a vault file"], ok=False)
    assert need_out.exit_code == 2 and "--out" in need_out.output
    new_file = tmp_path / "vault" / "signing.key"
    _admin(["keys", "rotate", "--reason", "move to a vault file", "--out", str(new_file)])
    monkeypatch.setenv("RATCHET_SIGNING_KEY", f"@{new_file}")
    _admin(["pin", "extract", "--reason", "signed by the vault key"])
    monkeypatch.setenv("RATCHET_SIGNING_KEY", f"@{env_key}")
    assert _admin(["pin", "tools", "--reason", "signed by the old key"], ok=False).exit_code == 2
