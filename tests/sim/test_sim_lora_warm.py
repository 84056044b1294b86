"""``ratchet sim --student lora`` starts a night as the product's night does (``night.warm_start``): warm from the
newest version live or certified for its tasks, on the new rows, a replay sample and the held-out groups; cold
when there is none; never from a version rejected or rolled back.

The first test trains: real LoRA on the demo base, the night's schedule shrunk to a few steps (what is tested is
where the night starts and what it reads, not how well it learns), and a certificate level any adapter that answers
a golden row right reaches, so night 1 certifies a version for night 2 to start from.
"""

from __future__ import annotations

import dataclasses

import pytest

from ratchet_assets.sim import engine
from ratchet_assets.sim.cli import _day_line
from ratchet_assets.sim.config import SimConfig


@pytest.fixture
def few_steps(monkeypatch):
    night = engine.lora_night_config

    def shrunk(seed: int, factor: int):
        return dataclasses.replace(night(seed, factor), min_steps=48, max_epochs=2, max_extensions=0)

    monkeypatch.setattr(engine, "lora_night_config", shrunk)


def _run(home, on_night=None):
    cfg = SimConfig(days=2, requests=50, workload="tickets", seed=5, student="lora", target=0.02, delta=0.5)
    sim = engine.Simulation(cfg, home, lambda record: on_night(sim, record) if on_night else None)
    return sim, sim.run()


@pytest.mark.slow
def test_night_two_starts_from_the_version_night_one_certified(tmp_path, few_steps):
    sim, result = _run(tmp_path / "home")
    first, second = (day["night"] for day in result["days"])
    assert first["training"]["start"] == "cold"
    assert "no adapter is live or certified" in first["training"]["reason"]
    assert first["certificate"]["tickets"]["certified"]
    v1 = first["version"]
    assert second["training"]["start"] == "warm"
    assert v1 in second["training"]["reason"]
    # the warm night reads day 2's rows, a replay sample of day 1's and the held-out groups, not the whole window
    assert 0 < second["training"]["rows"] < second["train_rows"]
    # what the record says is what the next night would check the parent against
    record = sim.lora_records[second["version"]]
    assert record["start"]["parent"]["version"] == v1
    assert record["train_day"] == result["days"][1]["date"]
    # and the day's line says so
    line = _day_line(result["days"][1])
    assert "| trained warm from " in line and f"{v1}, {second['training']['rows']} rows" in line
    assert "trained cold," in _day_line(result["days"][0])


def test_a_rejected_or_rolled_back_version_is_no_parent(tmp_path):
    sim = engine.Simulation(SimConfig(student="lora", workload="tickets"), tmp_path / "home")
    sim.certified_pairs = [("v1-aa", "tickets"), ("v2-bb", "tickets"), ("v3-cc", "tickets")]
    sim.s.statuses = {("v1-aa", "tickets"): "rolled_back", ("v2-bb", "tickets"): "rejected"}
    sim.s.statuses[("v3-cc", "tickets")] = "shadow"
    live, certified = sim._parents()
    assert certified == [("v3-cc", "tickets")]
    assert live == {}
