"""Shared fixtures. Every test writes under its own tmp_path; nothing touches the network.

`make test` runs the suite on pytest-xdist workers, each a process with its own session home (below);
``tests/xdist_layout.py`` says which tests share a worker and in which order work is handed out.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# With RATCHET_HOME unset, Ratchet's home is ./.ratchet, i.e. the checkout's own after `make demo`: a test that
# does not set its home would read the demo's control DB, keys and certificates. The session gets a home of its
# own that does not exist yet (as on a fresh clone); tests that need one still set theirs. Each xdist worker is
# a process of its own, so each gets its own.
os.environ.setdefault("RATCHET_HOME", str(Path(tempfile.mkdtemp(prefix="ratchet-test-session-")) / "home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # Workers already fill the cores: one OpenMP thread per process (torch here and in the children it starts),
    # since spinning OpenMP threads on an oversubscribed CPU made training several times slower.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        help="merge each test file's seconds into PATH (tests/durations.json: the order of `make test`)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-durations")
    if path and not hasattr(config, "workerinput"):  # the controller: every worker's reports reach it
        from tests.xdist_layout import DurationRecorder

        config.pluginmanager.register(DurationRecorder(Path(path)), "ratchet-durations")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: xdist hands out work in this order
        from tests.xdist_layout import longest_files_first

        longest_files_first(items)
