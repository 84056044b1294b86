"""Fixtures for the night part 2 tests (certificate, BOM, committed training sets, the three assets), and the
student bases (``tests.student.bases``) for training and a night on the Qwen2-shaped base."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.student.bases import chatml_base as chatml_base  # noqa: F401 (fixture)
from tests.student.bases import demo_base as demo_base  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]


def key_of(i: int) -> str:
    """A deterministic example key (sha256 hex), independent of the code under test."""
    return hashlib.sha256(f"example-{i}".encode()).hexdigest()


@pytest.fixture(scope="session")
def signing_key():
    from ratchet_stats.keys import generate_private_key

    return generate_private_key()


@pytest.fixture(scope="session")
def public_b64(signing_key) -> str:
    from ratchet_stats.keys import public_key_b64

    return public_key_b64(signing_key.public_key())


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m ratchet_stats ...` in this process (the same argparse entry point an auditor runs)."""
    from ratchet_stats.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def run_ratchet(*args: str) -> subprocess.CompletedProcess:
    """The `ratchet` console entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "ratchet_cli.main", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


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


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path
