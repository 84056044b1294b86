"""Fixtures for the night's tests: a Ratchet home under tmp_path with a signing key and fixture traffic."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ratchet_assets.night.fixtures import write_day

DAY1, DAY2 = "2026-01-01", "2026-01-02"


def tree_digest(root: Path, sub: str) -> dict[str, str]:
    """sha256 of every file under root/sub (relative path -> hex), lock files left out."""
    base = root / sub
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(base.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


@pytest.fixture
def home(tmp_path: Path) -> Path:
    from ratchet_stats.keys import generate_private_key, public_key_pem, save_private_key

    h = tmp_path / "home"
    key = generate_private_key()
    save_private_key(key, h / "keys" / "signing.key")
    (h / "keys" / "signing.pub").write_text(public_key_pem(key.public_key()))
    return h


@pytest.fixture
def two_days(home: Path) -> Path:
    """Two consecutive days of mixed traffic in the lake (small, deterministic)."""
    write_day(home / "lake", DAY1, 120, seed=1)
    write_day(home / "lake", DAY2, 120, seed=2, day_index=1)
    return home
