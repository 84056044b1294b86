"""Sensors ``night_trace_on_success`` / ``night_trace_on_failure``: export each finished run of this code location as
one OpenTelemetry trace (``ratchet_assets.run_trace``: a span per asset step with its row counts) to the collector
``RATCHET_OTEL_ENDPOINT`` names; with the endpoint unset they skip, saying so.

Running by default, so setting the endpoint is all a deployment does. A run is exported once (its
``ratchet/otel_trace`` tag), also when ``ratchet demo`` already exported a night it ran in process.
"""

from __future__ import annotations

import dagster as dg

from ratchet_assets.run_trace import trace_run
from ratchet_core.settings import Settings, load_settings


class Telemetry(dg.ConfigurableResource):
    """Where the night's traces go: RATCHET_OTEL_ENDPOINT (an OTLP/HTTP collector); empty = no traces."""

    otel_endpoint: str = ""

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Telemetry:
        return cls(otel_endpoint=(settings or load_settings()).otel_endpoint)


def _export(context: dg.RunStatusSensorContext, telemetry: Telemetry) -> dg.SkipReason | None:
    if not telemetry.otel_endpoint:
        return dg.SkipReason("RATCHET_OTEL_ENDPOINT is not set: runs are not traced")
    run = context.dagster_run
    spans = trace_run(context.instance, run.run_id, telemetry.otel_endpoint)
    return dg.SkipReason(
        f"run {run.run_id}: {spans} spans exported" if spans else f"run {run.run_id}: traced"
    )


@dg.run_status_sensor(
    name="night_trace_on_success",
    run_status=dg.DagsterRunStatus.SUCCESS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Export each successful run as an OpenTelemetry trace (when RATCHET_OTEL_ENDPOINT is set).",
)
def night_trace_on_success(context: dg.RunStatusSensorContext, telemetry: Telemetry) -> dg.SkipReason | None:
    return _export(context, telemetry)


@dg.run_failure_sensor(
    name="night_trace_on_failure",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Export each failed run as an OpenTelemetry trace (when RATCHET_OTEL_ENDPOINT is set).",
)
def night_trace_on_failure(context: dg.RunFailureSensorContext, telemetry: Telemetry) -> dg.SkipReason | None:
    return _export(context, telemetry)


@dg.definitions
def run_trace_sensors() -> dg.Definitions:
    """This module's sensors and their ``telemetry`` resource."""
    return dg.Definitions(
        sensors=[night_trace_on_success, night_trace_on_failure],
        resources={"telemetry": Telemetry.from_settings()},
    )
