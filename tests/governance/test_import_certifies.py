"""An import certifies a new task: ``moods`` has no traffic at all, only imported golden rows (to certify on) and
imported training rows (to learn from). The real night (``moods_night``, tests/tasks/moods.py: Dagster assets, a
real LoRA training on the demo base with the night's default learner, the real student server on loopback) signs a
certificate whose ``moods`` section, computed on exactly the imported golden rows (none of which was trained on),
certifies at the default target 0.95 (delta 0.05).

Sizes: 150 golden rows, so the Clopper-Pearson lower bound reaches 0.95 with up to 2 wrong answers (150/150: 0.980,
148/150: 0.958, 147/150: 0.949); ~450 training rows, about one night of a new task's traffic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tasks.moods import MOODS_WORKLOAD
from tests.tasks.moods import moods_night as _shared_night

moods_night = _shared_night  # the night fixture shared with tests/tasks/test_new_task_night.py

pytestmark = pytest.mark.slow  # one real training and ~170 golden answers from the demo base: ~2-4 min

DAY = "2026-03-02"


def _jsonl(path: Path, examples) -> Path:
    path.write_text(
        "".join(json.dumps({"messages": e.messages, "answer": e.expected}) + "\n" for e in examples)
    )
    return path


def test_imported_golden_rows_certify_a_task_without_traffic(moods_night, tmp_path: Path) -> None:
    from ratchet_assets.governance.importer import import_examples
    from ratchet_assets.night.fixtures import write_day
    from ratchet_core.layout import ArtifactLayout
    from ratchet_stats.certificate import check_certificate

    moods = MOODS_WORKLOAD.generate(600, seed=11)
    golden_rows, train_rows = moods[:150], moods[150:]
    imported = {}

    def imports(home: Path) -> None:
        write_day(home / "lake", DAY, 30, seed=3, student_share=0.0)  # other tasks' traffic; none of moods
        for role, rows in (("golden", golden_rows), ("train", train_rows)):
            imported[role] = import_examples(
                _jsonl(tmp_path / f"{role}.jsonl", rows), artifacts_root=str(home / "artifacts"), task="moods",
                role=role, source="moods labels, hand-checked", license="CC-BY-4.0", day=DAY,
            ).imported  # fmt: skip

    # the label comparator (moods answers are labels); target and delta stay the defaults (0.95, 0.05)
    night = moods_night(DAY, ["--comparator", "label", "--reason", "certify moods from imports"], imports)
    assert imported["golden"] >= 140 and imported["train"] >= 300, imported
    layout = ArtifactLayout(moods_night.home / "artifacts")
    golden_keys = set(layout.golden_keys(DAY).read_text().split())
    train_keys = set(layout.train_keys(DAY).read_text().split())
    assert not golden_keys & train_keys
    predicate, section = night.predicate, night.section
    # certified on the imported golden rows only (the task has no traffic), at the default target
    assert section["n"] == imported["golden"] and check_certificate(predicate) == []
    assert predicate["target"] == 0.95 and section.get("target", 0.95) == 0.95
    assert section["certified"] and section["lower_bound"] >= 0.95, section
    assert "moods" in predicate["certified_tasks"]
    learner = night.metadata("lora_adapter")
    print(
        f"moods from imports: n={section['n']} precision={section['precision']:.3f} "
        f"lower={section['lower_bound']:.4f} certified={section['certified']}; learner: epochs "
        f"{learner['epochs_run'].value}, steps {learner['steps'].value}, validation accuracy "
        f"{learner['validation_accuracy/moods'].value}, {learner['train_seconds'].value} s"
    )
