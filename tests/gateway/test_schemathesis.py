"""Schemathesis against the gateway's served ``/openapi.json`` (issue 13 must-show): every documented operation,
valid (positive) and invalid (negative) requests generated from the document itself, with a fixed, derandomized
example budget; every answer must be a non-5xx that matches the documented response schema.

The gateway runs in front of the real demo teacher on loopback, with a client key (an admin key on the admin
routes, where a client key would only test the 403). Budget: ``EXAMPLES`` per operation and mode (about 30 s on
the shared 2-core box)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from .conftest import ADMIN_KEY, API_KEY, running_gateway

EXAMPLES = 12
CHECKS = [not_a_server_error, response_schema_conformance]


def _headers(path: str) -> dict[str, str]:
    key = ADMIN_KEY if path.startswith("/ratchet/admin") else API_KEY
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.slow
def test_generated_requests_get_no_5xx_and_documented_answers(tmp_path, teacher_url):
    failures: list[str] = []
    calls = 0
    with running_gateway(tmp_path, teacher_url) as g:
        schema = schemathesis.openapi.from_url(g.url + "/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {op.path for op in operations} >= {"/v1/chat/completions", "/ratchet/proofs/{version}"}
        for op in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                calls += _fuzz(g.url, op, mode, failures)
    assert calls >= len(operations) * EXAMPLES
    assert not failures, "\n".join(failures[:20])


def _fuzz(url: str, op, mode: GenerationMode, failures: list[str]) -> int:
    """Run `EXAMPLES` generated cases of `op` in `mode`; failures appended; returns the number of calls."""
    headers = _headers(op.path)
    calls = 0

    @given(case=op.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case) -> None:
        nonlocal calls
        calls += 1
        response = case.call(base_url=url, headers=headers, timeout=30)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:  # collected: every failing operation is reported at once
            failures.append(
                f"{op.method.upper()} {op.path} [{mode.value}] -> {response.status_code}: {str(exc)[:400]}"
            )

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (an operation without parameters or body)
        assert mode is GenerationMode.NEGATIVE, op.path
    return calls
