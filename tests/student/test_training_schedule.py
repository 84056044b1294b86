"""min_steps: a small training set runs more epochs; a large one exactly `epochs`; min_steps is in the config hash."""

from __future__ import annotations

import json
import math

from ratchet_core.training import LoraTrainConfig, epochs_to_run, train_lora
from ratchet_core.workloads import get_workload

from .conftest import write_train_jsonl


def test_small_sets_get_enough_epochs_for_min_steps_large_sets_keep_epochs():
    cfg = LoraTrainConfig(epochs=4, batch_size=16, min_steps=150)
    # 179 rows: 12 steps an epoch; 4 epochs would be 48 steps, 13 epochs are the least reaching 150 (156 steps).
    assert epochs_to_run(179, cfg) == 13
    assert 12 * 12 < 150 <= 12 * 13
    assert epochs_to_run(2000, cfg) == 4  # 125 steps an epoch: 500 steps already
    assert epochs_to_run(179, LoraTrainConfig(epochs=4, batch_size=16, min_steps=0)) == 4


def test_min_steps_changes_the_adapter_config_hash():
    from ratchet_assets.defs.lora_adapter import LoraAdapterConfig
    from ratchet_stats.canonical import digest

    a = LoraAdapterConfig().train_config()
    b = LoraAdapterConfig(min_steps=10).train_config()
    assert a["min_steps"] == LoraTrainConfig().min_steps and b["min_steps"] == 10
    assert digest(a) != digest(b)


def test_training_runs_the_extra_epochs(demo_base, tmp_path):
    rows = 20  # 2 steps an epoch at batch 16; min_steps 5 -> 3 epochs -> 6 steps
    train = write_train_jsonl(get_workload("tickets").generate(rows, seed=5), tmp_path / "train.jsonl")
    cfg = LoraTrainConfig(epochs=1, batch_size=16, min_steps=5, max_len=96, rank=4, num_threads=1)
    totals: set[int] = set()
    result = train_lora(demo_base, train, tmp_path / "adapter", cfg, lambda s, t, loss: totals.add(t))
    assert result.steps == math.ceil(rows / 16) * 3 == 6 and totals == {6}
    meta = json.loads((tmp_path / "adapter" / "ratchet_train.json").read_text())
    assert meta["epochs_run"] == 3 and meta["config"]["min_steps"] == 5
