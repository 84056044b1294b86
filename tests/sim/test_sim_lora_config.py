"""``ratchet sim --student lora`` trains as the product's night does: the night's settings, and the step budget's
doubling after nights that did not certify (``sim.engine.lora_night_config``, ``sim.engine.budget_factor``)."""

from __future__ import annotations

import dataclasses

from ratchet_assets.night.adapter import NIGHT_TRAINING
from ratchet_assets.night.step_budget import MAX_FACTOR
from ratchet_assets.sim.engine import budget_factor, lora_night_config


def test_the_budget_doubles_per_consecutive_night_that_did_not_certify_a_task_it_trains():
    assert budget_factor([], {"extract"}) == 1
    assert budget_factor([{"extract": False}], {"extract"}) == 2
    assert budget_factor([{"extract": False}, {"extract": False}], {"extract"}) == 4
    # at most MAX_FACTOR, however long the streak
    assert budget_factor([{"extract": False}] * 6, {"extract"}) == MAX_FACTOR
    # the walk stops at the newest night that certified every such task
    assert budget_factor([{"extract": False}, {"extract": True}], {"extract"}) == 1
    assert budget_factor([{"extract": True}, {"extract": False}], {"extract"}) == 2
    # one task of tonight's training set not certified is enough; a task tonight does not train is no evidence
    mixed = {"tickets": True, "extract": False}
    assert budget_factor([mixed], {"tickets", "extract"}) == 2
    assert budget_factor([mixed], {"tickets"}) == 1
    assert budget_factor([{"tools": False}], {"extract"}) == 1


def test_the_lora_student_trains_with_the_nights_settings_scaled_by_the_budget():
    plain = lora_night_config(7, 1)
    assert plain == dataclasses.replace(NIGHT_TRAINING, seed=7)
    # warm where its parent allows it, as the night does (sim.engine.Simulation._train)
    assert plain.start == "warm"
    doubled = lora_night_config(7, 2)
    assert doubled.min_steps == 2 * NIGHT_TRAINING.min_steps
    assert doubled.max_epochs == 2 * NIGHT_TRAINING.max_epochs
    # the run's own extensions keep the two together within MAX_FACTOR times the budget
    assert doubled.max_extensions == 1
    four = lora_night_config(7, MAX_FACTOR)
    assert four.max_extensions == 0 and four.min_steps == MAX_FACTOR * NIGHT_TRAINING.min_steps
    assert (
        four.max_epochs == 2 * NIGHT_TRAINING.max_epochs
    )  # the schedule grows at most x2 (night.step_budget)
    # what the budget leaves alone is the night's
    assert doubled.lr == NIGHT_TRAINING.lr and doubled.validation_share == NIGHT_TRAINING.validation_share
    assert doubled.time_budget_s == NIGHT_TRAINING.time_budget_s
