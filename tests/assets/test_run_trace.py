"""A night's Dagster run as one OpenTelemetry trace (``ratchet_assets.run_trace``): the sensor exports a finished run
to an OTLP/HTTP receiver on loopback, a span per asset with its partition and row counts, once; a failed step is an
error span; with RATCHET_OTEL_ENDPOINT unset nothing is exported."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from ratchet_assets.defs.examples import examples
from ratchet_assets.defs.resources import night_resources
from ratchet_assets.defs.run_trace_sensors import Telemetry, night_trace_on_failure, night_trace_on_success
from ratchet_assets.defs.traffic import traffic
from ratchet_assets.run_trace import EXPORTED_TAG
from tests.otlp import otlp_receiver

from .conftest import DAY1


def _tick(sensor, instance, result, endpoint: str, failure: bool = False):
    kind = "PIPELINE_FAILURE" if failure else "PIPELINE_SUCCESS"
    event = next(e for e in result.all_events if e.event_type_value == kind)
    ctx = dg.build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_event=event,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(result.run_id),
        resources={"telemetry": Telemetry(otel_endpoint=endpoint)},
    )
    return sensor(ctx.for_run_failure() if failure else ctx)


def test_a_night_run_is_one_trace_with_a_span_per_asset(two_days: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance, otlp_receiver() as collector:
        result = dg.materialize(
            [traffic, examples], partition_key=DAY1, instance=instance, resources=night_resources(two_days)
        )
        assert result.success
        rows = {
            e.asset_key.to_user_string(): e.materialization.metadata["dagster/row_count"].value
            for e in result.get_asset_materialization_events()
        }
        assert _tick(night_trace_on_success, instance, result, "")  # endpoint unset: a SkipReason, no export
        assert not collector.posts and EXPORTED_TAG not in instance.get_run_by_id(result.run_id).tags

        _tick(night_trace_on_success, instance, result, collector.url)
        _tick(night_trace_on_success, instance, result, collector.url)  # a second tick: exported once
        assert instance.get_run_by_id(result.run_id).tags[EXPORTED_TAG] == "exported"
    spans = collector.spans
    (root,) = [s for s in spans if not s.parent_span_id]
    assert root.resource["service.name"] == "ratchet-night"
    assert root.attributes["dagster.run_id"] == result.run_id and root.attributes["dagster.partition"] == DAY1
    assert root.attributes["ratchet.success"] is True and not root.error
    steps = {s.attributes["dagster.asset_key"]: s for s in spans if s.parent_span_id == root.span_id}
    assert set(steps) == {"traffic", "examples"}
    # examples is a graph of steps (plan, ranges, merge): each is a child of the asset's span
    inner = [s for s in spans if s.parent_span_id == steps["examples"].span_id]
    assert len(inner) >= 3 and all(s.name.startswith("examples.") for s in inner)
    assert len(spans) == 3 + len(inner)
    assert all(s.trace_id == root.trace_id for s in spans)
    for asset, span in steps.items():
        assert span.name == f"materialize {asset}" and span.attributes["dagster.partition"] == DAY1
        assert span.attributes["dagster.row_count"] == rows[asset] > 0
        assert span.attributes["ratchet.success"] is True and span.attributes["ratchet.seconds"] >= 0
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns
    assert steps["traffic"].end_ns <= steps["examples"].start_ns  # examples reads what traffic wrote
    assert all(
        isinstance(v, int | float | bool) or k.startswith(("dagster.", "ratchet."))
        for s in spans
        for k, v in s.attributes.items()
    )


def test_a_failed_step_is_an_error_span(tmp_path: Path) -> None:
    @dg.asset(partitions_def=dg.DailyPartitionsDefinition(start_date="2026-01-01"))
    def broken_asset() -> None:
        raise RuntimeError("Zebedee's disk is full")

    with dg.DagsterInstance.ephemeral() as instance, otlp_receiver() as collector:
        result = dg.materialize([broken_asset], partition_key=DAY1, instance=instance, raise_on_error=False)
        assert not result.success
        _tick(night_trace_on_failure, instance, result, collector.url, failure=True)
    (root,) = [s for s in collector.spans if not s.parent_span_id]
    (step,) = [s for s in collector.spans if s.parent_span_id]
    assert root.error and root.attributes["ratchet.success"] is False
    assert step.error and step.attributes["dagster.asset_key"] == "broken_asset"
    assert step.attributes["error.type"] == "RuntimeError"
    assert "Zebedee" not in str(step.attributes)  # the error's message stays in Dagster


@pytest.mark.parametrize("endpoint", ["", "http://127.0.0.1:9"])
def test_a_run_not_ended_or_not_configured_exports_nothing(endpoint: str) -> None:
    from ratchet_assets.run_trace import trace_run

    with dg.DagsterInstance.ephemeral() as instance:
        assert trace_run(instance, "no-such-run", endpoint) == 0
