"""Dagster resources configured from the settings once: values people need in the UI, no secrets in run config."""

from __future__ import annotations

import json

from ratchet_assets.defs.resources import night_resources
from ratchet_stats.keys import generate_private_key, key_id, private_key_b64


def test_resources_carry_the_settings_values_but_never_a_secret(tmp_path, monkeypatch) -> None:
    key = generate_private_key()
    secret_key = private_key_b64(key)
    for name, value in {
        "RATCHET_HOME": str(tmp_path / "home"),
        "RATCHET_LAKE": "s3://bucket/lake",
        "RATCHET_SIGNING_KEY": secret_key,
        "RATCHET_STUDENT_API_KEY": "sk-student-secret",
        "RATCHET_TEACHER_MODEL": "openai/gpt-4o",
        "RATCHET_CONTROL_DB": "postgresql+psycopg://ratchet:db-password@db/ratchet",
    }.items():
        monkeypatch.setenv(name, value)
    resources = night_resources()
    config = json.dumps({name: r.model_dump() for name, r in resources.items()}, default=str)
    for secret in (secret_key, "sk-student-secret", "db-password"):
        assert secret not in config
    paths, models = resources["paths"], resources["models"]
    assert (paths.lake, paths.artifacts) == ("s3://bucket/lake", str(tmp_path / "home" / "artifacts"))
    assert (models.teacher_model, models.teacher()) == ("openai/gpt-4o", "openai/gpt-4o")
    assert models.student_api_key() == "sk-student-secret"  # read from the settings when used
    assert resources["signer"].key_id() == key_id(key)
    assert resources["control_db"].resolved_url().endswith("@db/ratchet")


def test_with_a_home_everything_lives_under_it(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("RATCHET_SIGNING_KEY", raising=False)
    monkeypatch.setenv("RATCHET_LAKE", "s3://elsewhere")
    resources = night_resources(tmp_path)
    assert resources["paths"].lake_root() == tmp_path / "lake"
    assert resources["control_db"].url == f"sqlite:///{(tmp_path / 'control.db').as_posix()}"
    signer = resources["signer"]
    first = signer.key_id()  # the embedded default makes the home key on first use
    assert (tmp_path / "keys" / "signing.key").exists() and signer.key_id() == first
    assert [key_id(k) for k in signer.verify_keys()] == [first]
