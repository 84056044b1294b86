"""Warm-started nights: a night starts from its tasks' parent adapter, records it, replays no golden row, and starts
cold when the base, the config or the policies say so. Real training on the demo base (tiny LoRA, one thread), the
upstream steps as the simulator runs them, the real effect ledger on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratchet_assets.night import adapter as step
from ratchet_assets.night import warm_start as W
from ratchet_core.layout import ArtifactLayout

pytestmark = pytest.mark.slow  # two tiny trainings on the demo base: ~20-40 s on the shared machine

DAY1, DAY2 = "2026-01-05", "2026-01-06"
TINY = {
    "rank": 4, "alpha": 8, "epochs": 1, "batch_size": 16, "min_steps": 0, "num_threads": 1,
    "validation_share": 0.25, "patience": 1, "max_epochs": 2, "time_budget_s": 0.0, "start": "warm", "refit": True,
}  # fmt: skip


def _day(home: Path, day: str, seed: int) -> None:
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set

    art = home / "artifacts"
    write_day(home / "lake", day, 50, seed=seed, workload="tickets", student_share=0.0)
    consolidate_traffic(home / "lake", art, day)
    build_examples(art, day)
    split_golden(art, day, share=0.2)
    build_training_set(art, day)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Night 1 (no parent: cold) and night 2 (its parent: night 1's adapter, certified for `tickets`)."""
    from ratchet_assets.effects import EffectLedger
    from ratchet_core.control_db import make_engine
    from ratchet_core.student_model import ensure_demo_base

    home = tmp_path_factory.mktemp("warm-start")
    art = home / "artifacts"
    base = ensure_demo_base(home / "models" / "demo-base")
    effects = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
    launches: list[dict] = []

    def launch(extras):
        launches.append(dict(extras))
        return step.train_in_process(extras, lambda line: None)

    _day(home, DAY1, seed=4)
    first = step.train_adapter(
        art, DAY1, base, dict(TINY), effects, launch, release=step.ReleaseView({}, [], {})
    )
    _day(home, DAY2, seed=5)
    parent = first.record["version"]
    release = step.ReleaseView({}, [(parent, "tickets")], {})
    second = step.train_adapter(art, DAY2, base, dict(TINY), effects, launch, release=release)
    return {
        "home": home, "art": art, "base": base, "effects": effects, "first": first.record,
        "second": second.record, "launches": launches, "release": release,
    }  # fmt: skip


def test_the_first_night_starts_cold_and_the_next_from_the_certified_adapter(nights):
    first, second = nights["first"], nights["second"]
    assert first["start"] == {
        "mode": "cold",
        "reason": "no adapter is live or certified for the training set's tasks yet",
    }
    start = second["start"]
    assert start["mode"] == "warm" and start["reason"] == f"from certified {first['version']}"
    assert start["parent"] == {
        "version": first["version"],
        "adapter_sha256": first["adapter_sha256"],
        "train_day": DAY1,
        "chosen_as": "certified",
    }
    launch = nights["launches"][1]
    assert launch["init_adapter"] == str(step.adapter_path(nights["art"], first))
    # trained on the rows new since day 1 plus the replay sample, nothing else
    train_keys = ArtifactLayout(nights["art"]).train_keys(DAY2).read_text().split()
    days = W.row_first_days(nights["art"], DAY2)
    new = sum(d == DAY2 for d in days)
    held = W.held_out(ArtifactLayout(nights["art"]).train_jsonl(DAY2), TINY, nights["base"])
    fresh_rows = sum(d == DAY2 and not h for d, h in zip(days, held, strict=True))
    assert start["new_rows"] == fresh_rows > 0 and 0 < start["replay_rows"] <= len(train_keys) - new
    # validated on every held-out group of the window, the new rows' (learnt?) and the old ones' (forgotten?)
    new_held = sum(h for d, h in zip(days, held, strict=True) if d == DAY2)
    old_held = sum(h for d, h in zip(days, held, strict=True) if d < DAY2)
    assert second["learner"]["validation_rows"] == new_held + old_held and new_held > 0 and old_held > 0
    # trained on the new and replayed rows; never the held-out ones, even with refit on: a warm night saves the
    # epoch that beat its parent on them (lora_trainer, "Refit")
    assert second["examples"] == fresh_rows + start["replay_rows"]
    # the learner's numbers name the parent's score on the validation split before the first epoch
    assert "initial_validation_accuracy" in second["learner"]
    assert second["policies_sha256"] == W.policies_sha256({}, ["tickets"])


