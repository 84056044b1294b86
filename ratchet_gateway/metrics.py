"""Prometheus metrics of one gateway app (own registries, so several apps in one process do not collide).

Two registries: the replica's own series (``registry``: anyone may read them at ``GET /metrics``, they name no
client) and the per-client series (``client_registry``: refusals and spend by client name), rendered only for a
caller with the admin key (``ratchet_gateway.routers.health``)."""

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
        # series that name a client: only for the admin key (module docstring)
        c = self.client_registry = CollectorRegistry()
        self.client_limited = Counter(
            "ratchet_client_limited",
            "Model requests refused with a 429 before any model call, by client and limit (rpm, tpm, budget)",
            ["client", "limit"],
            registry=c,
        )
        self.client_spend = Gauge(
            "ratchet_client_spend_usd",
            "Each client's spend in its current budget window (day, month), summed over every replica",
            ["client", "period"],
            registry=c,
        )
        self.client_closed = Counter(
            "ratchet_client_closed",
            "Requests whose client left before sending the whole body (answered 499, not an error), by route",
            ["route"],
            registry=r,
        )
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

        self.upstream_faults = Counter(
            "ratchet_upstream_faults",
            "Failed model calls by upstream (teacher|student|embeddings) and error code (timeout, broken stream, ...)",
            ["upstream", "code"],
            registry=r,
        )
        self.breaker_state = Gauge(
            "ratchet_student_breaker_state",
            "Student circuit breaker per endpoint: 0 closed, 1 half-open (probing), 2 open (teacher answers)",
            ["endpoint"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "ratchet_student_breaker_transitions",
            "Student circuit breaker state changes per endpoint, by the state entered",
            ["endpoint", "state"],
            registry=r,
        )
        self.breaker_bypassed = Counter(
            "ratchet_student_breaker_bypassed",
            "Student calls not made because the endpoint's breaker was open (request path and shadows)",
            ["endpoint"],
            registry=r,
        )
        self.contract_violations = Counter(
            "ratchet_contract_violations",
            "Confident student answers that broke the request's contract (the teacher answered instead), by kind",
            ["kind"],
            registry=r,
        )
        from ratchet_core.contract import VIOLATION_KINDS

        for kind in VIOLATION_KINDS:
            self.contract_violations.labels(kind)

        self._served: dict[str, tuple] = {}

    def served(self, served_by: str, seconds: float, overhead_s: float) -> None:
        """One answered chat request: ``requests{served_by, 200}``, its latency and the gateway's own time (the hot
        path: the labelled children are looked up once per ``served_by``, not per request)."""
        children = self._served.get(served_by)
        if children is None:
            children = (self.requests.labels(served_by, "200"), self.latency.labels(served_by))
            self._served[served_by] = children
        children[0].inc()
        children[1].observe(seconds)
        self.overhead.observe(overhead_s)

    def on_commit(self, seconds: float, rows: int) -> None:
        self.ledger_commit.observe(seconds)
        self.ledger_batch.observe(rows)

    def render(self, per_client: bool = False) -> bytes:
        """The Prometheus text: the replica's series, and with `per_client` the series that name clients."""
        text = generate_latest(self.registry)
        return text + generate_latest(self.client_registry) if per_client else text
