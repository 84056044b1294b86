"""Demo teacher servers on loopback for these tests (stopped when the module's tests end)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from openai import OpenAI

from ratchet_gateway.demo_teacher.app import DemoTeacherConfig, create_app
from tests.serve import serve_in_thread


@pytest.fixture(scope="module")
def teacher_server() -> Iterator[Callable[..., OpenAI]]:
    """`make(client_key=..., **config) -> OpenAI client` for a demo teacher with that config (one server per distinct config)."""
    servers: dict[tuple, str] = {}
    with ExitStack() as stack:

        def make(client_key: str = "sk-test", **config) -> OpenAI:
            key = tuple(sorted(config.items()))
            if key not in servers:
                servers[key] = stack.enter_context(serve_in_thread(create_app(DemoTeacherConfig(**config))))
            return OpenAI(base_url=servers[key] + "/v1", api_key=client_key, max_retries=0, timeout=30)

        yield make
