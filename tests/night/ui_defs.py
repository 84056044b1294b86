"""A code location of the cost report alone, for the UI plot test (independent of the other assets' wiring)."""

import dagster as dg

from ratchet_assets.defs.cost_report import cost_report
from ratchet_assets.defs.resources import night_resources

defs = dg.Definitions(assets=[cost_report], resources=night_resources())
