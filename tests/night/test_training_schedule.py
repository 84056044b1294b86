"""min_steps: a small training set runs more epochs; a large one exactly `epochs`; min_steps is in the config hash."""

from __future__ import annotations

import json
import math

from ratchet_assets.night.lora_trainer import LoraTrainConfig, epochs_to_run, train_lora
from ratchet_core.workloads import get_workload
from tests.student.bases import write_train_jsonl


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
    cfg = LoraTrainConfig(epochs=1, batch_size=16, min_steps=5, rank=4, num_threads=1)
    totals: set[int] = set()
    result = train_lora(demo_base, train, tmp_path / "adapter", cfg, lambda s, t, loss: totals.add(t))
    assert result.steps == math.ceil(rows / 16) * 3 == 6 and totals == {6}
    meta = json.loads((tmp_path / "adapter" / "ratchet_train.json").read_text())
    assert meta["epochs_run"] == 3 and meta["config"]["min_steps"] == 5


def test_pii_surrogates_replace_placeholders_consistently_in_prompt_and_answer():
    from ratchet_assets.night.lora_trainer import with_surrogates

    text = "mail <EMAIL_e017e2c9>, call <PHONE_0a1b2c3d>; again <EMAIL_e017e2c9>; card <CARD_12345678>"
    out = with_surrogates(text)
    assert "<EMAIL_" not in out and "<PHONE_" not in out and "<CARD_12345678>" in out  # only e-mail/phone
    email = out.split("mail ", 1)[1].split(",", 1)[0]
    assert "@" in email and out.count(email) == 2  # the same placeholder becomes the same value
    assert with_surrogates("<EMAIL_00000001>") != with_surrogates("<EMAIL_00000002>")
    # The redactor recognises a surrogate as the kind of value it stands for (what the gateway will see).
    from ratchet_core.redact import redact_text

    assert redact_text(email).startswith("<EMAIL_") and redact_text(out).count("<PHONE_") == 1


def test_pii_surrogates_enter_the_config_hash():
    from ratchet_assets.defs.lora_adapter import LoraAdapterConfig
    from ratchet_stats.canonical import digest

    assert LoraTrainConfig().pii_surrogates == 0.0  # off unless asked for (the night's default asks for 0.5)
    assert digest(LoraAdapterConfig().train_config()) != digest(
        LoraAdapterConfig(pii_surrogates=0.0).train_config()
    )
