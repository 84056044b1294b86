"""Each night's printed lines say how long each step took: read from the Dagster run's step events."""

from __future__ import annotations

import time

import dagster as dg

from ratchet_cli.demo.night import describe_steps, step_seconds


@dg.asset
def slow_first() -> None:
    time.sleep(1.0)  # the step's length is what is measured


@dg.asset(deps=[slow_first])
def then_quick() -> None:
    return None


@dg.asset(deps=[then_quick])
def then_fails() -> None:
    raise RuntimeError("no data tonight")


def test_step_seconds_lists_every_step_in_order_with_its_seconds() -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([slow_first, then_quick, then_fails], instance=instance, raise_on_error=False)
        steps = step_seconds(instance, result.run_id)
    assert [k for k, _ in steps] == ["slow_first", "then_quick", "then_fails"]
    seconds = dict(steps)
    assert seconds["slow_first"] >= 1.0 and seconds["then_quick"] >= 0.0
    assert seconds["then_fails"] is not None  # a failed step ended too: it has its seconds
    line = describe_steps(steps)
    assert line.startswith(f"slow_first {seconds['slow_first']:.1f} s, then_quick ")
    assert describe_steps([("lora_adapter", None)]) == "lora_adapter -"
