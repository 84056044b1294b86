"""Fixtures for the night's tests: a signing key, a home with a day of traffic, and the student bases
(``tests.student.bases``) for training and a night on the Qwen2-shaped base."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.student.bases import chatml_base as chatml_base  # noqa: F401 (fixture)
from tests.student.bases import demo_base as demo_base  # noqa: F401 (fixture)


@pytest.fixture(scope="session")
def signing_key():
    from ratchet_stats.keys import generate_private_key

    return generate_private_key()


def home_with_a_day(home: Path, day: str, rows: int, seed: int):
    """A test home: a new signing key in keys/, a day of `tickets` traffic (all answered by the teacher) in lake/
    and the demo base in models/demo-base; returns the private key."""
    from ratchet_assets.night.fixtures import write_day
    from ratchet_core.student_model import ensure_demo_base
    from ratchet_stats.keys import generate_private_key, save_private_key

    key = generate_private_key()
    save_private_key(key, home / "keys" / "signing.key")
    write_day(home / "lake", day, rows, seed=seed, workload="tickets", student_share=0.0)
    ensure_demo_base(home / "models" / "demo-base")
    return key
