"""OpenTelemetry traces, exported over OTLP/HTTP to the collector ``RATCHET_OTEL_ENDPOINT`` names; shared by the
gateway (``ratchet_gateway.tracing``: a span per model request, a child per upstream call) and the night
(``ratchet_assets.run_trace``: a span per asset materialisation, one trace per run).

Off unless the endpoint is set, and then free: the OpenTelemetry SDK is imported only by :func:`start_tracing`,
which a caller reaches only after checking ``settings.otel_endpoint``. Spans leave in batches from the SDK's own
thread (``BatchSpanProcessor``), so exporting never waits on the collector; :meth:`Tracing.shutdown` flushes what
is queued. Nothing here is a process-wide global: each gateway app and each export of a night holds its own
provider, so tests can give each its own exporter.

The standard variables are honoured by the SDK: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the
service name defaults to ``ratchet-gateway`` / ``ratchet-night``), ``OTEL_EXPORTER_OTLP_HEADERS`` (a collector's
credentials: they go to the collector, never into a span or a log).
"""

from __future__ import annotations

from typing import Any

TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for traces under the collector's base URL


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of `endpoint` (a collector's base URL, e.g. ``http://collector:4318``; a URL that
    already ends in ``/v1/traces`` is kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


class Tracing:
    """A tracer provider whose spans are exported in batches; :meth:`shutdown` flushes and stops it."""

    def __init__(self, provider: Any):
        self.provider = provider

    def tracer(self, name: str) -> Any:
        """The tracer of instrumentation scope `name` (e.g. ``ratchet.gateway``)."""
        return self.provider.get_tracer(name)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every span ended so far; False when the exporter did not finish in `timeout_s`."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        """Flush, then stop exporting (blocks up to the exporter's timeout: call it off the event loop)."""
        self.provider.shutdown()


def start_tracing(endpoint: str, service_name: str, exporter: Any = None) -> Tracing:
    """Tracing to the OTLP/HTTP collector at `endpoint` as service `service_name` (unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` names another); `exporter` replaces the OTLP exporter (tests: the SDK's
    ``InMemorySpanExporter``)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({})  # the environment's attributes (OTEL_SERVICE_NAME wins over ours)
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=traces_url(endpoint))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider)
