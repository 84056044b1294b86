"""OpenTelemetry traces of the gateway's model requests, on when ``RATCHET_OTEL_ENDPOINT`` is set
(``ratchet_core.tracing``; ``create_app`` imports this module only then, so a gateway without it runs none of it).

One SERVER span per model request (``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/messages``,
``/v1/embeddings``), started by a request hook (``ratchet_gateway.hooks``) before the body is read and ended once
the last byte went out, with the GenAI semantic-convention attributes (``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.*`` including cache
tokens when the upstream reports them, ``gen_ai.request.max_tokens`` / ``temperature`` when sent) and Ratchet's
(``ratchet.served_by``, ``ratchet.task``, ``ratchet.version``, ``ratchet.cascade``, ``ratchet.request_id``,
``ratchet.client``: the client's name, never its key), ``http.response.status_code`` and ``error.type``. A request
that carries a W3C ``traceparent`` header continues the caller's trace.

One CLIENT child span per upstream call, made by wrapping the gateway's upstreams (``Upstream.complete``,
``stream_batches``, ``embed``) once they are started: ``ratchet.role`` is ``teacher`` or ``student`` on the request path
and ``audit`` or ``shadow`` off it (the calls ``Gateway.spawn`` starts after the answer, ``chat/pairs.py``), with
``server.address`` / ``server.port``, the upstream's HTTP status, its token usage and, for the student, its
confidence. Off-path spans may end after their request's span: they keep it as their parent.

Never any text: no prompt, answer, tool argument or error message is put in a span (they may hold personal data);
only names, counts, models, statuses and error codes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ratchet_core.tracing import Tracing, start_tracing
from ratchet_gateway.chat.completion import confidence
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.hooks import RequestHook, RequestInfo

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway
    from ratchet_gateway.upstream import Upstream

SCOPE = "ratchet.gateway"
SERVICE_NAME = "ratchet-gateway"

# model routes -> (gen_ai.operation.name, ratchet.api)
MODEL_ROUTES = {
    "/v1/chat/completions": ("chat", "chat.completions"),
    "/v1/responses": ("chat", "responses"),
    "/v1/messages": ("chat", "messages"),
    "/v1/embeddings": ("embeddings", "embeddings"),
}

# litellm's provider names -> the GenAI conventions' gen_ai.provider.name (others are passed as litellm names them)
PROVIDERS = {
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "cohere": "cohere",
    "deepseek": "deepseek",
    "gemini": "gcp.gemini",
    "groq": "groq",
    "mistral": "mistral_ai",
    "openai": "openai",
    "perplexity": "perplexity",
    "vertex_ai": "gcp.vertex_ai",
    "watsonx": "ibm.watsonx.ai",
    "xai": "x_ai",
}
STUDENT_PROVIDER = "ratchet.student"  # the student endpoint (vLLM or Ratchet's student server)

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(slots=True)
class RequestTrace:
    """A model request's span and what its request-path upstream calls reported (role -> attributes)."""

    span: Any
    parent: Any  # the context the upstream calls' spans are children in
    served: dict[str, dict[str, Any]] = field(default_factory=dict)
    token: Any = None


# The traced request the current task serves (set before the body is read; the tasks it starts inherit it).
_request: ContextVar[RequestTrace | None] = ContextVar("ratchet_request_trace", default=None)
# True in the tasks ``Gateway.spawn`` starts: the calls there are off the request path (audit, shadow).
_off_path: ContextVar[bool] = ContextVar("ratchet_off_path", default=False)
# The upstream call's span the next HTTP answer's status belongs to.
_call: ContextVar[Any] = ContextVar("ratchet_upstream_span", default=None)


class GatewayTracing:
    """The gateway's tracing: its provider, the request hook and the upstream wrappers."""

    def __init__(self, endpoint: str, exporter: Any = None):
        self.tracing: Tracing = start_tracing(endpoint, SERVICE_NAME, exporter)
        self.tracer = self.tracing.tracer(SCOPE)
        self.hook = TracingHook(self.tracer)

    def instrument(self, gw: Gateway) -> None:
        """Wrap `gw`'s started upstreams and its off-path spawner (call after ``Gateway.start``)."""
        for up, on_path, off_path, operation, provider in (
            (gw.teacher, "teacher", "audit", "chat", None),
            (gw.student, "student", "shadow", "chat", STUDENT_PROVIDER),
            (gw.embedder, "teacher", "teacher", "embeddings", None),
        ):
            if up is not None:
                _TracedUpstream(self.tracer, up, on_path, off_path, operation, provider).install()
        spawn = gw.spawn

        def spawn_off_path(coro: Any) -> None:
            token = _off_path.set(True)  # the new task copies this context: its calls are off the path
            try:
                spawn(coro)
            finally:
                _off_path.reset(token)

        gw.spawn = spawn_off_path  # type: ignore[method-assign]

    def flush(self, timeout_s: float = 10.0) -> bool:
        return self.tracing.flush(timeout_s)

    def shutdown(self) -> None:
        self.tracing.shutdown()


