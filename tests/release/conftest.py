"""Fixtures for release control: a control DB, a signing key, and writers for sealed segments and certificates."""

from __future__ import annotations

from pathlib import Path

from ratchet_assets.night.fixtures import write_segment
from ratchet_core.lake import segment_relpath
from ratchet_core.schema import pair_row
from tests.evidence.certificates import sign_certificate
from tests.evidence.manifests import engine as engine  # noqa: F401 (fixture)
from tests.evidence.manifests import key as key  # noqa: F401 (fixture)


def seal_pair_rows(
    lake: Path, day: str, seq: int, task: str, stage: str, pairs: list[tuple[str, str, bool]]
) -> Path:
    """Seal one segment of pair rows, one per (version, pair_role, student disagreed with the teacher)."""
    rows = [
        pair_row(
            request_id=f"r-{day}-{seq}-{i}",
            day=day,
            replica="gw1",
            seq=i + 1,
            task=task,
            stage=stage,
            version=version,
            pair_role=role,
            pair_outcome="disagree" if err else "agree",
            schema_version=1,
        )
        for i, (version, role, err) in enumerate(pairs)
    ]
    return write_segment(Path(lake) / segment_relpath(day, "gw1", seq), rows)


def write_pairs(lake: Path, day: str, seq: int, version: str, task: str, errors: list[bool], role="audit"):
    """Seal one canary segment holding one pair row per answer (True = the student disagreed with the teacher)."""
    return seal_pair_rows(lake, day, seq, task, "canary", [(version, role, err) for err in errors])


def write_certificate(artifacts: Path, key, version: str, task: str, correct: int, n: int, day="2026-01-01"):
    """Sign a real evaluation certificate for one task (``tests.evidence.certificates``)."""
    return sign_certificate(artifacts, key, version, task, correct, n, day)
