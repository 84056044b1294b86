"""Ratchet's Dagster code location: everything in ``ratchet_assets/defs/`` (assets, checks, jobs, sensors,
resources), loaded with ``load_from_defs_folder`` (project config: ``ratchet_assets/dg.toml``).

UI: ``dagster dev -w workspace.yaml``. CI: ``dagster asset materialize -m ratchet_assets.definitions
--select 'traffic,examples,golden_split,training_set,daily_receipt' --partition YYYY-MM-DD --config-json
'{"execution": {"config": {"in_process": {}}}}'`` (README, "Dagster: watching, rerunning, CI").
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

# A Dagster process (webserver, daemon, code server, run worker) that loads this location writes the night's
# artifacts, the lake's derived files and the control DB under $RATCHET_HOME: make them private to the user
# (files 0600, folders 0700; ratchet_core.home_files), as `ratchet` itself does, however Dagster was started.
os.umask(0o077)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
