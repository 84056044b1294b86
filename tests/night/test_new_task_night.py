"""A task defined only by its name and `ratchet admin task set` goes through a night with its own target.

Real components (``moods_night``, tests/night/moods.py): the night's Dagster assets on a test home, a real (tiny)
LoRA training on the demo base with the night's default learner less refit's second training (``ONE_TRAINING``:
this test is about the task's policy, not the learner), the real student server on loopback, the admin CLI
publishing a signed manifest. The task ``moods`` is not a built-in workload: the only thing Ratchet learns about
it is its policy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.night.nights import ONE_TRAINING

from .moods import MOODS, MOODS_WORKLOAD
from .moods import moods_night as _shared_night

moods_night = _shared_night  # the night set-up shared with tests/governance/test_import_certifies.py

# one real training and ~100 golden answers from the demo base: ~2-4 min on the shared 2 cores
pytestmark = pytest.mark.slow

DAY = "2026-03-02"


def test_a_new_task_goes_through_a_night_with_its_own_target(moods_night, monkeypatch) -> None:
    from ratchet_assets.night.fixtures import write_day
    from ratchet_assets.release.guard import certified_task
    from ratchet_core import workloads
    from ratchet_core.workloads.base import validate
    from ratchet_stats.certificate import check_certificate
    from ratchet_stats.keys import load_private_key

    assert validate(MOODS) == [] and "moods" not in workloads.TASKS
    # the fixture writer's traffic source only
    monkeypatch.setitem(workloads.WORKLOADS, "moods", MOODS_WORKLOAD)

    def traffic(home: Path) -> None:
        write_day(home / "lake", DAY, 300, seed=7, workload="moods", student_share=0.0)

    night = moods_night(
        DAY,
        ["--target", "0.6", "--delta", "0.1", "--golden-share", "0.35", "--reason", "a new task: moods"],
        traffic,
        training=ONE_TRAINING,
    )
    predicate, section = night.predicate, night.section
    # the task's own level, signed in its section and recomputed by the verifier's code
    assert (section["target"], section["delta"], predicate["target"]) == (0.6, 0.1, 0.95)
    assert section["comparator"] == "label" and check_certificate(predicate) == []
    assert section["certified"] and section["lower_bound"] >= 0.6, section
    # the golden share came from the policy (0.35 of new keys, never below the certification floor)
    golden_meta = night.metadata("golden_split")
    share = golden_meta["golden_size"].value / golden_meta["new_keys"].value
    assert 0.25 < share < 0.45, share
    # the learner's choices, numeric in the adapter's metadata (the UI plots them per partition)
    learner = night.metadata("lora_adapter")
    assert (
        learner["epochs_run"].value >= 1 and learner["steps"].value > 0 and learner["train_seconds"].value > 0
    )
    assert learner["validation_accuracy/moods"].value == learner["validation_accuracy"].value > 0.5
    checks = {c.check_name: c for c in night.result.get_asset_check_evaluations()}
    check = checks["at_least_one_task_certified"]
    assert check.passed
    print(
        f"moods: n={section['n']} precision={section['precision']:.3f} lower={section['lower_bound']:.3f} "
        f"certified at its own target 0.6: {section['certified']}"
    )
    # the release guard admits it at the task's target, not the global 0.95
    key = load_private_key((moods_night.home / "keys" / "signing.key").read_bytes())
    ct = certified_task(night.cert_file, predicate["version"], "moods", [key.public_key()], 0.6)
    assert ct.target == 0.6
