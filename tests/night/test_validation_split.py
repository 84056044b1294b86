"""The validation split early stopping scores: held out by groups of near-duplicate prompts, its accuracy tracks
accuracy on fresh requests; the older split by each prompt's hash overstates it, because a near-duplicate of
almost every held-out row was trained on.

The model here is the extreme memoriser, a nearest neighbour over word sets (what a learner that overfits
converges to), so the numbers are exact and fast; ``benchmarks/warm_start.py`` measures the same with the real
learner. The task is ``triage`` (tests/night/triage.py), which the project has never seen."""

from __future__ import annotations

import re

import pytest

from ratchet_assets.night.lora_trainer import near_duplicate_key, validation_mask
from ratchet_core.chat_format import training_pair

from . import triage


def _words(row: dict) -> frozenset[str]:
    return frozenset(re.sub(r"\d+", "0", w) for w in re.findall(r"\w+", triage.user_text(row).lower()))


def _nearest_neighbour(train: list[dict]):
    memory = [(_words(r), triage.label_of(r)) for r in train]

    def predict(row: dict) -> str:
        w = _words(row)
        return max(memory, key=lambda m: len(w & m[0]) / len(w | m[0]))[1]

    return predict


def _accuracy(predict, rows: list[dict]) -> float:
    return sum(predict(r) == triage.label_of(r) for r in rows) / len(rows)


def _split_scores(tokenizer, groups: str) -> tuple[float, float, int]:
    rows = triage.rows(seed=1, n_clusters=150)
    held = validation_mask(rows, [training_pair(tokenizer, r)[0] for r in rows], 0.2, groups)
    train = [r for r, h in zip(rows, held, strict=True) if not h]
    validation = [r for r, h in zip(rows, held, strict=True) if h]
    predict = _nearest_neighbour(train)
    return _accuracy(predict, validation), _accuracy(predict, triage.fresh(seed=2, n=300)), len(validation)


def test_near_duplicates_share_a_group_and_other_requests_do_not():
    rows = triage.rows(seed=3, n_clusters=20, copies=(3, 3))
    keys = [near_duplicate_key(r) for r in rows]
    assert len({triage.user_text(r) for r in rows}) == 60  # every copy is written differently
    for i in range(0, len(rows), 3):  # the three copies of one cluster
        assert keys[i] == keys[i + 1] == keys[i + 2]
    assert len(set(keys)) == 20


@pytest.mark.parametrize("groups", ["near_duplicate", "prompt"])
def test_validation_accuracy_tracks_fresh_requests_only_when_near_duplicates_are_held_out_together(
    groups, tmp_path
):
    from transformers import AutoTokenizer

    from ratchet_core.student_model import ensure_demo_base

    tokenizer = AutoTokenizer.from_pretrained(ensure_demo_base(tmp_path / "demo-base"))  # its chat template
    validation, fresh, n = _split_scores(tokenizer, groups)
    print(f"{groups}: validation {validation:.3f} on {n} rows, fresh {fresh:.3f}")
    assert n > 40
    if groups == "near_duplicate":
        assert abs(validation - fresh) <= 0.1
    else:  # the older split: near-duplicates of its rows were trained on, so it promises far more than fresh gets
        assert validation - fresh >= 0.2
