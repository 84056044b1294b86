"""The gateway's state: one :class:`Gateway` per app instance, everything a request needs.

Config, client keys, upstreams (teacher, student), this replica's ledger, the release manifest in force and the
safety switches, metrics and the background tasks that follow the manifest. ``create_app`` builds one and
stores it as ``app.state.gateway``; routes reach it through the ``ratchet_gateway.deps.get_gateway`` dependency
(the chat route through its handler, see ``ratchet_gateway.routers.chat``). Routers import this module and
``deps``, never the app factory, so there is no import cycle inside the package.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from ratchet_core import artifact_store
from ratchet_core.api_keys import KeyStore, load_pepper, parse_api_keys
from ratchet_core.layout import ArtifactLayout
from ratchet_core.pricing import Prices, embedding_prices, model_prices
from ratchet_core.redact import redact_text, redact_value
from ratchet_core.routing import SafetyState
from ratchet_core.settings import Settings
from ratchet_gateway.ledger import Ledger
from ratchet_gateway.limits import ClientLimiter
from ratchet_gateway.metrics import Metrics
from ratchet_gateway.offload import Offload
from ratchet_gateway.proofs import KeyTreeCache
from ratchet_gateway.responses import ratchet_headers
from ratchet_gateway.sealed_index import SealedIndex
from ratchet_gateway.upstream import Upstream

log = logging.getLogger("ratchet.gateway")

# The demo student's price: a 0.5B-1.5B model on a rented GPU serves ~1M tokens for a few cents; we charge
# $0.02 / 1M input and $0.06 / 1M output tokens unless the deployment says otherwise (GatewayOptions).
DEFAULT_STUDENT_PRICES = Prices(2e-8, 6e-8)


@dataclass
class GatewayOptions:
    """Knobs that are not environment settings (tests, benchmarks, embedding)."""

    replica: str | None = None  # replica base name; default the hostname (slot index appended)
    student_prices: Prices = field(default_factory=lambda: DEFAULT_STUDENT_PRICES)
    public_keys: list[Any] | None = None  # manifest verification keys; default from $RATCHET_HOME
    manifest_loader: Callable[[], tuple[Any, int]] | None = None  # () -> (Manifest | None, rejected rows)
    load_interval: float = 0.2
    pair_drain_timeout_s: float = 30.0
    # force litellm for the teacher and the embedding model (measuring; the path non-OpenAI providers take)
    teacher_via_litellm: bool = False
    # ``ratchet_gateway.hooks.RequestHook``s, run after the app's own (registered by ``create_app``)
    hooks: list[Any] = field(default_factory=list)
    # where the gateway's spans go instead of RATCHET_OTEL_ENDPOINT's collector (tests: an InMemorySpanExporter);
    # tracing is on only while the endpoint is set (``ratchet_gateway.tracing``)
    span_exporter: Any = None


def manifest_public_keys(settings: Settings) -> list[Any]:
    """The manifest trust roots ($RATCHET_HOME/keys/signing.pub, else the signing key's public half); the control
    DB's signed key history carries them through key rotations (ratchet_core.keys, manifest.latest_verified)."""
    from ratchet_core.keys import root_public_keys

    return root_public_keys(settings)


class Gateway:
    """Everything one app instance holds: config, keys, upstreams, ledger, routing state, metrics."""

    def __init__(self, settings: Settings, options: GatewayOptions):
        self.settings = settings
        self.options = options
        self.metrics = Metrics()
        self.offload = Offload()  # the large-body lane (``ratchet_gateway.offload``)
        self.limits = ClientLimiter(self)  # per-client limits and budgets (a request hook, ``create_app``)
        self.keys = KeyStore(parse_api_keys(settings.api_keys), load_pepper(settings.pepper, settings.home))
        teacher_bare = settings.teacher_model.split("/", 1)[-1]
        aliases = [a.strip() for a in settings.model_aliases.split(",") if a.strip()]
        self.model_names = {"ratchet", settings.teacher_model, teacher_bare, *aliases}
        self.redact: Callable[[Any], Any] = redact_value if settings.redact_pii else (lambda v: v)
        self.student_prices = options.student_prices
        self.clock_now = None
        if settings.day_seconds:  # the accelerated clock (demos): rows are stamped with its day
            from ratchet_core import clock

            self.clock_now = clock.now
        from ratchet_core.manifest import Manifest

        self.manifest = Manifest.default()
        self.manifest_loaded = False
        self.db_safety = SafetyState()
        self.local_safety = SafetyState()
        self.safety = SafetyState()
        self._rejected_seen = 0
        self._bg: set[asyncio.Task] = set()
        # the sealed request-id index the feedback routes look ids up in (``ratchet_gateway.sealed_index``)
        self.sealed_index = SealedIndex(settings.lake_root)
        self._catching_up: asyncio.Task | None = None
        self.ledger = Ledger(
            settings.home / "ledger",
            settings.lake_root,
            settings.segment_seconds,
            replica_base=options.replica or settings.replica_id,
            load_interval=options.load_interval,
            on_commit=self.metrics.on_commit,
            erasures=self.erasure_snapshot,  # erasures recorded by `ratchet admin erase` (governance.erase)
            on_sealed=self.sealed_index.sealed,
        )
        self.teacher: Upstream | None = None
        self.student: Upstream | None = None
        self.embedder: Upstream | None = (
            None  # RATCHET_EMBEDDING_MODEL's endpoint (ratchet_gateway.apis.embeddings)
        )
        self.engine = None
        self.public_keys: list[Any] = []
        self.key_trees = KeyTreeCache()  # training-key trees behind the proof routes, per BOM file
        # where the night's artifacts (BOMs, receipts) are; no path under the root is built anywhere else
        self.artifacts = ArtifactLayout(settings.artifacts_root, store=artifact_store.from_settings(settings))
        self._poller: asyncio.Task | None = None
        try:
            from ratchet_core.workloads import TASKS, compare
        except ImportError:  # pragma: no cover
            TASKS, compare = {}, None
        self._tasks, self._compare = TASKS, compare

    def headers(self, request_id: str | None = None) -> dict[str, str]:
        """The x-ratchet-* headers of a response nobody served, with the manifest sequence in force."""
        h = ratchet_headers(request_id)
        h["x-ratchet-manifest"] = str(self.manifest.sequence)
        return h

    def erasure_snapshot(self) -> Any:
        """Erased request ids and erasure scopes from the control DB; the ledger's loader applies them to this
        replica's files and reports what it scrubbed (``ratchet_core.erasure_scope``)."""
        from ratchet_core.erasure_scope import ErasureSnapshot, snapshot

        return ErasureSnapshot() if self.engine is None else snapshot(self.engine)

    # comparator for pair rows --------------------------------------------------------------------------------
    def compare(self, task: str, teacher_msg: dict | None, student_msg: dict | None) -> bool:
        if teacher_msg is None or student_msg is None:
            return False
        policy = self.manifest.policies.get(task)  # the signed per-task comparator (ratchet_core.task_policy)
        if self._compare is not None and policy is not None and policy.comparator is not None:
            return bool(self._compare(policy.comparator, teacher_msg, student_msg))
        if self._compare is not None and task in self._tasks:
            return bool(self._compare(task, teacher_msg, student_msg))

        def canon(m: dict) -> bytes:  # unknown task: canonical equality of content and tool calls
            calls = [
                {
                    "name": (c.get("function") or {}).get("name"),
                    "arguments": (c.get("function") or {}).get("arguments"),
                }
                for c in m.get("tool_calls") or []
            ]
            return orjson.dumps(
                {"content": (m.get("content") or "").strip(), "calls": calls}, option=orjson.OPT_SORT_KEYS
            )

        return canon(teacher_msg) == canon(student_msg)

    # lifecycle -----------------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        if self.keys.empty:
            log.warning(
                "RATCHET_API_KEYS is empty: every request gets 401; set it to name:secret,... or @file"
            )
        # the loop group-commits the journal itself (ratchet_gateway.ledger, loop mode: no writer thread)
        await asyncio.to_thread(self.ledger.open, asyncio.get_running_loop())
        self.teacher = Upstream(
            s.teacher_model,
            s.teacher_api_base,
            s.teacher_api_key,
            s.upstream_timeout_s,
            force_litellm=self.options.teacher_via_litellm,
            offload=self.offload,
            max_response_bytes=s.upstream_max_response_bytes,
            extras=s.provider_extras,
        )
        self.student = Upstream(
            "student",
            s.student_base_url,
            s.student_api_key,
            s.student_timeout_s,
            resolve=False,
            offload=self.offload,
            max_response_bytes=s.upstream_max_response_bytes,
            extras=s.provider_extras,
        )
        await self.teacher.start()
        await self.student.start()
        if s.embedding_model:
            self.embedder = Upstream(
                s.embedding_model,
                s.embedding_api_base,
                s.embedding_api_key or None,
                s.upstream_timeout_s,
                force_litellm=self.options.teacher_via_litellm,
                max_response_bytes=s.upstream_max_response_bytes,
                extras=s.provider_extras,
            )
            await self.embedder.start()
            self.embedding_prices = await asyncio.to_thread(embedding_prices, s.embedding_model)
        self.teacher_prices = await asyncio.to_thread(model_prices, s.teacher_model)
        from ratchet_gateway.teacher_equivalent import TeacherEquivalent

        self.teacher_equivalent = await TeacherEquivalent.create(s.teacher_model, self.teacher_prices)
        from ratchet_core.control_db import ensure_schema, make_engine

        self.engine = make_engine(s.control_db_url)
        if self.options.manifest_loader is None:
            self.public_keys = (
                self.options.public_keys if self.options.public_keys is not None else manifest_public_keys(s)
            )

        await asyncio.to_thread(ensure_schema, self.engine)
        self.sealed_index.engine = self.engine
        self.catch_up_index()  # segments sealed before the index existed, in the background
        await self.poll_once()
        await self.limits.poll()  # limits in force before the first request
        self._poller = asyncio.create_task(self._poll_forever())
        log.info(
            "gateway replica %s ready (teacher %s, fast path %s, json_schema sent %s)",
            self.ledger.replica,
            s.teacher_model,
            self.teacher.fast,
            s.teacher_json_schema,
        )

    async def stop(self) -> None:
        if self._poller:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._bg:
            await asyncio.wait(list(self._bg), timeout=self.options.pair_drain_timeout_s)
        try:
            await self.limits.close()
        except Exception as exc:
            log.warning("client spend not flushed at stop: %s", redact_text(f"{type(exc).__name__}: {exc}"))
        for up in (self.teacher, self.student, self.embedder):
            if up is not None:
                await up.close()
        await asyncio.to_thread(self.ledger.close)
        self.offload.close()

    def spawn(self, coro: Coroutine) -> None:
        task = asyncio.create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # manifest + safety following -----------------------------------------------------------------------------
    def _load_manifest(self) -> tuple[Any, int]:
        if self.options.manifest_loader is not None:
            return self.options.manifest_loader()
        from ratchet_core.manifest import latest_verified

        return latest_verified(self.engine, self.public_keys)

    async def poll_once(self) -> None:
        from ratchet_core.manifest import Manifest
        from ratchet_gateway import safety

        try:
            manifest, rejected = await asyncio.to_thread(self._load_manifest)
            db_safety = await asyncio.to_thread(safety.active_state, self.engine)
        except Exception as exc:  # keep the last good state; /readyz shows whether we ever loaded one
            log.warning("manifest poll failed: %s", redact_text(f"{type(exc).__name__}: {exc}"))
            return
        if rejected > self._rejected_seen:
            self.metrics.manifest_rejected.inc(rejected - self._rejected_seen)
        self._rejected_seen = rejected
        self.manifest = manifest if manifest is not None else Manifest.default()
        self.metrics.manifest_sequence.set(self.manifest.sequence)
        self.db_safety = db_safety
        self.safety = self.local_safety.merge(db_safety)
        self.manifest_loaded = True

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.manifest_poll_seconds)
            await self.poll_once()
            try:
                await self.limits.poll()
            except Exception as exc:  # keep the limits last read; the next poll retries
                log.warning("client limits poll failed: %s", redact_text(f"{type(exc).__name__}: {exc}"))
            self.metrics.ledger_lag.set(self.ledger.lag_rows)
            if self.sealed_index.due:
                self.catch_up_index()

    def catch_up_index(self) -> None:
        """Index the lake's segments the sealed request-id index lacks (one catch-up at a time, in a thread)."""
        if self._catching_up is not None and not self._catching_up.done():
            return

        async def run() -> None:
            try:
                await asyncio.to_thread(self.sealed_index.catch_up)
            except Exception as exc:  # the next poll tries again
                log.warning(
                    "sealed request index not caught up: %s", redact_text(f"{type(exc).__name__}: {exc}")
                )

        self._catching_up = asyncio.create_task(run())
        self._bg.add(self._catching_up)
        self._catching_up.add_done_callback(self._bg.discard)

    def apply_local_safety(self, student_disabled: bool = False, pin: str | None = None) -> None:
        if student_disabled:
            self.local_safety.student_disabled = True
        if pin:
            self.local_safety.pins.add(pin)
        self.safety = self.local_safety.merge(self.db_safety)
