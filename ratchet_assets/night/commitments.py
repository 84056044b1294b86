"""The night's data-set commitments, computed once by the step that writes the data set and read by later steps.

Each data set has two RFC 9162 SHA-256 trees (``ratchet_stats.commitment``): the key tree over its sorted example
keys and the row tree over its rows. The step that writes a data set writes a small ``commitment.json`` beside it:

- ``train/day=D/commitment.json``: written by ``training_set`` (``night.training_set.build_training_set``); rows =
  the lines of ``train.jsonl`` in file order;
- ``golden/day=D/commitment.json``: written by ``golden_split`` (``night.split.split_golden``, streaming:
  ``night.streamed.stream_golden_commitment``); rows = ``GoldenRow.leaf()`` in key order (``night.evaluate``).

``lora_adapter`` keys its training launch by the training-set root, ``evaluation_certificate`` certifies on the
golden root, and ``bom`` records all four; they read them here instead of hashing the data sets again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ratchet_core.layout import ArtifactLayout
from ratchet_stats.commitment import Commitment


class CommitmentMissing(RuntimeError):
    """A data set has no commitment file; the message says which step writes it."""


@dataclass(frozen=True)
class DataSetCommitment:
    """Key tree and row tree of one data set."""

    keys: Commitment
    rows: Commitment


def _read(path: Path, step: str, day: str) -> DataSetCommitment:
    if not path.exists():
        raise CommitmentMissing(f"no commitment at {path}: materialise `{step}` for {day} first")
    data = json.loads(path.read_text())
    return DataSetCommitment(
        keys=Commitment(data["keys"]["root"], int(data["keys"]["size"])),
        rows=Commitment(data["rows"]["root"], int(data["rows"]["size"])),
    )


def training_commitment(artifacts: str | Path, day: str) -> DataSetCommitment:
    """The training set's commitments, as ``training_set`` wrote them."""
    return _read(ArtifactLayout(artifacts).train_commitment(day), "training_set", day)


def golden_commitment(artifacts: str | Path, day: str) -> DataSetCommitment:
    """The golden set's commitments, as ``golden_split`` wrote them."""
    return _read(ArtifactLayout(artifacts).golden_commitment(day), "golden_split", day)
