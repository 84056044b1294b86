"""Pinned reference runs of `ratchet sim`, computed once per session (they are the slow part)."""

from __future__ import annotations

import pytest

from ratchet_assets.sim.engine import SimConfig, run_sim


@pytest.fixture(scope="session")
def tickets_home(tmp_path_factory):
    return tmp_path_factory.mktemp("t")


@pytest.fixture(scope="session")
def tickets_run(tickets_home):
    return run_sim(SimConfig(days=7, requests=400, workload="tickets", seed=7), tickets_home)


@pytest.fixture(scope="session")
def bad_run(tmp_path_factory):
    cfg = SimConfig(days=5, requests=400, workload="tickets", seed=7, bad_deploy_version=2)
    return run_sim(cfg, tmp_path_factory.mktemp("b"))
