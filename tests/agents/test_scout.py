"""Scout through the gateway: its agents' calls reach the teacher as research tasks, and filing the report goes
through the effect gate, so a retried step files exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ratchet_agents.scout import GateClient, Scout
from tests.agents.stack import SCOUT_KEY

pytestmark = pytest.mark.slow  # one gateway + demo teacher for the module: ~25 s to start on the shared box

QUESTION = "how do heat pumps compare with gas boilers?"
COST_QUESTION = "what do solar panels cost next to coal plants?"


def _scout(stack, out: Path) -> Scout:
    return Scout(stack.gateway_url, SCOUT_KEY, GateClient(stack.gate_url, SCOUT_KEY), out)


def test_scout_plans_researches_writes_and_files_once(stack, tmp_path) -> None:
    out = tmp_path / "reports"
    first = _scout(stack, out).run(QUESTION)
    assert first.plan == {"kind": "comparison", "subjects": ["heat pumps", "gas boilers"]}
    assert "3-4 units of heat" in first.notes["heat pumps"]  # the researcher's tool call ran the search
    assert first.report["title"] == "Comparison: heat pumps and gas boilers"
    assert [c["task"] for c in first.calls] == [
        "research_plan",
        "research_search",
        "research_search",
        "research_write",
    ]
    assert {c["served_by"] for c in first.calls} == {"teacher"}
    assert first.filing == "execute" and Path(first.path).read_text() == first.markdown

    retried = _scout(stack, out).run(QUESTION)  # the whole run again: same question, same report
    assert retried.filing == "duplicate" and retried.path == first.path
    assert list(out.iterdir()) == [Path(first.path)]


def test_a_filing_step_that_dies_mid_effect_is_never_filed_twice(stack, tmp_path, monkeypatch) -> None:
    out = tmp_path / "reports"
    scout = _scout(stack, out)
    plan = scout.plan(COST_QUESTION)
    notes = {s: scout.research(s) for s in plan["subjects"]}
    from ratchet_agents.scout.team import render

    markdown = render(COST_QUESTION, scout.write(COST_QUESTION, plan, notes), notes)
    real_write = Scout._write

    def write_then_die(self, path, text):
        real_write(self, path, text)
        raise SystemExit("agent process killed after writing, before reporting")

    monkeypatch.setattr(Scout, "_write", write_then_die)
    with pytest.raises(SystemExit):
        scout.file(COST_QUESTION, markdown)
    monkeypatch.setattr(Scout, "_write", real_write)
    # The step is retried at once: another attempt holds the lease.
    assert scout.file(COST_QUESTION, markdown)[0] == "in_flight"
    assert len(list(out.iterdir())) == 1
    effect = GateClient(stack.gate_url, SCOUT_KEY).show(
        "scout.file_report", scout.file(COST_QUESTION, markdown)[2]
    )
    assert effect["status"] == "in_flight" and effect["attempts"] == 1


def test_scout_cli_and_a_lapsed_filing_is_blocked_not_repeated(stack, tmp_path) -> None:
    from ratchet_agents.scout.cli import scout

    out = tmp_path / "cli-reports"
    args = [
        "will wind turbines replace diesel generators by 2040?",
        "--base-url",
        stack.gateway_url,
        "--api-key",
        SCOUT_KEY,
        "--effects-url",
        stack.gate_url,
    ]
    result = CliRunner().invoke(scout, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "filed:" in result.output and "4 model calls through the gateway" in result.output
    again = CliRunner().invoke(scout, [*args, "--out", str(out)])
    assert "already filed (not filed again)" in again.output
    assert len(list(out.iterdir())) == 1

    # An attempt that began and vanished: once its lease lapses the gate blocks (policy block) instead of refiling.
    gate = GateClient(stack.gate_url, SCOUT_KEY)
    began = gate.begin("scout.file_report", "report-vanished", "fp", lease_seconds=0.2)
    assert began["outcome"] == "execute"
    time.sleep(0.3)
    assert gate.begin("scout.file_report", "report-vanished", "fp")["outcome"] == "blocked"
