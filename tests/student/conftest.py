"""Fixtures of the student server tests: the bases (``tests.student.bases``) and ONE trained tickets adapter for
the whole session (used by test_student_server.py only)."""

from __future__ import annotations

import pytest

from ratchet_core.workloads import get_workload
from tests.student.bases import chatml_base as chatml_base
from tests.student.bases import demo_base as demo_base
from tests.student.bases import write_train_jsonl

# Small enough for two shared CPU cores; the system prompt is the same in every row, so cutting its start
# (prompt window 160 - longest label) loses nothing the answer depends on. One torch thread: on a CPU shared
# with other test runs, two OpenMP threads were measured 6x slower.
TRAIN_KW = {
    "min_steps": 0,  # exactly the default 4 epochs (600 rows: 152 steps anyway)
    "num_threads": 1,
}


@pytest.fixture(scope="session")
def tickets_split():
    """600 training and 200 held-out tickets examples (different seeds: no shared rows by construction)."""
    workload = get_workload("tickets")
    return workload.generate(600, seed=11), workload.generate(200, seed=12)


@pytest.fixture(scope="session")
def trained_adapter(demo_base, tickets_split, tmp_path_factory):
    from ratchet_assets.night.lora_trainer import LoraTrainConfig, train_lora

    root = tmp_path_factory.mktemp("train")
    train_jsonl = write_train_jsonl(tickets_split[0], root / "train.jsonl")
    progress: list[tuple[int, int, float]] = []
    result = train_lora(
        demo_base,
        train_jsonl,
        root / "adapter",
        LoraTrainConfig(**TRAIN_KW),
        on_progress=lambda step, total, loss: progress.append((step, total, loss)),
    )
    return result, progress
