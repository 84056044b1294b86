"""Scout: a planner, researchers and a writer that answer a research question through the gateway.

See :mod:`ratchet_agents.scout.team` for the flow and :mod:`ratchet_agents.scout.gate` for how filing the report
goes through the effect gate, so a retried step never files twice.
"""

from .gate import GateClient, GateError
from .team import Scout, ScoutResult

__all__ = ["GateClient", "GateError", "Scout", "ScoutResult"]
