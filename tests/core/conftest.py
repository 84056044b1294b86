"""Fixtures of the core tests: the demo base, built once per session (``tests.student.bases``)."""

from __future__ import annotations

from tests.student.bases import demo_base as demo_base  # noqa: F401 (fixture)
