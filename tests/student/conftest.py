"""Fixtures of the student tests: ONE demo base and ONE trained tickets adapter for the whole session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_core.workloads import get_workload

# Small enough for two shared CPU cores; the system prompt is the same in every row, so cutting its start
# (prompt window 160 - longest label) loses nothing the answer depends on. One torch thread: on a CPU shared
# with other test runs, two OpenMP threads were measured 6x slower.
TRAIN_KW = {
    "min_steps": 0,  # exactly the default 4 epochs (600 rows: 152 steps anyway)
    "num_threads": 1,
}


def write_train_jsonl(examples, path: Path) -> Path:
    """train.jsonl in OpenAI chat fine-tuning format, with the teacher's correct answer as the last message."""
    with path.open("w", encoding="utf-8") as f:
        for e in examples:
            row = {
                "messages": [*e.messages, e.expected],
                "tools": e.tools,
                "response_format": e.response_format,
            }
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="session")
def demo_base(tmp_path_factory) -> Path:
    from ratchet_core.student_model import ensure_demo_base

    return ensure_demo_base(tmp_path_factory.mktemp("base") / "demo-base")


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


@pytest.fixture(scope="session")
def chatml_base(tmp_path_factory) -> Path:
    """The real-architecture base (Qwen2, BPE tokenizer, ChatML-with-tools template), built once, no download."""
    from ratchet_core.chatml_base import build_chatml_base

    return build_chatml_base(tmp_path_factory.mktemp("base") / "chatml-base")
