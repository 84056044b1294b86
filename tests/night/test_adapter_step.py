"""The night's adapter step as plain functions (no Dagster): commitments passed on, one training per training set.

The upstream steps run as the simulator runs them (``night.traffic`` -> ``examples`` -> ``split`` ->
``training_set``); training is real (the demo base, a tiny LoRA config, in this process); the effect ledger is
the real one on SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_assets.night import adapter as step
from ratchet_assets.night.commitments import (
    CommitmentMissing,
    golden_commitment,
    training_commitment,
)
from ratchet_core.layout import ArtifactLayout

pytestmark = pytest.mark.slow  # the demo base and the upstream night: ~10-25 s on the shared machine

DAY = "2026-01-05"
# A few optimiser steps on one thread: this is about the step's bookkeeping, not the adapter's quality.
TINY = {"rank": 4, "alpha": 8, "epochs": 1, "batch_size": 16, "min_steps": 0, "num_threads": 1}


def build_night(home: Path) -> dict:
    """The upstream steps of one night in `home` (same data whatever the home), and the demo base in it."""
    from ratchet_assets.night.evaluate import golden_commitments, load_golden
    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core.student_model import ensure_demo_base

    art = home / "artifacts"
    write_day(home / "lake", DAY, 40, seed=4, workload="tickets", student_share=0.0)
    consolidate_traffic(home / "lake", art, DAY)
    build_examples(art, DAY)
    split = split_golden(art, DAY, share=0.2)
    train = build_training_set(art, DAY)
    return {
        "home": home,
        "art": art,
        "base": ensure_demo_base(home / "models" / "demo-base"),
        "split": split,
        "train": train,
        "golden_recomputed": golden_commitments(load_golden(art, DAY)),
    }


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    return build_night(tmp_path_factory.mktemp("adapter-step"))


def _effects(home: Path):
    from ratchet_assets.effects import EffectLedger
    from ratchet_core.control_db import make_engine

    return EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))


def test_the_steps_write_their_commitments_once_for_the_later_steps(night):
    art = night["art"]
    golden, train = golden_commitment(art, DAY), training_commitment(art, DAY)
    keys, rows = night["golden_recomputed"]
    assert (golden.keys, golden.rows) == (keys, rows)
    assert (golden.keys.root, golden.keys.size) == (night["split"].golden_root, night["split"].golden_size)
    assert (train.rows.root, train.rows.size) == (night["train"].rows_root, night["train"].rows)
    assert train.keys.root == night["train"].keys_root
    with pytest.raises(CommitmentMissing, match="materialise `golden_split` for 2026-01-06"):
        golden_commitment(art, "2026-01-06")


def test_train_adapter_trains_once_per_training_set_and_config_then_reuses(night):
    art, home = night["art"], night["home"]
    effects = _effects(home)
    launches: list[dict] = []
    progress: list[str] = []

    def launch(extras):
        launches.append(extras)
        return step.train_in_process(extras, progress.append)

    first = step.train_adapter(art, DAY, night["base"], dict(TINY), effects, launch)
    assert not first.reused and len(launches) == 1 and progress[-1].startswith("done: ")
    record = first.record
    assert record["version"] == f"v1-{record['adapter_sha256'][:8]}"
    assert record["train_rows_root"] == night["train"].rows_root
    assert record["adapter_dir"] == f"adapters/{record['version']}"  # a name in the tree, not a path
    assert (step.adapter_path(art, record) / "adapter_model.safetensors").is_file()
    assert json.loads(ArtifactLayout(art).adapter_pointer(DAY).read_text()) == record

    again = step.train_adapter(art, DAY, night["base"], {**TINY, "num_threads": 2}, effects, launch)
    assert again.reused and len(launches) == 1  # num_threads does not change the adapter: same launch key
    assert again.record == record
    [effect] = effects.list_effects(effect_type=step.EFFECT)
    assert (effect.status, effect.attempts, effect.key) == ("done", 1, record["effect_key"])

    # the adapter's files are gone: the ledger refuses to pretend, and says how to train again
    gone = step.adapter_path(art, record)
    gone.rename(gone.with_name("moved"))
    try:
        with pytest.raises(step.AdapterError, match="ratchet admin effects resolve training.launch"):
            step.train_adapter(art, DAY, night["base"], dict(TINY), effects, launch)
    finally:
        gone.with_name("moved").rename(gone)
    assert len(launches) == 1


def test_train_adapter_refuses_a_missing_or_empty_training_set(night, tmp_path):
    effects = _effects(tmp_path)
    with pytest.raises(step.AdapterError, match="materialise `training_set` for 2026-01-06 first"):
        step.train_adapter(
            night["art"], "2026-01-06", night["base"], dict(TINY), effects, step.train_in_process
        )
    empty = ArtifactLayout(tmp_path).train_jsonl(DAY)
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"\n")
    with pytest.raises(step.AdapterError, match="is empty"):
        step.train_adapter(tmp_path, DAY, night["base"], dict(TINY), effects, step.train_in_process)
    assert effects.list_effects(effect_type=step.EFFECT) == []


# The night's early stopping, tiny: a validation split of a quarter of the rows, at most 2 epochs.
TINY_ADAPTIVE = {**TINY, "validation_share": 0.25, "patience": 1, "max_epochs": 2, "time_budget_s": 0.0}

_TRAIN_IN_A_CHILD = """
import json, sys
from pathlib import Path
from ratchet_assets.effects import EffectLedger
from ratchet_assets.night import adapter as step
from ratchet_core.control_db import make_engine
home, day, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
effects = EffectLedger(make_engine(f"sqlite:///{(home / 'control.db').as_posix()}"))
base = home / "models" / "demo-base"
result = step.train_adapter(home / "artifacts", day, base, config, effects, step.train_in_process)
print(json.dumps(result.record))
"""


def test_the_same_data_in_two_homes_gives_the_same_version_and_the_learner_reports_its_choices(tmp_path):
    """The adapter's digest (so its version) depends on the data, config and base only: not on the home folder
    (peft writes the base's absolute path into adapter_config.json) nor on the process (``all-linear`` expands
    to a set, written in PYTHONHASHSEED order). The second home trains in a child process with another hash seed."""
    import os
    import subprocess
    import sys

    one, two = build_night(tmp_path / "a" / "home"), build_night(tmp_path / "b" / "elsewhere")
    assert one["train"].rows_root == two["train"].rows_root
    first = step.train_adapter(
        one["art"], DAY, one["base"], dict(TINY_ADAPTIVE), _effects(one["home"]), step.train_in_process
    ).record
    env = {**os.environ, "PYTHONHASHSEED": "12345" if os.environ.get("PYTHONHASHSEED") != "12345" else "7"}
    child = subprocess.run(
        [sys.executable, "-c", _TRAIN_IN_A_CHILD, str(two["home"]), DAY, json.dumps(TINY_ADAPTIVE)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    second = json.loads(child.stdout.strip().splitlines()[-1])
    assert (second["version"], second["files"]) == (first["version"], first["files"])
    config = json.loads((step.adapter_path(one["art"], first) / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "ratchet-demo-base"
    assert config["target_modules"] == sorted(config["target_modules"]) and str(tmp_path) not in json.dumps(
        config
    )

    # the learner's choices: in the record (and so the asset's metadata and the BOM), per task
    learner = first["learner"]
    assert (
        1 <= learner["epochs_run"] <= 2
        and len(learner["validation_accuracy_per_epoch"]) == learner["epochs_run"]
    )
    assert learner["validation_accuracy"] == max(learner["validation_accuracy_per_epoch"])
    per_task = learner["validation_per_task"]
    assert (
        set(per_task) <= {"tickets"}
        and sum(t["rows"] for t in per_task.values()) == learner["validation_rows"]
    )
    assert first["examples"] + learner["validation_rows"] == one["train"].rows
    from ratchet_assets.night.bom_document import P_LEARNER, learner_properties

    props = learner_properties({"steps": first["steps"], **learner})
    assert (
        props[f"{P_LEARNER}steps"] == str(first["steps"])
        and f"{P_LEARNER}validation_accuracy:tickets" in props
    )


def test_a_later_night_whose_adapter_equals_an_earlier_ones_is_that_version_not_a_copy(tmp_path):
    """The demo's nights 2-4 kept night 1's weights (a warm start whose parent was all right) and each minted a new
    version of them. A version is its content (``release.content``): night 2 names it v1's version again, moves no
    files, and its certificate will re-certify v1 (``certificates/<v1>@<day>.dsse.json``)."""
    import shutil

    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set

    night = build_night(tmp_path)
    art, home = night["art"], night["home"]
    effects = _effects(home)
    trained: list[dict] = []

    def launch(extras):
        out = step.train_in_process(extras, lambda line: None)
        trained.append(out[0])
        return out

    first = step.train_adapter(art, DAY, night["base"], dict(TINY), effects, launch).record
    day2 = "2026-01-06"
    write_day(home / "lake", day2, 40, seed=5, workload="tickets", student_share=0.0)
    consolidate_traffic(home / "lake", art, day2)
    build_examples(art, day2)
    split_golden(art, day2, share=0.2)
    build_training_set(art, day2)

    def same_weights(extras):  # what a warm start that keeps its parent hands back
        shutil.copytree(step.adapter_path(art, first), extras["out_dir"])
        return dict(trained[0]), {}

    second = step.train_adapter(art, day2, night["base"], dict(TINY), effects, same_weights).record
    assert second["version"] == first["version"] and second["recertifies"] == first["version"]
    assert second["content_sha256"] == first["content_sha256"] and second["train_day"] == day2
    assert ArtifactLayout(art).adapter_versions() == [
        first["version"]
    ]  # no second folder of the same weights

    # the version's BOM, written the night that minted it, stands: the re-certifying night's `bom` step keeps it
    # (before: it failed, "the golden set of <day 2> is not the one v1 was certified on", on make demo's night 4)
    from ratchet_assets.night import bom_writer
    from ratchet_stats.keys import generate_private_key

    bom = ArtifactLayout(art).bom(first["version"])
    bom.parent.mkdir(parents=True)
    bom.write_bytes(b"night 1's signed BOM")
    key = generate_private_key()
    with pytest.raises(bom_writer.KeepsItsBom) as kept:
        bom_writer.write_bom(art, day2, private_key=key, public_keys=key.public_key(), teacher_model="t")
    assert kept.value.bom == bom and bom.read_bytes() == b"night 1's signed BOM"


def test_a_night_that_keeps_its_parents_weights_re_certifies_it_though_its_training_record_differs(tmp_path):
    """The trainer writes each night's own training record (``ratchet_train.json``: its rows, steps, validation)
    beside the weights, so a warm night that keeps its parent's weights hands back a folder whose files differ in
    that one file (``make demo``'s night 4 minted v4 of v3's weights that way). The version is the weights: night 2
    is v1 again, its folder untouched, and the record names the files that are in it."""
    import shutil

    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.night.split import split_golden
    from ratchet_assets.night.traffic import consolidate_traffic
    from ratchet_assets.night.training_set import build_training_set
    from ratchet_core.chat_encoding import TRAIN_META_FILE
    from ratchet_stats.certificate import adapter_dir_digest, adapter_file_hashes

    night = build_night(tmp_path)
    art, home = night["art"], night["home"]
    effects = _effects(home)
    first = step.train_adapter(art, DAY, night["base"], dict(TINY), effects, step.train_in_process).record
    day2 = "2026-01-06"
    write_day(home / "lake", day2, 40, seed=5, workload="tickets", student_share=0.0)
    consolidate_traffic(home / "lake", art, day2)
    build_examples(art, day2)
    split_golden(art, day2, share=0.2)
    build_training_set(art, day2)

    def kept_parent(extras):  # the parent's weights, tonight's own training record
        out = Path(extras["out_dir"])
        shutil.copytree(step.adapter_path(art, first), out)
        meta = json.loads((out / TRAIN_META_FILE).read_text())
        (out / TRAIN_META_FILE).write_text(json.dumps({**meta, "steps": 0, "examples": 40}, sort_keys=True))
        files = adapter_file_hashes(out)
        from ratchet_stats.certificate import adapter_digest

        return {**first, "files": files, "adapter_sha256": adapter_digest(files), "steps": 0}, {}

    second = step.train_adapter(art, day2, night["base"], dict(TINY), effects, kept_parent).record
    assert second["version"] == first["version"] and second["recertifies"] == first["version"]
    assert ArtifactLayout(art).adapter_versions() == [first["version"]]
    folder = step.adapter_path(art, second)
    assert second["adapter_sha256"] == adapter_dir_digest(folder) == first["adapter_sha256"]
    assert second["files"] == first["files"]
