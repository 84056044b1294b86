"""Retention: delete what is older than its data class's window (settings ``RATCHET_RETENTION_*_DAYS``).

Data classes and what expires (a day D expires when D < today - window, today on Ratchet's clock):

- ``traffic``: the lake's ``traffic/day=D`` segments and the night's ``traffic/day=D`` files;
- ``examples``: ``examples/day=D``; ``training``: ``train/day=D``;
- ``golden``: ``golden/day=D`` (the golden set to date of night D) — **kept while a version certified on it is not
  retired** (status candidate, shadow, canary or live in the control DB's ``versions``): the golden rows that
  certify a version stay until it is retired, and each such keep is reported with the version;
- ``adapters``: ``adapters/V`` and the pointer ``adapters/day=D`` of nights older than the window, unless the
  version is not retired.

Receipts, certificates, BOMs and the golden registry (keys only) are always kept: they are the signed evidence.
Unset windows keep everything of that class. The ``retention`` asset (``ratchet_assets.defs.retention``) runs this
on a schedule and reports the counts in its metadata.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

from ratchet_core.lake import Lake, day_folder
from ratchet_core.layout import ADAPTERS, EXAMPLES, GOLDEN, TRAFFIC, TRAIN, ArtifactLayout

CLASSES = ("traffic", "examples", "training", "golden", "adapters")
KEPT_STATUSES = ("candidate", "shadow", "canary", "live")


@dataclass(frozen=True)
class RetentionWindows:
    traffic: int | None = None
    examples: int | None = None
    training: int | None = None
    golden: int | None = None
    adapters: int | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> RetentionWindows:
        return cls(*(getattr(settings, f"retention_{name}_days") for name in CLASSES))


@dataclass
class RetentionReport:
    today: str
    deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    deleted_days: dict[str, list[str]] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)  # "golden/day=D: certifies v3 (live)" ...

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unretired(engine: Any) -> dict[str, tuple[str, str]]:
    """version -> (night day, status) of every version not retired."""
    if engine is None:
        return {}
    import sqlalchemy as sa

    from ratchet_core.control_db import ensure_schema, versions

    ensure_schema(engine)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(versions.c.version, versions.c.day, versions.c.status).where(
                versions.c.status.in_(KEPT_STATUSES)
            )
        ).all()
    return {v: (d, s) for v, d, s in rows}


def enforce(
    lake_root: str,
    artifacts_root: str,
    windows: RetentionWindows,
    today: date,
    engine: Any = None,
    dry_run: bool = False,
) -> RetentionReport:
    """Delete every expired day of every class with a window (module docstring); return counts and keeps."""
    report = RetentionReport(today=today.isoformat())
    lake, layout = Lake(lake_root), ArtifactLayout(artifacts_root)
    unretired = _unretired(engine)
    protected_days = {d: (v, s) for v, (d, s) in unretired.items()}

    def expired(days: list[str], window: int | None) -> list[str]:
        if window is None:
            return []
        cutoff = (today - timedelta(days=window)).isoformat()
        return [d for d in days if d < cutoff]

    def drop(kind: str, day: str) -> None:
        report.deleted[kind] += 1
        report.deleted_days.setdefault(kind, []).append(day)

    for day in expired(sorted(set(lake.days()) | set(layout.days(TRAFFIC))), windows.traffic):
        if not dry_run:
            if lake.exists(day_folder(day)):
                lake.fs.rm(lake.path(day_folder(day)), recursive=True)
            shutil.rmtree(layout.day_dir(TRAFFIC, day), ignore_errors=True)
        drop("traffic", day)
    for kind, cls, window in (
        (EXAMPLES, "examples", windows.examples),
        (TRAIN, "training", windows.training),
    ):
        for day in expired(layout.days(kind), window):
            if not dry_run:
                shutil.rmtree(layout.day_dir(kind, day), ignore_errors=True)
            drop(cls, day)
    for day in expired(layout.days(GOLDEN), windows.golden):
        if day in protected_days:
            version, status = protected_days[day]
            report.kept.append(f"golden/day={day}: certifies {version} ({status}); kept until it is retired")
            continue
        if not dry_run:
            shutil.rmtree(layout.golden_dir(day), ignore_errors=True)
        drop("golden", day)
    for day in expired(layout.days(ADAPTERS), windows.adapters):
        pointer = layout.adapter_pointer(day)
        version = None
        if pointer.exists():
            import json

            version = json.loads(pointer.read_bytes()).get("version")
        if version in unretired:
            report.kept.append(f"adapters/{version}: {unretired[version][1]}; kept until it is retired")
            continue
        if not dry_run:
            if version and layout.adapter_dir(version).is_dir() and not _used_later(layout, version, day):
                shutil.rmtree(layout.adapter_dir(version), ignore_errors=True)
            shutil.rmtree(layout.day_dir(ADAPTERS, day), ignore_errors=True)
        drop("adapters", day)
    return report


def _used_later(layout: ArtifactLayout, version: str, day: str) -> bool:
    """A version a later night reused (its pointer names it) is still within that night's window."""
    import json

    for later in layout.days(ADAPTERS):
        pointer = layout.adapter_pointer(later)
        if later > day and pointer.exists() and json.loads(pointer.read_bytes()).get("version") == version:
            return True
    return False
