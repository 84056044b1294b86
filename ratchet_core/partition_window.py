"""The home's partition window: ``$RATCHET_HOME/partitions.json``, the first and last day of the night's partitions.

A home whose days are not the wall clock's (the accelerated demo's run from 2026-01-01 whatever today is)
records them here, so every process that loads the code location on that home, during the demo or long after
it (the README's ``dagster dev`` on the demo's home), lists exactly those days as partitions. Written by the demo
before it starts its services, and widened by the demo's night runner to any day it runs; read by
``ratchet_assets.defs.partitions`` when ``RATCHET_PARTITIONS_START`` / ``RATCHET_PARTITIONS_END`` are unset.
A home without the file keeps the usual partitions (first traffic day through yesterday).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ratchet_core.home_files import write_private

WINDOW_FILE = "partitions.json"


class PartitionWindowError(ValueError):
    """The window file exists but cannot be read as two days; the message says which file and what to do."""


@dataclass(frozen=True)
class PartitionWindow:
    start: str  # YYYY-MM-DD, first partition
    end: str  # YYYY-MM-DD, last partition (inclusive)

    def days(self) -> list[str]:
        first, last = date.fromisoformat(self.start), date.fromisoformat(self.end)
        return [date.fromordinal(d).isoformat() for d in range(first.toordinal(), last.toordinal() + 1)]

    def widened(self, day: str) -> PartitionWindow:
        return PartitionWindow(min(self.start, day), max(self.end, day))


def window_path(home: Path) -> Path:
    return Path(home) / WINDOW_FILE


def read_window(home: Path) -> PartitionWindow | None:
    """The home's window, or None when it records none."""
    path = window_path(home)
    try:
        raw = json.loads(path.read_text())
        window = PartitionWindow(str(raw["start"]), str(raw["end"]))
        date.fromisoformat(window.start), date.fromisoformat(window.end)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PartitionWindowError(
            f"{path}: not a partition window ({type(exc).__name__}: {exc}); write "
            '{"start": "YYYY-MM-DD", "end": "YYYY-MM-DD"} or delete it to list days from the lake\'s first '
            "through yesterday"
        ) from None
    if window.end < window.start:
        raise PartitionWindowError(
            f"{path}: end {window.end} is before start {window.start}; fix or delete it"
        )
    return window


def write_window(home: Path, window: PartitionWindow) -> None:
    if read_window(home) != window:
        write_private(window_path(home), json.dumps({"start": window.start, "end": window.end}) + "\n")


def widen_window(home: Path, day: str) -> PartitionWindow | None:
    """Make the home's window include `day` when it has one (a night run for a day past the demo's last)."""
    window = read_window(home)
    if window is None:
        return None
    write_window(home, window.widened(day))
    return window.widened(day)
