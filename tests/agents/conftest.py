"""Fixtures of the agent tests: the demo teacher, a gateway and the effect gate on loopback (``tests.agents.stack``)."""

from __future__ import annotations

from tests.agents.stack import stack as stack  # noqa: F401 (fixture)
