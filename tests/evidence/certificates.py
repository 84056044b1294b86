"""A real signed evaluation certificate for tests (``ratchet_stats.certificate``), as the night writes it.

    from tests.evidence.certificates import sign_certificate, lower_bound
    path = sign_certificate(artifacts, key, "v1", "tickets", correct=290, n=300)   # certificates/v1.dsse.json
    lower_bound(path, "tickets")                                                    # the task's signed bound

One task, label comparator, every confidence 0.99; ``correct`` of the ``n`` golden answers agree. Used by the
release, scale and dashboard tests.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any


def sign_certificate(
    artifacts: str | Path,
    key: Any,
    version: str,
    task: str,
    correct: int,
    n: int,
    day: str = "2026-01-01",
    path: str | Path | None = None,
) -> Path:
    """Sign the certificate and write it to `path` (default ``<artifacts>/certificates/<version>.dsse.json``)."""
    from ratchet_stats.certificate import (
        PREDICATE_TYPE,
        TaskOutcomes,
        build_certificate,
        certificate_subjects,
    )
    from ratchet_stats.dsse import make_statement, sign_statement

    outcomes = TaskOutcomes(
        task=task, comparator="label", confidences=[0.99] * n, correct=[i < correct for i in range(n)]
    )
    predicate = build_certificate(
        version=version,
        base={"name": "demo", "sha256": "0" * 64},
        adapter_sha256="1" * 64,
        golden_root="2" * 64,
        golden_size=n,
        target=0.9,
        delta=0.05,
        tasks=[outcomes],
        day=day,
    )
    envelope = sign_statement(make_statement(PREDICATE_TYPE, predicate, certificate_subjects(predicate)), key)
    out = Path(path) if path is not None else Path(artifacts) / "certificates" / f"{version}.dsse.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(envelope))
    return out


def lower_bound(path: str | Path, task: str) -> float:
    """The task's signed lower bound in the certificate at `path` (read back, unverified)."""
    envelope = json.loads(Path(path).read_text())
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]["tasks"][task]["lower_bound"]
