"""`mixed`: the three built-in tasks interleaved (40% tickets, 30% extract, 30% tools), each example with its own
task; `generate(..., drift_day=D)` lets every task's drift intents (the new "Ratchet Plus" product) appear
from day D on.
"""

from __future__ import annotations

from .base import Workload
from .extract import EXTRACT
from .tickets import TICKETS
from .tools import TOOLS_TASK

MIXED = Workload("mixed", (TICKETS, EXTRACT, TOOLS_TASK), weights=(0.4, 0.3, 0.3))
