"""What the tests of evidence need beside the code under test: the auditor's CLI run in this process, JSON files
written for it, and example keys. Used by tests/evidence, tests/night and tests/cli (`ratchet proof`)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import subprocess
from pathlib import Path


def key_of(i: int) -> str:
    """A deterministic example key (sha256 hex), independent of the code under test."""
    return hashlib.sha256(f"example-{i}".encode()).hexdigest()


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


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path
