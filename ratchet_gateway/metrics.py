"""Prometheus metrics of one gateway app (own registry, so several apps in one process do not collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "ratchet_requests",
            "Chat requests by who served and HTTP status",
            ["served_by", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "ratchet_request_latency_seconds",
            "Request latency by who served",
            ["served_by"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "ratchet_gateway_overhead_seconds",
            "Gateway's own time per request",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.errors = Counter("ratchet_errors", "Errors returned, by OpenAI error type", ["type"], registry=r)
        self.ledger_commit = Histogram(
            "ratchet_ledger_commit_seconds",
            "Journal group-commit (write+fdatasync)",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.ledger_batch = Histogram(
            "ratchet_ledger_commit_rows",
            "Rows per group commit",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.ledger_lag = Gauge(
            "ratchet_ledger_lag_rows", "Rows acknowledged but not yet in DuckDB", registry=r
        )
        self.manifest_rejected = Counter(
            "ratchet_manifest_rejected", "Unsigned or forged manifest rows ignored", registry=r
        )
        self.manifest_sequence = Gauge(
            "ratchet_manifest_sequence", "Sequence of the manifest in force", registry=r
        )
        self.pairs = Counter(
            "ratchet_pairs", "Shadow/audit pairs by outcome", ["role", "outcome"], registry=r
        )

    def on_commit(self, seconds: float, rows: int) -> None:
        self.ledger_commit.observe(seconds)
        self.ledger_batch.observe(rows)

    def render(self) -> bytes:
        return generate_latest(self.registry)
