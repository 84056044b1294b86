"""The gateway's app factory: ``create_app(settings)`` -> FastAPI app serving the OpenAI-compatible data plane.

Routes: ``POST /v1/chat/completions`` (``ratchet_gateway.chat``), ``GET /v1/models``, ``/healthz``, ``/readyz``,
``/metrics``, safety-only admin routes (``ratchet_gateway.admin_routes``), receipts and the public key
(``ratchet_gateway.receipts_routes``).

Hot-path choices (measured, see ``benchmarks/bench_gateway.py``): no ASGI middleware (every response sets its
own ``x-ratchet-*`` headers; error handlers do it for framework errors), the chat route takes the raw Request
(no FastAPI dependency solving, orjson parse + one pydantic validation), one keep-alive aiohttp session per
upstream, the durable ledger write is a shared journal group commit. litellm is imported once at startup for
provider resolution and prices, never per request on OpenAI-compatible upstreams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from ratchet_core.redact import redact_text, redact_value
from ratchet_core.settings import Settings, load_settings
from ratchet_gateway.auth import KeyStore, load_pepper, parse_api_keys
from ratchet_gateway.chat import ChatHandler, new_request_id
from ratchet_gateway.errors import error_body
from ratchet_gateway.ledger import Ledger
from ratchet_gateway.metrics import Metrics
from ratchet_gateway.safety import SafetyState
from ratchet_gateway.upstream import Prices, Upstream, model_prices

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
    teacher_via_litellm: bool = (
        False  # force litellm.acompletion for the teacher (measuring; non-OpenAI providers)
    )


def _public_keys(settings: Settings) -> list[Any]:
    """Keys that may sign manifests: $RATCHET_HOME/keys/signing.pub, else the public half of the signing key."""
    from ratchet_stats import keys

    pub = settings.home / "keys" / "signing.pub"
    if pub.exists():
        return [keys.load_public_key(pub.read_bytes())]
    spec = settings.signing_key
    try:
        if spec.startswith("@"):
            return [keys.load_private_key_file(Path(spec[1:]).expanduser()).public_key()]
        if spec:
            return [keys.load_private_key(spec).public_key()]
        if settings.signing_key_path.exists():
            return [keys.load_private_key_file(settings.signing_key_path).public_key()]
    except Exception as exc:  # a broken key must not be echoed; say where to look
        log.warning(
            "cannot derive the manifest public key (%s); every manifest will be rejected", type(exc).__name__
        )
    return []


class Gateway:
    """Everything one app instance holds: config, keys, upstreams, ledger, routing state, metrics."""

    def __init__(self, settings: Settings, options: GatewayOptions):
        self.settings = settings
        self.options = options
        self.metrics = Metrics()
        self.keys = KeyStore(parse_api_keys(settings.api_keys), load_pepper(settings.pepper, settings.home))
        teacher_bare = settings.teacher_model.split("/", 1)[-1]
        aliases = [a.strip() for a in settings.model_aliases.split(",") if a.strip()]
        self.model_names = {"ratchet", settings.teacher_model, teacher_bare, *aliases}
        self.redact: Callable[[Any], Any] = redact_value if settings.redact_pii else (lambda v: v)
        self.student_prices = options.student_prices
        self.clock_now = None
        if os.environ.get("RATCHET_DAY_SECONDS"):
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
        self.ledger = Ledger(
            settings.home / "ledger",
            settings.lake_root,
            settings.segment_seconds,
            replica_base=options.replica,
            load_interval=options.load_interval,
            on_commit=self.metrics.on_commit,
        )
        self.teacher: Upstream | None = None
        self.student: Upstream | None = None
        self.engine = None
        self.public_keys: list[Any] = []
        self._poller: asyncio.Task | None = None
        try:
            from ratchet_core.workloads import TASKS, compare
        except ImportError:  # pragma: no cover
            TASKS, compare = {}, None
        self._tasks, self._compare = TASKS, compare

    # comparator for pair rows --------------------------------------------------------------------------------
    def compare(self, task: str, teacher_msg: dict | None, student_msg: dict | None) -> bool:
        if teacher_msg is None or student_msg is None:
            return False
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
        await asyncio.to_thread(self.ledger.open)
        self.teacher = Upstream(
            s.teacher_model,
            s.teacher_api_base,
            s.teacher_api_key,
            s.upstream_timeout_s,
            force_litellm=self.options.teacher_via_litellm,
        )
        self.student = Upstream(
            "student", s.student_base_url, s.student_api_key, s.student_timeout_s, resolve=False
        )
        await self.teacher.start()
        await self.student.start()
        self.teacher_prices = await asyncio.to_thread(model_prices, s.teacher_model)
        from ratchet_core.control_db import make_engine

        self.engine = make_engine(s.control_db_url)
        if self.options.manifest_loader is None:
            self.public_keys = (
                self.options.public_keys if self.options.public_keys is not None else _public_keys(s)
            )
        from ratchet_gateway import safety

        await asyncio.to_thread(safety.ensure_tables, self.engine)
        await self.poll_once()
        self._poller = asyncio.create_task(self._poll_forever())
        log.info(
            "gateway replica %s ready (teacher %s, fast path %s)",
            self.ledger.replica,
            s.teacher_model,
            self.teacher.fast,
        )

    async def stop(self) -> None:
        if self._poller:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._bg:
            await asyncio.wait(list(self._bg), timeout=self.options.pair_drain_timeout_s)
        for up in (self.teacher, self.student):
            if up is not None:
                await up.close()
        await asyncio.to_thread(self.ledger.close)

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
            self.metrics.ledger_lag.set(self.ledger.lag_rows)

    def apply_local_safety(self, student_disabled: bool = False, pin: str | None = None) -> None:
        if student_disabled:
            self.local_safety.student_disabled = True
        if pin:
            self.local_safety.pins.add(pin)
        self.safety = self.local_safety.merge(self.db_safety)


def _headers(request_id: str | None = None) -> dict[str, str]:
    return {
        "x-ratchet-request-id": request_id or new_request_id(),
        "x-ratchet-served-by": "teacher",
        "x-ratchet-version": "",
        "x-ratchet-overhead-ms": "0.000",
    }


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(obj), status_code=status, media_type="application/json", headers=headers or _headers()
    )


def openai_error(status: int, message: str, code: str | None = None) -> Response:
    return Response(
        error_body(status, message, code=code),
        status_code=status,
        media_type="application/json",
        headers=_headers(),
    )


def create_app(settings: Settings | None = None, options: GatewayOptions | None = None) -> FastAPI:
    """The gateway app. Starting it (lifespan) opens this replica's ledger and follows the manifest."""
    settings = settings or load_settings()
    gw = Gateway(settings, options or GatewayOptions())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    app = FastAPI(title="Ratchet gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = gw
    chat = ChatHandler(gw)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await chat(request)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if gw.keys.authenticate(request.headers.get("authorization")) is None:
            return openai_error(
                401, "invalid or missing API key: send 'Authorization: Bearer <key>'", "invalid_api_key"
            )
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "ratchet"}
            for name in sorted(gw.model_names)
        ]
        return json_response({"object": "list", "data": data})

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"status": "ok", "replica": gw.ledger.replica})

    @app.get("/readyz")
    async def readyz() -> Response:
        checks = {"ledger_writable": gw.ledger.writable, "manifest_loaded": gw.manifest_loaded}
        ok = all(checks.values())
        body = {
            "status": "ready" if ok else "not ready",
            "checks": checks,
            "manifest_sequence": gw.manifest.sequence,
            "replica": gw.ledger.replica,
        }
        if gw.ledger.error:
            body["ledger_error"] = redact_text(gw.ledger.error)
        return json_response(body, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        gw.metrics.ledger_lag.set(gw.ledger.lag_rows)
        return Response(gw.metrics.render(), media_type="text/plain; version=0.0.4", headers=_headers())

    from ratchet_gateway.admin_routes import add_admin_routes
    from ratchet_gateway.proof_routes import add_proof_routes
    from ratchet_gateway.receipts_routes import add_receipt_routes

    add_admin_routes(app, gw)
    add_receipt_routes(app, gw)
    add_proof_routes(app, gw)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        msg = {
            404: f"no route {request.url.path}; the API is under /v1 (see GET /v1/models)",
            405: f"method {request.method} is not allowed on {request.url.path}",
        }.get(exc.status_code, str(exc.detail))
        return openai_error(exc.status_code, msg)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return openai_error(400, f"invalid request: {exc.errors()[:3]}; fix the body and retry")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("unexpected error: %s", redact_text(f"{type(exc).__name__}: {exc}"))
        return openai_error(
            500, "internal gateway error; retry, and report it with the request id if it persists"
        )

    return app


def app_from_env() -> FastAPI:
    """uvicorn factory for ``ratchet gateway --workers N`` (each worker process builds its own app)."""
    return create_app(load_settings())
