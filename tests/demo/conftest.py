"""Fixtures for the demo's tests: a Ratchet home with a signing key, and loopback ports that were free."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.serve import free_port


@pytest.fixture
def keyed_home(tmp_path: Path) -> Path:
    from ratchet_stats.keys import generate_private_key, public_key_pem, save_private_key

    home = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    (home / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    return home


@pytest.fixture
def clean_env() -> dict[str, str]:
    """The environment without RATCHET_* or DAGSTER_HOME (each test names its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_") and k != "DAGSTER_HOME"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


@pytest.fixture
def ports() -> list[int]:
    chosen: list[int] = []
    while len(chosen) < 4:
        p = free_port()
        if p not in chosen:
            chosen.append(p)
    return chosen
