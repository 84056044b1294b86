"""The adaptive learner: a validation split taken from the training rows (never golden: the training set holds
none), accuracy measured after each epoch, the best epoch kept, stopping on no improvement / max epochs / time
budget; its choices are in the result and the adapter's metadata. Real training on the demo base (tiny config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.night.nights import day_training_set, demo_base_of

from .moods import MOODS_WORKLOAD

pytestmark = pytest.mark.slow  # a few tiny epochs on the demo base: ~1-3 min on the shared 2 cores

DAY = "2026-03-09"


def test_training_stops_on_its_validation_split_and_reports_its_choices(tmp_path, monkeypatch):
    from ratchet_assets.night.lora_trainer import (
        TRAIN_META_FILE,
        LoraTrainConfig,
        read_train_rows,
        train_lora,
        validation_mask,
    )
    from ratchet_core import workloads

    monkeypatch.setitem(workloads.WORKLOADS, "moods", MOODS_WORKLOAD)
    train = day_training_set(tmp_path, DAY, 260, seed=9, workload="moods")
    base = demo_base_of(tmp_path)
    config = LoraTrainConfig(
        rank=4, alpha=8, epochs=1, min_steps=0, num_threads=1,
        validation_share=0.2, patience=1, max_epochs=3, time_budget_s=600,
    )  # fmt: skip
    result = train_lora(base, train.path, tmp_path / "adapter", config)
    v = result.validation
    from transformers import AutoTokenizer

    pairs = read_train_rows(train.path, AutoTokenizer.from_pretrained(base))
    held = sum(validation_mask([r for _, r in pairs], [p for (p, _), _ in pairs], 0.2, "near_duplicate"))
    assert v["rows"] == held and 0 < held < len(pairs) and result.examples == len(pairs) - held
    assert 1 <= v["epochs_run"] <= 3 and len(v["accuracy_per_epoch"]) == v["epochs_run"]
    assert v["final_accuracy"] == max(v["accuracy_per_epoch"]) and 1 <= v["best_epoch"] <= v["epochs_run"]
    assert v["stopped"]
    meta = json.loads((tmp_path / "adapter" / TRAIN_META_FILE).read_text())
    assert meta["validation"] == v and meta["config"]["validation_share"] == 0.2
    print(f"validation: {v}")


def test_a_tie_in_accuracy_is_better_only_for_a_loss_lower_by_min_loss_delta():
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, _better

    delta = LoraTrainConfig().min_loss_delta
    assert delta > 0
    assert _better(0.9, 0.5, 0.8, 0.01, delta)  # higher accuracy wins whatever the loss
    assert not _better(0.8, 0.0, 0.9, 0.5, delta)  # lower accuracy never does
    assert _better(1.0, 0.010, 1.0, 0.010 + 1.2 * delta, delta)  # a tie, the loss lower by more than delta
    assert not _better(1.0, 0.0004, 1.0, 0.0036, delta)  # demo night 4: all right, loss 0.0036 -> 0.0004
    assert _better(1.0, 0.0004, 1.0, 0.0036, 0.0)  # min_loss_delta 0: any lower loss breaks a tie
    assert not _better(1.0, 0.0036, 1.0, 0.0036, 0.0)


def test_more_than_one_training_thread_waits_passively_unless_the_environment_chooses(monkeypatch):
    from ratchet_assets.night import lora_trainer
    from ratchet_assets.night.train_job import passive_threads

    monkeypatch.setattr(lora_trainer, "cpu_threads", lambda: 2)
    for config, expected in (
        ({"num_threads": 2}, "PASSIVE"),
        ({"num_threads": 0}, "PASSIVE"),  # 0 = every CPU: two here
        ({"num_threads": 1}, None),
        ({"num_threads": None}, None),  # torch's own choice, left alone
        ({}, None),
    ):
        env: dict[str, str] = {}
        passive_threads(config, env)
        assert env.get("OMP_WAIT_POLICY") == expected, config
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    passive_threads({"num_threads": 2}, env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}
    monkeypatch.setattr(lora_trainer, "cpu_threads", lambda: 1)
    env = {}
    passive_threads({"num_threads": 0}, env)
    assert env == {}


def test_a_parent_no_epoch_can_beat_is_kept_without_training():
    from ratchet_assets.night.lora_trainer import _better, unbeatable

    delta = 0.005
    assert unbeatable(1.0, 0.004, delta)
    # ... and indeed no score an epoch could reach beats it
    assert not any(_better(a, loss, 1.0, 0.004, delta) for a in (0.9, 1.0) for loss in (0.0, 0.001, 0.0039))
    assert not unbeatable(0.99, 0.001, delta)  # accuracy can still rise
    assert not unbeatable(1.0, 0.006, delta) and _better(
        1.0, 0.0, 1.0, 0.006, delta
    )  # the loss can still fall
    assert not unbeatable(1.0, 0.0001, 0.0)  # min_loss_delta 0: any lower loss beats it


def test_the_split_chooses_the_epochs_then_every_row_teaches(tmp_path, monkeypatch):
    """``refit``: the validation split picks the steps; the adapter saved is trained again from the same start on
    every row (held-out groups included) for that many steps; the selection's numbers stay in the report."""
    from ratchet_assets.night.lora_trainer import TRAIN_META_FILE, LoraTrainConfig, train_lora
    from ratchet_core import workloads

    monkeypatch.setitem(workloads.WORKLOADS, "moods", MOODS_WORKLOAD)
    train = day_training_set(tmp_path, DAY, 160, seed=9, workload="moods")
    base = demo_base_of(tmp_path)
    kw = dict(
        rank=4, alpha=8, epochs=1, min_steps=0, num_threads=1, validation_share=0.2, patience=1, max_epochs=2
    )
    chosen = train_lora(base, train.path, tmp_path / "chosen", LoraTrainConfig(**kw))
    refit = train_lora(base, train.path, tmp_path / "refit", LoraTrainConfig(**kw, refit=True))
    v, r = chosen.validation, refit.validation
    # the same selection run (same split, same epochs), then every row teaches
    assert {k: r[k] for k in v} == v and v["best_epoch"] >= 1
    assert r["refit"]["rows"] == train.rows == refit.examples > chosen.examples == train.rows - v["rows"]
    # as many steps as the selection took up to its chosen epoch (fewer passes over the larger set)
    chosen_steps = v["best_epoch"] * -(-chosen.examples // 16)
    assert refit.steps == r["refit"]["steps"] == chosen_steps
    assert r["refit"]["epochs"] == -(-chosen_steps // -(-train.rows // 16)) <= v["best_epoch"]
    assert r["refit"]["selection_steps"] == chosen.steps
    assert refit.adapter_sha256 != chosen.adapter_sha256
    # scored on the split's rows, which it trained on: not short on them, so the refit is what is saved
    assert "kept" not in r["refit"] and 0 <= r["refit"]["split_accuracy"] <= 1
    meta = json.loads((tmp_path / "refit" / TRAIN_META_FILE).read_text())
    assert meta["validation"]["refit"] == r["refit"] and meta["examples"] == train.rows


def test_a_refit_trains_at_least_the_schedules_floor(tmp_path, monkeypatch):
    """``refit_floor``: when the split picks an epoch before the fixed schedule's floor (`min_steps`), the refit
    trains the floor's steps (patience never stops a selection run before it); without it, the split's choice."""
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora
    from ratchet_core import workloads

    monkeypatch.setitem(workloads.WORKLOADS, "moods", MOODS_WORKLOAD)
    train = day_training_set(tmp_path, DAY, 160, seed=9, workload="moods")
    base = demo_base_of(tmp_path)
    # a learning rate too small to answer a row and a loss delta no epoch reaches: the split keeps epoch 1, while
    # min_steps 24 makes the schedule's floor several epochs
    kw = dict(
        rank=4, alpha=8, epochs=1, min_steps=24, num_threads=1, validation_share=0.2, patience=1, max_epochs=2,
        refit=True, lr=1e-5, min_loss_delta=10.0,
    )  # fmt: skip
    plain = train_lora(base, train.path, tmp_path / "plain", LoraTrainConfig(**kw))
    floored = train_lora(base, train.path, tmp_path / "floored", LoraTrainConfig(**kw, refit_floor=True))
    v, f = plain.validation, floored.validation
    per_epoch = -(-plain.validation["refit"]["selection_steps"] // v["epochs_run"])
    assert {k: f[k] for k in v if k != "refit"} == {k: v[k] for k in v if k != "refit"}  # the same selection
    floor_steps = per_epoch * max(1, -(-24 // per_epoch))
    assert v["best_epoch"] == 1 and v["refit"]["steps"] == per_epoch < floor_steps  # chosen below the floor
    assert floored.steps == f["refit"]["steps"] == f["refit"]["floor_steps"] == floor_steps
    assert "floor_steps" not in v["refit"]


def test_the_validation_split_is_sized_from_the_rows_with_a_floor():
    from ratchet_assets.night.lora_trainer import sized_share

    assert sized_share(1000, 0.2, 100) == 0.2  # a large night: the share holds out enough rows
    assert sized_share(400, 0.2, 100) == 0.25  # a small one: raised to the floor
    assert sized_share(120, 0.2, 100) == 0.3  # never more than 0.3 of the rows: the selection keeps most
    assert sized_share(120, 0.2, 0) == 0.2 and sized_share(120, 0.0, 100) == 0.0  # off


def test_the_nights_config_refits_and_refuses_a_negative_validation_floor():
    """The lora_adapter asset's config carries refit and the floor (else a Dagster night would silently not
    refit), and a floor below 0 is refused with a message, not trained with."""
    from ratchet_assets.defs.lora_adapter import LoraAdapterConfig
    from ratchet_assets.night.adapter import NIGHT_TRAINING
    from ratchet_assets.night.lora_trainer import LoraTrainConfig

    train = LoraAdapterConfig().train_config()
    assert train["refit"] is True and train["refit_floor"] is NIGHT_TRAINING.refit_floor is True
    assert train["patience_on_loss"] is NIGHT_TRAINING.patience_on_loss is True
    assert train["validation_min_rows"] == NIGHT_TRAINING.validation_min_rows > 0
    with pytest.raises(ValueError, match="validation_min_rows must be 0"):
        LoraTrainConfig(validation_min_rows=-5)


def test_a_warm_night_trains_when_the_parent_gets_training_rows_wrong(tmp_path):
    """A parent all right on the split (its loss under min_loss_delta) was kept untrained even when the night's new
    rows disagreed with its answers; rows the parent gets wrong are worth steps, so now it trains."""
    import random

    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora

    train = day_training_set(tmp_path, DAY, 60, seed=3, workload="tickets")
    lines = Path(train.path).read_text().splitlines()[:24]
    seen = tmp_path / "seen.jsonl"
    seen.write_text("".join(line + "\n" for line in lines))
    base = demo_base_of(tmp_path)
    tiny = dict(rank=4, alpha=8, epochs=1, num_threads=1, min_loss_delta=5.0)
    parent = train_lora(base, seen, tmp_path / "parent", LoraTrainConfig(**tiny, min_steps=120))
    # the night: the parent's own rows as the split (all right), and new rows whose labels it has never seen
    rows = [json.loads(line) for line in lines]
    labels = [r["messages"][-1]["content"] for r in rows]
    random.Random(1).shuffle(labels)
    new = [
        {**r, "messages": [*r["messages"][:-1], {"role": "assistant", "content": label + " (new)"}]}
        for r, label in zip(rows[:12], labels, strict=False)
    ]
    night = tmp_path / "night.jsonl"
    night.write_text("".join(json.dumps(r) + "\n" for r in rows + new))
    held = [True] * len(rows) + [False] * len(new)
    config = LoraTrainConfig(**tiny, validation_share=0.5, patience=1, max_epochs=2, warm_lr=1e-3)
    warm = train_lora(base, night, tmp_path / "warm", config, init_adapter=parent.adapter_dir, held_out=held)
    v = warm.validation
    assert v["rows"] == len(rows) and v["initial_accuracy"] == 1.0, v  # the parent is all right on the split
    assert v["initial_train_accuracy"] == 0.0 and warm.steps > 0 and v["epochs_run"] >= 1, v


def test_the_bom_says_the_adapter_was_refit_on_every_row():
    from ratchet_assets.night.adapter import learner_numbers
    from ratchet_assets.night.bom_document import learner_properties

    v = {
        "rows": 100, "final_accuracy": 0.9, "accuracy_per_epoch": [0.9], "best_epoch": 1, "stopped": "all 1 epochs",
        "epochs_run": 1, "refit": {"rows": 400, "epochs": 1, "steps": 25, "selection_steps": 19},
    }  # fmt: skip
    numbers = learner_numbers({"validation": v})
    assert (numbers["refit_rows"], numbers["refit_epochs"], numbers["selection_steps"]) == (400, 1, 19)
    props = learner_properties(numbers)
    assert props["ratchet:learner:refit_rows"] == "400" and props["ratchet:learner:selection_steps"] == "19"
    assert "refit_rows" not in learner_numbers({"validation": {k: x for k, x in v.items() if k != "refit"}})
    # a refit that fell short on the split is not what was saved: the BOM says so and claims no refit rows
    short = {**v, "refit": {**v["refit"], "kept": "selection", "short_on": ["extract"]}}
    numbers = learner_numbers({"validation": short})
    assert numbers["refit_short_on"] == "extract" and "refit_rows" not in numbers
    assert learner_properties(numbers)["ratchet:learner:refit_short_on"] == "extract"


def test_patience_counts_a_new_lowest_loss_as_progress_only_with_patience_on_loss():
    """``patience_state``: the best epoch is chosen by accuracy, then loss, either way; with ``patience_on_loss`` an
    epoch whose loss is the lowest yet by ``min_loss_delta`` resets patience although it is not better (the split of
    ``departments`` night 2, measured: 0.59, 0.58, 0.58 while the loss fell)."""
    from ratchet_assets.night.lora_trainer import patience_state

    accuracy = [0.19, 0.54, 0.59, 0.58, 0.58]
    losses = [0.21, 0.14, 0.121, 0.126, 0.115]
    assert patience_state(accuracy, losses, None, 0.005, False) == (2, 2)  # patience 2 stops here
    assert patience_state(accuracy, losses, None, 0.005, True) == (2, 0)  # the loss fell 0.006: progress
    # a fall smaller than min_loss_delta is no progress
    assert patience_state(accuracy, [0.21, 0.14, 0.121, 0.126, 0.118], None, 0.005, True) == (2, 2)
    # a warm start: the parent's loss is the one to go under, and an epoch that does not beat the parent is no best
    parent = (0.95, 0.05)
    assert patience_state([0.9, 0.9], [0.06, 0.049], parent, 0.005, True) == (None, 2)
    assert patience_state([0.9, 0.9], [0.06, 0.04], parent, 0.005, True) == (None, 0)
    assert patience_state([0.96], [0.06], parent, 0.005, False) == (0, 0)
    assert patience_state([], [], None, 0.005, True) == (None, 0)


def test_a_refit_significantly_worse_on_the_split_is_not_saved():
    """``refit_short_on``: the refit trained on the split's rows, so on each task it must not answer them
    significantly worse (exact McNemar, one-sided) than the chosen epoch did unseen (``ratchet sim --student lora``'s
    `extract` night 3: 0.99 chosen, the refit 0.77 on the same 299 rows); a row or two is noise."""
    from ratchet_assets.night.lora_trainer import REFIT_SHORT_P, refit_short_on

    assert REFIT_SHORT_P == 0.05
    broken = refit_short_on([True] * 296 + [False] * 3, [True] * 231 + [False] * 68, ["extract"] * 299)
    assert broken == ["extract"]
    # 7/21 -> 6/21 (the tiny refit test's split): one row is no evidence
    assert refit_short_on([True] * 7 + [False] * 14, [True] * 6 + [False] * 15, ["all"] * 21) == []
    # five rows lost, none gained: p = 1/32 < 0.05; four: 1/16, not enough
    assert refit_short_on([True] * 5, [False] * 5, ["tools"] * 5) == ["tools"]
    assert refit_short_on([True] * 4, [False] * 4, ["tools"] * 4) == []
    # per task: a task the refit broke is named even when another one gained
    chosen = [True] * 6 + [False] * 6
    refit = [False] * 6 + [True] * 6
    assert refit_short_on(chosen, refit, ["extract"] * 6 + ["tickets"] * 6) == ["extract"]
    assert refit_short_on([], [], []) == []
