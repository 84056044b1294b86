"""The stack agents run against: the demo teacher, a real gateway and the effect gate's HTTP API on loopback,
sharing one home (the gateway's ledger and the gate's control DB under it). Used by tests/agents (Scout) and
tests/cli (the live-run harness); each folder's ``conftest.py`` re-exports `stack`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ratchet_core.settings import Settings
from tests.serve import serve_in_thread

SCOUT_KEY = "sk-scout-0123456789abcdef"
ADMIN_KEY = "admin-key-for-agent-tests"


@dataclass
class Stack:
    home: Path
    gateway_url: str  # .../v1
    gate_url: str
    settings: Settings
    gateway_app: object


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from ratchet_assets.effects import create_app as gate_app
    from ratchet_core.control_db import make_engine
    from ratchet_gateway.app import GatewayOptions, create_app
    from ratchet_gateway.demo_teacher.app import DemoTeacherConfig
    from ratchet_gateway.demo_teacher.app import create_app as teacher_app
    from ratchet_stats.keys import generate_private_key

    tmp_path = tmp_path_factory.mktemp("agents")
    with serve_in_thread(teacher_app(DemoTeacherConfig(model="demo-teacher"))) as teacher:
        settings = Settings(
            home=tmp_path / "home",
            api_keys=f"scout:{SCOUT_KEY}",
            admin_key=ADMIN_KEY,
            teacher_model="openai/demo-teacher",
            teacher_api_base=teacher + "/v1",
            teacher_api_key="sk-teacher-upstream",
            student_base_url="http://127.0.0.1:9/v1",
            segment_seconds=3600,
            upstream_timeout_s=10,
        )
        key = generate_private_key()
        gateway = create_app(settings, GatewayOptions(replica="gw", public_keys=[key.public_key()]))
        gate = gate_app(make_engine(settings.control_db_url), [("scout", SCOUT_KEY)], ADMIN_KEY)
        with serve_in_thread(gateway) as gw, serve_in_thread(gate) as gate_url:
            yield Stack(tmp_path / "home", gw + "/v1", gate_url, settings, gateway)
