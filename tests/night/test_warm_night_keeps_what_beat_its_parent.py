"""A warm night saves only weights shown to beat its parent on held-out rows: with ``refit`` on (the night's
default), a warm start keeps the selection run's best epoch, scored against the parent on the new rows' held-out
groups, and never trains again on every row (weights nobody compared with the parent; ``make demo``'s warm nights
saved such refit adapters that scored 167/182, 200/211 and 188/215 on golden against their parent's 100 %).
Real training on the demo base (tiny LoRA, one thread)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # three tiny trainings on the demo base

DAY = "2026-02-03"
TINY = dict(rank=4, alpha=8, epochs=1, batch_size=16, min_steps=0, num_threads=1)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """A day of `tickets` rows cut in two: the parent's (its days) and the night's new rows."""
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core.student_model import ensure_demo_base

    home = tmp_path_factory.mktemp("warm-keeps")
    write_day(home / "lake", DAY, 260, seed=21, workload="tickets", student_share=0.0)
    art = home / "art"
    consolidate_traffic(home / "lake", art, DAY)
    build_examples(art, DAY)
    split_golden(art, DAY, share=0.2)
    lines = Path(build_training_set(art, DAY).path).read_text(encoding="utf-8").splitlines(keepends=True)
    half = len(lines) // 2
    (home / "old.jsonl").write_text("".join(lines[:half]), encoding="utf-8")
    (home / "new.jsonl").write_text("".join(lines[half:]), encoding="utf-8")
    base = ensure_demo_base(home / "models" / "demo-base")
    return home, base, len(lines) - half


def _score(base: Path, adapter: Path, train: Path, held: list[bool]) -> tuple[float, float]:
    """(exact accuracy, mean target-token loss) of ``adapter`` on the held-out rows of ``train``."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet_assets.night.lora_trainer import _validate, read_train_jsonl, scoring_rows

    tok = AutoTokenizer.from_pretrained(base)
    pairs = [p for p, h in zip(read_train_jsonl(train, tok), held, strict=True) if h]
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), str(adapter)
    )
    right, loss = _validate(model, scoring_rows(tok, pairs), tok.pad_token_id, 16)
    return sum(right) / len(right), loss


def test_a_warm_nights_saved_adapter_is_the_epoch_that_beat_its_parent(rows):
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, _better, train_lora

    home, base, new_rows = rows
    # a weak parent: a few steps on its own days' rows
    parent = train_lora(base, home / "old.jsonl", home / "parent", LoraTrainConfig(**TINY))
    held = [
        i % 3 == 0 for i in range(new_rows)
    ]  # the new rows' held-out groups, as night.warm_start passes them
    config = LoraTrainConfig(
        **TINY, validation_share=0.3, patience=1, max_epochs=2, start="warm", refit=True, time_budget_s=0.0
    )
    child = train_lora(
        base, home / "new.jsonl", home / "child", config, init_adapter=parent.adapter_dir, held_out=held
    )
    v = child.validation
    assert v["best_epoch"] >= 1, v  # an epoch beat the parent on the held-out rows, so the night trains
    # what was saved scores on the held-out rows exactly what the chosen epoch scored there ...
    accuracy, loss = _score(base, child.adapter_dir, home / "new.jsonl", held)
    assert accuracy == pytest.approx(v["final_accuracy"], abs=1e-6)  # the report rounds to 6 places
    assert loss == pytest.approx(v["loss_per_epoch"][v["best_epoch"] - 1], abs=1e-4)
    # ... and that beats the parent's own score on them, by the trainer's rule
    assert (v["initial_accuracy"], v["initial_loss"]) == pytest.approx(
        _score(base, parent.adapter_dir, home / "new.jsonl", held), abs=1e-4
    )
    assert _better(accuracy, loss, v["initial_accuracy"], v["initial_loss"], config.min_loss_delta)
    assert "refit" not in v and child.examples == new_rows - sum(held)  # the held-out rows stayed held out


def test_a_cold_night_still_refits_on_every_row(rows):
    """Refit stays on for a cold night (a fresh LoRA has no parent to fall below): every row teaches."""
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora

    home, base, new_rows = rows
    config = LoraTrainConfig(**TINY, validation_share=0.3, patience=1, max_epochs=2, refit=True)
    cold = train_lora(base, home / "new.jsonl", home / "cold", config)
    assert cold.validation["refit"]["rows"] == cold.examples == new_rows