class TracingHook(RequestHook):
    """Starts a model request's span before its body is read and ends it once the request is over."""

    def __init__(self, tracer: Any):
        self.tracer = tracer

    async def before_body(self, info: RequestInfo) -> None:
        route = MODEL_ROUTES.get(info.path)
        if route is None or info.method != "POST":
            return
        operation, api = route
        parent = None
        if info.header("traceparent") is not None:
            parent = _PROPAGATOR.extract({"traceparent": info.header("traceparent") or ""})
        span = self.tracer.start_span(
            operation,
            context=parent,
            kind=SpanKind.SERVER,
            start_time=time.time_ns() - int((time.perf_counter() - info.t0) * 1e9),
            attributes={
                "gen_ai.operation.name": operation,
                "http.request.method": "POST",
                "url.path": info.path,
                "ratchet.api": api,
            },
        )
        req = RequestTrace(span, trace.set_span_in_context(span))
        req.token = _request.set(req)
        info.notes[self] = req

    async def validated(self, info: RequestInfo, received: Any) -> None:
        req: RequestTrace | None = info.notes.get(self)
        if req is None:
            return
        model = received.req.model
        req.span.update_name(f"chat {model}")
        req.span.set_attributes({"gen_ai.request.model": model, **_request_params(received.body)})

    def completed(self, info: RequestInfo) -> None:
        req: RequestTrace | None = info.notes.pop(self, None)
        if req is None:
            return
        with contextlib.suppress(ValueError):  # completed runs in the context before_body set it in
            _request.reset(req.token)
        span = req.span
        attrs: dict[str, Any] = {"http.response.status_code": info.status}
        for name, value in (
            ("ratchet.request_id", info.request_id),
            ("ratchet.client", info.client),
            ("ratchet.task", info.task),
            ("ratchet.served_by", info.served_by),
        ):
            if value:
                attrs[name] = value
        served = req.served.get(info.served_by) if info.served_by else None
        if served is not None:
            attrs.update({k: v for k, v in served.items() if k not in _CALL_ONLY})
        if info.served_by:
            asked_student = "student" in req.served
            attrs["ratchet.cascade"] = (
                "student" if info.served_by == "student" else "fallback" if asked_student else "teacher"
            )
        if "gen_ai.request.model" in attrs and span.name in ("chat", "embeddings"):  # no validated stage
            span.update_name(f"{span.name} {attrs['gen_ai.request.model']}")
        elif "gen_ai.request.model" in attrs:
            del attrs["gen_ai.request.model"]  # the request span keeps the model the client asked for
        if info.status >= 400:
            error = served.get("error.type") if served else None
            attrs["error.type"] = error or str(info.status)
            if info.status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        span.set_attributes(attrs)
        span.end()


# attributes of an upstream call that stay on its own span (the rest are copied to the request's when it served)
_CALL_ONLY = frozenset({"server.address", "server.port", "ratchet.role", "http.response.status_code"})


def _request_params(body: dict) -> dict[str, Any]:
    """gen_ai.request.* of a chat body: the sampling parameters that were sent (numbers, never text)."""
    out: dict[str, Any] = {}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        out["gen_ai.request.max_tokens"] = max_tokens
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[f"gen_ai.request.{key}"] = float(value)
    return out


