"""An OpenTelemetry collector for tests: an OTLP/HTTP receiver on loopback that decodes every
``ExportTraceServiceRequest`` it is sent (opentelemetry-proto), as a real collector would."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ReceivedSpan:
    name: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    attributes: dict[str, Any]  # plain Python values
    resource: dict[str, Any]
    error: bool  # status code ERROR
    start_ns: int
    end_ns: int


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


@dataclass
class Receiver:
    url: str
    posts: list[tuple[str, str]] = field(default_factory=list)  # (path, content-type) of each export
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 (its ``url`` is the collector's base URL, as RATCHET_OTEL_ENDPOINT)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    state: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
            with state.lock:
                state.posts.append((self.path, self.headers.get("content-type", "")))
                for rs in msg.resource_spans:
                    resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            state.spans.append(
                                ReceivedSpan(
                                    s.name,
                                    s.trace_id,
                                    s.span_id,
                                    s.parent_span_id,
                                    {kv.key: _value(kv.value) for kv in s.attributes},
                                    resource,
                                    s.status.code == s.status.STATUS_CODE_ERROR,
                                    s.start_time_unix_nano,
                                    s.end_time_unix_nano,
                                )
                            )
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = Receiver(f"http://127.0.0.1:{server.server_port}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
