"""Fixtures of the CLI tests: the stack the live-run harness runs against (``tests.agents.stack``)."""

from __future__ import annotations

from tests.agents.stack import stack as stack  # noqa: F401 (fixture)
