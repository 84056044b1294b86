"""A finished Dagster run as one OpenTelemetry trace (``ratchet_core.tracing``): a span for the run and a child per
asset it materialised, with the asset key, the partition, the numbers of its materialisation metadata
(``dagster/row_count`` and the night's other counts), its duration and whether it succeeded; an asset that runs
several steps (a graph asset such as ``examples``: plan, key ranges, merge) has a child span per step.

The trace is built after the run from its event log, so it needs no code in the assets and covers every way a night
runs: the ``night_trace_on_success`` / ``_on_failure`` sensors (``ratchet_assets/defs/run_trace_sensors.py``) for
runs the daemon launches, and ``ratchet demo``'s nights, which it runs in process. A run is exported once: the
``ratchet/otel_trace`` tag marks it. Span times are the events' own, so a trace shows when each step really ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCOPE = "ratchet.night"
SERVICE_NAME = "ratchet-night"
EXPORTED_TAG = "ratchet/otel_trace"  # set on a run once its trace was exported


def _ns(timestamp: float) -> int:
    return int(timestamp * 1e9)


def _numbers(metadata: dict[str, Any]) -> dict[str, Any]:
    """The numeric entries of a materialisation's metadata as span attributes (never text: paths and previews stay
    in Dagster)."""
    out: dict[str, Any] = {}
    for key, entry in metadata.items():
        value = getattr(entry, "value", entry)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        name = (
            "dagster.row_count" if key == "dagster/row_count" else "ratchet.metadata." + key.replace("/", ".")
        )
        out[name] = value
    return out


@dataclass
class _Step:
    key: str
    start: float
    end: float | None = None
    ok: bool = False
    error: str = ""


@dataclass
class _Asset:
    """The steps of one asset node (a graph-backed asset, such as ``examples``, runs several)."""

    node: str
    steps: list[_Step] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # the asset keys it materialised
    attrs: dict[str, Any] = field(default_factory=dict)


def _read(instance: Any, run_id: str) -> tuple[float | None, float | None, bool, dict[str, _Asset]]:
    """(run start, run end, success, asset nodes by name) from the run's event log."""
    import dagster as dg

    t = dg.DagsterEventType
    start = end = None
    ok = False
    steps: dict[str, _Step] = {}
    nodes: dict[str, _Asset] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type
        if kind in (t.RUN_STARTING, t.RUN_START) and start is None:
            start = entry.timestamp
        elif kind in (t.RUN_SUCCESS, t.RUN_FAILURE, t.RUN_CANCELED):
            end, ok = entry.timestamp, kind == t.RUN_SUCCESS
        elif kind == t.STEP_START and entry.step_key:
            steps[entry.step_key] = step = _Step(entry.step_key, entry.timestamp)
            node = entry.step_key.split(".", 1)[0]  # a graph asset's steps are "<asset node>.<op>"
            nodes.setdefault(node, _Asset(node)).steps.append(step)
        elif entry.step_key in steps:
            step = steps[entry.step_key]
            if kind in (t.STEP_SUCCESS, t.STEP_FAILURE):
                step.end, step.ok = entry.timestamp, kind == t.STEP_SUCCESS
                if kind == t.STEP_FAILURE:
                    err = getattr(event.event_specific_data, "error", None)
                    while getattr(err, "cause", None) is not None:  # Dagster wraps the asset's own error
                        err = err.cause
                    step.error = getattr(err, "cls_name", None) or "step_failure"
            elif kind == t.ASSET_MATERIALIZATION:
                mat = event.event_specific_data.materialization
                asset = nodes[entry.step_key.split(".", 1)[0]]
                asset.keys.append(mat.asset_key.to_user_string())
                asset.attrs.update(_numbers(dict(mat.metadata)))
    return start, end, ok, nodes


def export_run(tracing: Any, instance: Any, run_id: str) -> int:
    """Export run `run_id` of `instance` as one trace through `tracing` (a ``ratchet_core.tracing.Tracing``): a
    span for the run, a child per asset, and under an asset that ran several steps a child per step. The number of
    spans made (0 while the run has not ended)."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    run = instance.get_run_by_id(run_id)
    if run is None:
        return 0
    start, end, ok, nodes = _read(instance, run_id)
    if end is None:
        return 0
    if start is None:
        start = min((s.start for a in nodes.values() for s in a.steps), default=end)
    partition = run.tags.get("dagster/partition", "")
    common = {"dagster.partition": partition} if partition else {}
    tracer = tracing.tracer(SCOPE)
    made = 0

    def span(name: str, parent: Any, t0: float, t1: float, attrs: dict[str, Any], error: str | None) -> Any:
        nonlocal made
        s = tracer.start_span(
            name,
            context=trace.set_span_in_context(parent) if parent is not None else None,
            start_time=_ns(t0),
            attributes={**common, **attrs},
        )
        if error is not None:
            s.set_attribute("error.type", error)
            s.set_status(Status(StatusCode.ERROR))
        made += 1
        return s

    root = span(
        f"{run.job_name} {partition}".strip(),
        None,
        start,
        end,
        {"dagster.run_id": run_id, "dagster.job": run.job_name, "ratchet.success": ok},
        None if ok else "run_failure",
    )
    for asset in sorted(nodes.values(), key=lambda a: a.steps[0].start):
        t0 = min(s.start for s in asset.steps)
        t1 = max(s.end if s.end is not None else end for s in asset.steps)
        failed = [s for s in asset.steps if not s.ok]
        key = ",".join(dict.fromkeys(asset.keys)) or asset.node
        a = span(
            f"materialize {key}",
            root,
            t0,
            t1,
            {
                "dagster.asset_key": key,
                "ratchet.success": not failed,
                "ratchet.seconds": round(t1 - t0, 3),
                **asset.attrs,
            },
            (failed[0].error or "not_finished") if failed else None,
        )
        if len(asset.steps) > 1:
            for step in asset.steps:
                step_end = step.end if step.end is not None else end
                s = span(
                    step.key,
                    a,
                    step.start,
                    step_end,
                    {"dagster.step_key": step.key, "ratchet.success": step.ok},
                    None if step.ok else (step.error or "not_finished"),
                )
                s.end(end_time=_ns(step_end))
        a.end(end_time=_ns(t1))
    root.end(end_time=_ns(end))
    return made


def trace_run(instance: Any, run_id: str, endpoint: str, exporter: Any = None) -> int:
    """Export run `run_id` to the collector at `endpoint` (``RATCHET_OTEL_ENDPOINT``) unless it was already
    exported or has not ended; flushes before it returns. The number of spans exported (0: nothing to do)."""
    run = instance.get_run_by_id(run_id)
    if not endpoint or run is None or run.tags.get(EXPORTED_TAG):
        return 0
    from ratchet_core.tracing import start_tracing

    tracing = start_tracing(endpoint, SERVICE_NAME, exporter)
    try:
        n = export_run(tracing, instance, run_id)
    finally:
        tracing.shutdown()  # flushes: a sensor tick or a night's process may end right after
    if n:
        instance.add_run_tags(run_id, {EXPORTED_TAG: "exported"})
    return n
