"""Ratchet's Dagster code location: everything in ``ratchet_assets/defs/`` (assets, checks, jobs, sensors,
resources), loaded with ``load_from_defs_folder`` (project config: ``ratchet_assets/dg.toml``).

UI: ``dagster dev -w workspace.yaml``. CI: ``dagster asset materialize -m ratchet_assets.definitions
--select 'traffic,examples,golden_split,training_set,daily_receipt' --partition YYYY-MM-DD``.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
