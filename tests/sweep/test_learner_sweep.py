"""benchmarks/learner_sweep.py on its tiny grid: each task's night built with the project's own steps, a real
training per job on the demo base, golden rows scored exactly, one JSON; and its grid checked before any device
time is spent on it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

# benchmarks/ is a folder of the checkout, not an installed package: import it from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import learner_sweep  # noqa: E402
from benchmarks.learner_sweep import BASES, TASK_SHAPES, grid, job, train  # noqa: E402


def test_the_tiny_sweep_builds_each_night_trains_and_scores_golden_rows_and_a_failed_job_is_a_result(
    tmp_path: Path,
) -> None:
    data, out = tmp_path / "data", tmp_path / "sweep.json"
    assert learner_sweep.main(["build", "--tiny", "--data", str(data)]) == 0
    built = json.loads((data / "data.json").read_text())
    assert set(built) == {"tickets", "extract"}
    for task, numbers in built.items():
        assert numbers["requests"] == 60 and numbers["train_rows"] > 0 and numbers["golden"] > 0
        rows = (data / task / "train.jsonl").read_text().splitlines()
        assert (
            len(rows)
            == numbers["train_rows"]
            == len(json.loads((data / task / "row_tasks.json").read_text()))
        )
        assert len(json.loads((data / task / "golden.json").read_text())) == numbers["golden"]

    jobs = grid("tiny", ["tickets", "extract"]) + [job("bad", "tickets", validation_groups="nope")]
    doc = train(data, out, jobs, workers=2)
    assert json.loads(out.read_text()) == doc  # what the last finished job left on disk
    runs = {r["label"] + ":" + r["task"]: r for r in doc["runs"]}
    assert set(runs) == {"tiny:tickets", "tiny:extract", "bad:tickets"}
    assert "validation_groups 'nope'" in runs["bad:tickets"]["error"]
    for key in ("tiny:tickets", "tiny:extract"):
        r = runs[key]
        assert "error" not in r, r
        assert r["steps"] > 0 and r["train_seconds"] > 0 and r["device"] == "cpu"
        assert r["golden_n"] == built[r["task"]]["golden"] and 0 <= r["golden_correct"] <= r["golden_n"]
        assert 0.0 <= r["lower_bound"] <= r["golden_accuracy"] <= 1.0
    assert set(runs["tiny:extract"]["fields"]) == {"order_id", "amount", "currency", "intent"}
    assert all(v.endswith(f"/{built['extract']['golden']}") for v in runs["tiny:extract"]["fields"].values())
    assert "fields" not in runs["tiny:tickets"]


def test_every_job_of_the_full_grid_is_a_valid_night_training_on_a_known_base() -> None:
    from ratchet_assets.night.adapter import NIGHT_TRAINING

    jobs = grid("full", list(TASK_SHAPES), copy_first=True)
    assert len({json.dumps(j, sort_keys=True) for j in jobs}) == len(jobs)  # no job twice
    assert [j["label"] for j in jobs[: 2 * len(TASK_SHAPES)]] == ["night-cpu"] * 5 + ["night"] * 5
    for j in jobs:
        assert j["base"] in BASES and j["task"] in TASK_SHAPES
        dataclasses.replace(NIGHT_TRAINING, start="cold", **j["overrides"])  # a misspelt field raises here


def test_a_task_the_sweep_does_not_know_is_refused_by_name(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as refused:
        learner_sweep.main(["build", "--tasks", "tickets,nope", "--data", str(tmp_path)])
    assert refused.value.code == 2
    assert "unknown task(s) nope" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
