"""The tiny student bases, each built once per session (no download), and the training file they train on.

Used by tests/student (the student server), tests/core (prompt format, the demo base) and tests/night (training,
a whole night on the Qwen2-shaped base): each folder's ``conftest.py`` re-exports the fixtures it needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


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
def chatml_base(tmp_path_factory) -> Path:
    """The real-architecture base (Qwen2, BPE tokenizer, ChatML-with-tools template), built once, no download."""
    from ratchet_core.chatml_base import build_chatml_base

    return build_chatml_base(tmp_path_factory.mktemp("base") / "chatml-base")