def _usage(usage: Any) -> dict[str, int]:
    """gen_ai.usage.* of an OpenAI-shaped ``usage`` (cache tokens as OpenAI or Anthropic, through litellm, name
    them)."""
    if not isinstance(usage, dict):
        return {}
    out: dict[str, int] = {}

    def count(name: str, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = int(value)

    count("gen_ai.usage.input_tokens", usage.get("prompt_tokens"))
    count("gen_ai.usage.output_tokens", usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    count("gen_ai.usage.cache_read.input_tokens", usage.get("cache_read_input_tokens", cached))
    count("gen_ai.usage.cache_creation.input_tokens", usage.get("cache_creation_input_tokens"))
    return out


class _TracedUpstream:
    """Wraps one started ``Upstream``'s calls (instance attributes over its methods) with a CLIENT span each."""

    def __init__(
        self, tracer: Any, up: Upstream, on_path: str, off_path: str, operation: str, provider: str | None
    ):
        self.tracer = tracer
        self.up = up
        self.on_path, self.off_path, self.operation = on_path, off_path, operation
        self.provider = provider or PROVIDERS.get(up.provider, up.provider)
        url = urlsplit(up.base)
        self.server: dict[str, Any] = {}
        if url.hostname:
            self.server["server.address"] = url.hostname
            self.server["server.port"] = url.port or (443 if url.scheme == "https" else 80)

    def install(self) -> None:
        up = self.up
        self._complete, self._stream, self._embed, self._post = (
            up.complete,
            up.stream_batches,
            up.embed,
            up._post,
        )
        up.complete = self.complete  # type: ignore[method-assign]
        up.stream_batches = self.stream_batches  # type: ignore[method-assign]  (``Upstream.stream`` reads it too)
        up.embed = self.embed  # type: ignore[method-assign]
        up._post = self.post  # type: ignore[method-assign]

    # the span of one call --------------------------------------------------------------------------------------
    def _start(self, req: RequestTrace, model: str | None, body: dict, operation: str) -> tuple[Any, str]:
        role = self.off_path if _off_path.get() else self.on_path
        model = model or self.up.model
        attrs = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": model,
            "ratchet.role": role,
            **self.server,
            **_request_params(body),
        }
        if self.provider == STUDENT_PROVIDER:
            attrs["ratchet.version"] = model
        span = self.tracer.start_span(
            f"{operation} {model}", context=req.parent, kind=SpanKind.CLIENT, attributes=attrs
        )
        return span, role

    def _answered(self, req: RequestTrace, span: Any, role: str, resp: dict) -> None:
        attrs = _usage(resp.get("usage"))
        if resp.get("model"):
            attrs["gen_ai.response.model"] = str(resp["model"])
        if self.operation == "chat":
            finish = [
                str(c.get("finish_reason")) for c in resp.get("choices") or () if c.get("finish_reason")
            ]
            if finish:
                attrs["gen_ai.response.finish_reasons"] = finish
        if role == "student" or role == "shadow":
            lp = (resp.get("choices") or [{}])[0].get("logprobs")
            if lp:
                attrs["ratchet.student.confidence"] = confidence(resp)
        span.set_attributes(attrs)
        if not _off_path.get():
            req.served[role] = {**span.attributes}

    def _failed(self, req: RequestTrace, span: Any, role: str, exc: BaseException) -> None:
        code = (exc.code or str(exc.status)) if isinstance(exc, GatewayError) else type(exc).__qualname__
        span.set_attribute("error.type", code)
        span.set_status(Status(StatusCode.ERROR))
        if not _off_path.get():
            req.served[role] = {**span.attributes}

    # the wrapped calls ---------------------------------------------------------------------------------------
    async def post(
        self, body: dict, task: str | None, t: Any, path: str = "/chat/completions", large: bool = False
    ) -> Any:
        resp = await self._post(body, task, t, path, large)
        span = _call.get()
        if span is not None:
            span.set_attribute("http.response.status_code", resp.status)
        return resp

    async def complete(self, body: dict, model: str | None = None, *args: Any, **kwargs: Any) -> dict:
        return await self._answer(lambda: self._complete(body, model, *args, **kwargs), "chat", model, body)

    async def embed(self, body: dict, timeouts: Any, task: str | None = None, large: bool = False) -> dict:
        return await self._answer(lambda: self._embed(body, timeouts, task, large), "embeddings", None, body)

    async def _answer(self, call: Any, operation: str, model: str | None, body: dict) -> dict:
        """``await call()`` (a non-streamed call) inside its span."""
        req = _request.get()
        if req is None:  # a call outside a model request
            return await call()
        span, role = self._start(req, model, body, operation)
        token = _call.set(span)
        try:
            resp = await call()
            self._answered(req, span, role, resp)
            return resp
        except BaseException as exc:
            self._failed(req, span, role, exc)
            raise
        finally:
            _call.reset(token)
            span.end()

    async def stream_batches(
        self, body: dict, *args: Any, **kwargs: Any
    ) -> AsyncIterator[list[tuple[bytes, dict]]]:
        req = _request.get()
        if req is None:
            async for item in self._stream(body, *args, **kwargs):
                yield item
            return
        span, role = self._start(req, None, body, "chat")
        agen = self._stream(body, *args, **kwargs)
        last: dict[str, Any] = {}
        finish: list[str] = []
        try:
            token = _call.set(span)  # the POST happens in the first step: its status is this span's
            try:
                item = await agen.__anext__()
            except StopAsyncIteration:
                item = None
            finally:
                _call.reset(token)
            while item is not None:
                for _, obj in item:
                    if obj.get("usage"):
                        last["usage"] = obj["usage"]
                    if obj.get("model"):
                        last["model"] = obj["model"]
                    for choice in obj.get("choices") or ():
                        if choice.get("finish_reason"):
                            finish.append(str(choice["finish_reason"]))
                yield item
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    item = None
            self._answered(req, span, role, {**last, "choices": [{"finish_reason": f} for f in finish]})
        except BaseException as exc:
            if isinstance(
                exc, GeneratorExit
            ):  # the client or the relay stopped reading: not the model's fault
                span.set_attribute("ratchet.stream.abandoned", True)
            else:
                self._failed(req, span, role, exc)
            raise
        finally:
            span.end()
            await agen.aclose()