def test_the_warm_start_begins_from_the_parents_weights(nights, tmp_path):
    """Trained directly: the validation loss before the first epoch is the parent's, computed here on the same
    held-out rows, and not what a fresh LoRA scores."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet_assets.night.lora_trainer import (
        LoraTrainConfig,
        _validate,
        read_train_rows,
        scoring_rows,
        train_lora,
        validation_mask,
    )

    art, base = nights["art"], nights["base"]
    parent_dir = step.adapter_path(art, nights["first"])
    train = ArtifactLayout(art).train_jsonl(DAY2)
    config = LoraTrainConfig(**{**TINY, "max_epochs": 1, "patience": 1})
    result = train_lora(base, train, tmp_path / "child", config, init_adapter=parent_dir)

    tok = AutoTokenizer.from_pretrained(base)
    rows = read_train_rows(train, tok)
    held = validation_mask([r for _, r in rows], [p for (p, _), _ in rows], 0.25, "near_duplicate")
    encoded = scoring_rows(tok, [pair for (pair, _), h in zip(rows, held, strict=True) if h])
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    parent = PeftModel.from_pretrained(model, str(parent_dir))
    right, loss = _validate(parent, encoded, tok.pad_token_id, 16)
    v = result.validation
    assert v["rows"] == len(encoded)
    assert v["initial_accuracy"] == round(sum(right) / len(right), 6)
    assert v["initial_loss"] == pytest.approx(loss, abs=1e-4)
    # and that is not what a fresh LoRA (B = 0: the base's own output) scores, so the check above can fail
    _, base_loss = _validate(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), encoded, tok.pad_token_id, 16
    )
    assert abs(base_loss - loss) > 1e-3


def test_a_changed_base_config_or_policy_starts_cold(nights):
    from ratchet_core.task_policy import TaskPolicy

    art, effects, release = nights["art"], nights["effects"], nights["release"]
    first = nights["first"]
    records = W.launch_records(effects, step.EFFECT)
    common = {
        "base": nights["base"],
        "tasks": ["tickets"],
        "live": release.live,
        "certified": release.certified,
        "records": records,
    }
    same_base = first["base"]["sha256"]
    same_policies = W.policies_sha256({}, ["tickets"])
    ok = W.plan_start(
        art, DAY2, base_sha256=same_base, train_config=TINY, policies_digest=same_policies, **common
    )
    assert ok.mode == "warm"

    changed_base = W.plan_start(
        art, DAY2, base_sha256="0" * 64, train_config=TINY, policies_digest=same_policies, **common
    )
    assert changed_base.mode == "cold" and "the base changed" in changed_base.reason

    forced = W.plan_start(
        art,
        DAY2,
        base_sha256=same_base,
        train_config={**TINY, "start": "cold"},
        policies_digest=same_policies,
        **common,
    )
    assert forced.mode == "cold" and "start=cold" in forced.reason

    reshaped = W.plan_start(
        art,
        DAY2,
        base_sha256=same_base,
        train_config={**TINY, "rank": 8},
        policies_digest=same_policies,
        **common,
    )
    assert reshaped.mode == "cold" and "rank differs" in reshaped.reason

    resplit = W.plan_start(
        art, DAY2, base_sha256=same_base, train_config={**TINY, "validation_share": 0.5},
        policies_digest=same_policies, **common,
    )  # fmt: skip
    assert resplit.mode == "cold" and "validation split (validation_share) differs" in resplit.reason

    policy = W.policies_sha256({"tickets": TaskPolicy(target=0.9)}, ["tickets"])
    repoliced = W.plan_start(
        art, DAY2, base_sha256=same_base, train_config=TINY, policies_digest=policy, **common
    )
    assert repoliced.mode == "cold" and "policies changed" in repoliced.reason

    # the release state names the parent live: chosen as live, ahead of the registry
    live = W.plan_start(
        art, DAY2, base_sha256=same_base, train_config=TINY, policies_digest=same_policies,
        **{**common, "live": {"tickets": first["version"]}, "certified": []},
    )  # fmt: skip
    assert live.mode == "warm" and live.parent.chosen_as == "live"


def test_the_replay_sample_never_holds_a_golden_row_and_a_parent_that_saw_one_is_refused(nights, tmp_path):
    art = nights["art"]
    layout = ArtifactLayout(art)
    records = W.launch_records(nights["effects"], step.EFFECT)
    plan = W.plan_start(
        art, DAY2, base=nights["base"], tasks=["tickets"], base_sha256=nights["first"]["base"]["sha256"], train_config=TINY,
        policies_digest=W.policies_sha256({}, ["tickets"]), records=records, live={},
        certified=nights["release"].certified,
    )  # fmt: skip
    keys = layout.train_keys(DAY2).read_text().split()
    days = W.row_first_days(art, DAY2)
    held = W.held_out(layout.train_jsonl(DAY2), TINY, nights["base"])
    replayed = {keys[i] for i in plan.rows if days[i] <= DAY1 and not held[i]}
    assert len(replayed) == plan.replay_rows > 0
    golden = set(layout.golden_keys(DAY2).read_text().split())
    assert golden and not replayed & golden
    # every replayed row is a day-1 row that the rule picks; none of the others is
    picked = {
        k
        for k, d, h in zip(keys, days, held, strict=True)
        if d <= DAY1 and not h and W.replay_score(k) < TINY.get("replay_share", 0.25)
    }
    assert replayed == picked

    # if the parent had trained on a key that is golden today, the night must not start from it
    golden_file = layout.golden_keys(DAY2)
    saved = golden_file.read_text()
    leaked = layout.train_keys(DAY1).read_text().split()[0]
    golden_file.write_text("".join(k + "\n" for k in sorted(golden | {leaked})))
    try:
        refused = W.plan_start(
            art, DAY2, base=nights["base"], tasks=["tickets"], base_sha256=nights["first"]["base"]["sha256"], train_config=TINY,
            policies_digest=W.policies_sha256({}, ["tickets"]), records=records, live={},
            certified=nights["release"].certified,
        )  # fmt: skip
    finally:
        golden_file.write_text(saved)
    assert refused.mode == "cold" and f"golden on {DAY2}" in refused.reason


def test_the_parent_is_the_newest_live_or_certified_version_of_the_tasks():
    def rec(v, day):
        return {"version": v, "adapter_sha256": v.split("-")[1] * 8, "train_day": day}

    records = {
        r["version"]: r
        for r in (rec("v1-aa", "2026-01-01"), rec("v2-bb", "2026-01-02"), rec("v3-cc", "2026-01-03"))
    }
    # v1 serves, v2 and v3 are certified (v3 still in shadow): the newest, v3, has seen the most days
    p = W.find_parent(
        ["tickets"], {"tickets": "v1-aa"}, [("v2-bb", "tickets"), ("v3-cc", "tickets")], records
    )
    assert (p.version, p.chosen_as, p.train_day) == ("v3-cc", "certified", "2026-01-03")
    # the newest is the live one: chosen as live
    p = W.find_parent(["tickets"], {"tickets": "v3-cc"}, [("v2-bb", "tickets")], records)
    assert (p.version, p.chosen_as) == ("v3-cc", "live")
    # another task's versions, and versions the ledger never launched, are not parents
    assert W.find_parent(["extract"], {"tickets": "v3-cc"}, [("v2-bb", "tickets")], records) is None
    p = W.find_parent(["tickets"], {}, [("v9-ff", "tickets"), ("v2-bb", "tickets")], records)
    assert p.version == "v2-bb"


def test_select_rows_takes_every_new_row_and_a_capped_hash_sample_of_the_old():
    keys = [f"{i:064x}" for i in range(200)]
    days = ["2026-01-01"] * 150 + ["2026-01-02"] * 50
    rows, new, replay = W.select_rows(keys, days, "2026-01-01", share=0.25, cap=1000)
    assert new == 50 and set(range(150, 200)) <= set(rows) and list(rows) == sorted(rows)
    expected = sorted(i for i in range(150) if W.replay_score(keys[i]) < 0.25)
    assert [i for i in rows if i < 150] == expected and replay == len(expected) > 0
    capped, _, few = W.select_rows(keys, days, "2026-01-01", share=0.25, cap=5)
    lowest = sorted(range(150), key=lambda i: W.replay_score(keys[i]))[:5]
    assert few == 5 and [i for i in capped if i < 150] == sorted(lowest)


def test_select_rows_keeps_every_held_out_row_for_validation_and_never_counts_them():
    keys = [f"{i:064x}" for i in range(40)]
    days = ["2026-01-01"] * 20 + ["2026-01-02"] * 20
    held = [i % 5 == 0 for i in range(40)]
    old_held = tuple(range(0, 20, 5))  # validated on (forgetting shows there), never replayed
    rows, new, replay = W.select_rows(keys, days, "2026-01-01", share=1.0, cap=1000, held=held)
    assert rows == tuple(range(40)) and new == 16 and replay == 16
    rows, new, replay = W.select_rows(keys, days, "2026-01-01", share=0.0, cap=1000, held=held)
    assert rows == old_held + tuple(range(20, 40)) and (new, replay) == (16, 0)
