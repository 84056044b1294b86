"""Pinned reference runs of `ratchet sim`, computed once per session (they are the slow part)."""

from __future__ import annotations

import pytest

from ratchet_assets.sim.config import SimConfig
from ratchet_assets.sim.engine import run_sim


@pytest.fixture(scope="session")
def tickets_home(tmp_path_factory):
    return tmp_path_factory.mktemp("t")


@pytest.fixture(scope="session")
def tickets_run(tickets_home):
    return run_sim(SimConfig(days=7, requests=400, workload="tickets", seed=7), tickets_home)


@pytest.fixture(scope="session")
def bad_run(tmp_path_factory):
    # Audits at 0.3 during a rollout: the bad version meets enough audits on its first day to be rolled back
    # before the next night's version supersedes it.
    cfg = SimConfig(
        days=5, requests=400, workload="tickets", seed=7, bad_deploy_version=2, canary_audit_rate=0.3
    )
    return run_sim(cfg, tmp_path_factory.mktemp("b"))
