"""Key resolution in one place, and the control DB's signed history of trusted keys."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from ratchet_assets.release import key_rotation
from ratchet_core import key_history as KH
from ratchet_core import keys as K
from ratchet_core import manifest as mf
from ratchet_core.control_db import ensure_schema, make_engine, release_manifests, trusted_keys
from ratchet_core.settings import load_settings
from ratchet_stats.keys import (
    generate_private_key,
    key_id,
    load_public_key,
    private_key_b64,
    public_key_pem,
    save_private_key,
)
from tests.evidence.manifests import write_signed_manifest


@pytest.fixture
def engine(tmp_path):
    e = make_engine(f"sqlite:///{(tmp_path / 'control.db').as_posix()}")
    ensure_schema(e)
    return e


def _settings(tmp_path, monkeypatch, **env):
    for name in ("RATCHET_SIGNING_KEY", "RATCHET_CONTROL_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def _count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def test_signing_key_resolution_order(tmp_path, monkeypatch) -> None:
    a, b, c = generate_private_key(), generate_private_key(), generate_private_key()
    s = _settings(tmp_path, monkeypatch)
    with pytest.raises(K.KeyTrustError, match="ratchet init"):
        K.signing_key(s)
    created = K.signing_key(s, create=True)  # the embedded default makes the home key file
    assert (s.home / "keys" / "signing.key").stat().st_mode & 0o077 == 0
    assert key_id(K.signing_key(s)) == key_id(created)
    save_private_key(a, tmp_path / "a.key")
    save_private_key(b, tmp_path / "b.key")
    s = _settings(tmp_path, monkeypatch, RATCHET_SIGNING_KEY=f"@{tmp_path / 'a.key'}")
    assert key_id(K.signing_key(s)) == key_id(a)  # @FILE beats the home file
    assert key_id(K.signing_key(s, tmp_path / "b.key")) == key_id(b)  # an explicit file beats both
    s = _settings(tmp_path, monkeypatch, RATCHET_SIGNING_KEY=private_key_b64(c))
    assert key_id(K.signing_key(s)) == key_id(c)
    assert K.signing_key_source(s).describe() == "RATCHET_SIGNING_KEY"
    s = _settings(tmp_path, monkeypatch, RATCHET_SIGNING_KEY="not a key")
    with pytest.raises(K.KeyTrustError, match="RATCHET_SIGNING_KEY") as err:
        K.signing_key(s)
    assert "not a key" not in str(err.value)  # never echo key material


def test_a_key_the_embedded_default_creates_gets_its_public_half_beside_it(tmp_path, monkeypatch) -> None:
    """A night on a fresh home creates signing.key; signing.pub (what `ratchet init` writes, an auditor's `--key`)
    is written beside it, never over one that exists, and never beside a key file named elsewhere."""
    s = _settings(tmp_path, monkeypatch)
    created = K.signing_key(s, create=True)
    assert [key_id(k) for k in K.root_public_keys(s)] == [key_id(created)]
    assert key_id(load_public_key(K.public_key_path(s).read_text())) == key_id(created)
    elsewhere = _settings(tmp_path / "other", monkeypatch)
    K.signing_key(elsewhere, tmp_path / "other-keys" / "named.key", create=True)
    assert (
        not (tmp_path / "other-keys" / "signing.pub").exists() and not K.public_key_path(elsewhere).exists()
    )
    kept = generate_private_key()
    third = _settings(tmp_path / "third", monkeypatch)
    K.public_key_path(third).parent.mkdir(parents=True)
    K.public_key_path(third).write_text(public_key_pem(kept.public_key()))
    K.signing_key(third, create=True)
    assert key_id(load_public_key(K.public_key_path(third).read_text())) == key_id(kept)


def test_root_public_keys_prefer_the_public_key_file(tmp_path, monkeypatch) -> None:
    s = _settings(tmp_path, monkeypatch)
    assert K.root_public_keys(s) == []
    private = K.signing_key(s, create=True)
    assert [key_id(k) for k in K.root_public_keys(s)] == [key_id(private)]
    other = generate_private_key()
    K.public_key_path(s).write_text(public_key_pem(other))
    assert [key_id(k) for k in K.root_public_keys(s)] == [key_id(other)]


def _publish(engine, key, stage="shadow", reason="a change for the test"):
    return mf.publish(
        engine, key, lambda m: m.tasks.update(t=mf.TaskRelease(stage=stage, version="v1")), reason, "t"
    )


def test_the_first_publisher_is_the_anchor_and_any_other_key_fails_before_writing(engine) -> None:
    k1, k2 = generate_private_key(), generate_private_key()
    _publish(engine, k1)
    state = KH.key_state(engine)
    assert list(state.trusted) == [key_id(k1)] and state.changes[0].action == "add"
    manifests, history = _count(engine, release_manifests), _count(engine, trusted_keys)
    with pytest.raises(mf.ManifestError, match="not trusted by the gateways") as err:
        _publish(engine, k2, stage="live")
    assert "nothing was published" in str(err.value) and key_id(k2)[:16] in str(err.value)
    assert (_count(engine, release_manifests), _count(engine, trusted_keys)) == (manifests, history)


def test_a_database_from_before_trusted_keys_anchors_only_the_key_that_signed_its_manifests(engine) -> None:
    k1, k2 = generate_private_key(), generate_private_key()
    write_signed_manifest(engine, k1, tasks={"t": {"stage": "shadow", "version": "v1"}})  # no key history
    with pytest.raises(mf.ManifestError, match="signed none of the release manifests"):
        _publish(engine, k2)
    assert _count(engine, trusted_keys) == 0
    _publish(engine, k1)
    assert list(KH.key_state(engine).trusted) == [key_id(k1)]


def _rotate(engine, old, new, reason="scheduled rotation"):
    with engine.begin() as conn:
        return key_rotation.rotate(conn, old, new, "ops", reason)


def test_rotation_gateways_follow_it_and_the_old_key_can_no_longer_publish(engine) -> None:
    k1, k2 = generate_private_key(), generate_private_key()
    _publish(engine, k1)
    changes, resigned = _rotate(engine, k1, k2)
    assert [c.action for c in changes] == ["add", "retire"] and resigned.sequence == 2
    assert (
        mf.latest_verified(engine, [k1.public_key()])[0].task("t").stage == "shadow"
    )  # carried over, no gap
    with pytest.raises(mf.ManifestError, match="not trusted"):
        _publish(engine, k1, stage="live")
    new = _publish(engine, k2, stage="canary")
    # A gateway configured with the old key (its signing.pub) follows the signed history to the new key, and so
    # does one configured with the new key; neither accepts a manifest signed with the retired key.
    for roots in ([k1.public_key()], [k2.public_key()]):
        latest, _ = mf.latest_verified(engine, roots)
        assert latest.sequence == new.sequence and latest.task("t").stage == "canary"
        assert [key_id(k) for k in KH.trusted_keys(engine, roots)] == [key_id(k2)]
    write_signed_manifest(engine, k1, tasks={"t": {"stage": "live", "version": "v9"}})
    latest, rejected = mf.latest_verified(engine, [k1.public_key()])
    assert latest.sequence == new.sequence and rejected == 1
    # Old documents still verify with the history: both keys were trusted once.
    assert {key_id(k) for k in KH.keys_ever_trusted(engine)} == {key_id(k1), key_id(k2)}
    assert all(h["verified"] for h in mf.history(engine, k2.public_key()) if h["sequence"] < 4)


def test_forged_and_tampered_history_rows_never_widen_trust(engine) -> None:
    k1, evil = generate_private_key(), generate_private_key()
    _publish(engine, k1)
    real = KH.key_state(engine)
    fake = KH.KeyState({key_id(evil): evil.public_key()}, {}, real.changes)  # pretend evil were trusted
    with engine.begin() as conn:  # an attacker with DB access but no trusted key signs an addition
        KH.append_change(
            conn, evil, "add", generate_private_key().public_key(), "mallory", "trust me", state=fake
        )
    state = KH.key_state(engine)
    assert list(state.trusted) == [key_id(k1)] and not state.changes[-1].verified
    assert "no signature is by a trusted key" in state.changes[-1].error
    write_signed_manifest(engine, evil, tasks={"t": {"stage": "live", "version": "evil"}})
    assert mf.latest_verified(engine, [k1.public_key()])[0].task("t").version == "v1"
    with pytest.raises(mf.ManifestError, match="not trusted"):
        _publish(engine, evil)
    # Editing a signed row's columns (here: who retired what) makes it fail its own signature check.
    k2 = generate_private_key()
    _rotate(engine, k1, k2)
    assert list(KH.key_state(engine).trusted) == [key_id(k2)]  # replayed (and cached) before the edit
    with engine.begin() as conn:
        conn.execute(
            trusted_keys.update().where(trusted_keys.c.sequence == 3).values(reason="nothing to see")
        )
    assert key_id(k1) in KH.key_state(engine).trusted  # the "add k2" row no longer applies, so k1 stays


def test_retiring_the_last_trusted_key_and_untrusted_signers_are_refused(engine) -> None:
    k1, k2 = generate_private_key(), generate_private_key()
    _publish(engine, k1)
    with engine.begin() as conn, pytest.raises(K.KeyTrustError, match="only trusted key"):
        KH.append_change(conn, k1, "retire", k1.public_key(), "ops", "oops")
    with engine.begin() as conn, pytest.raises(K.KeyTrustError, match="not trusted here"):
        KH.append_change(conn, k2, "add", k2.public_key(), "ops", "let me in")
    assert _count(engine, trusted_keys) == 1


def test_a_key_change_is_an_offline_verifiable_signed_statement(engine) -> None:
    from ratchet_stats.dsse import verify_statement

    k1, k2 = generate_private_key(), generate_private_key()
    _publish(engine, k1)
    _rotate(engine, k1, k2)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(trusted_keys).order_by(trusted_keys.c.sequence)).all()
    add = verify_statement(json.loads(rows[1].envelope), [k1.public_key()], KH.KEY_CHANGE_PREDICATE)[
        "predicate"
    ]
    assert add["action"] == "add" and add["key_id"] == key_id(k2) and add["previous_digest"] == rows[0].digest
    retire = verify_statement(json.loads(rows[2].envelope), [k2.public_key()], KH.KEY_CHANGE_PREDICATE)
    assert retire["predicate"]["key_id"] == key_id(k1)


def test_the_public_key_listing_follows_the_history(engine) -> None:
    k1, k2 = generate_private_key(), generate_private_key()
    assert KH.public_key_listing(engine, [k1.public_key()]) == {
        "keys": [{"key_id": key_id(k1), "pem": public_key_pem(k1)}],
        "retired_keys": [],
    }
    _publish(engine, k1)
    _rotate(engine, k1, k2)
    listing = KH.public_key_listing(engine, [k1.public_key()])  # a gateway configured with the old key
    assert [k["key_id"] for k in listing["keys"]] == [key_id(k2)]
    assert [k["key_id"] for k in listing["retired_keys"]] == [key_id(k1)]
