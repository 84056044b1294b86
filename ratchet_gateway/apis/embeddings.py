"""``POST /v1/embeddings``: OpenAI's embeddings API, passed to the configured embedding model
(``RATCHET_EMBEDDING_MODEL`` / ``_API_BASE`` / ``_API_KEY``, any litellm model; OpenAI-compatible ones over the
gateway's own HTTP/1.1 client, others through ``litellm.aembedding``), so an app needs one base URL for everything.

Not the chat pipeline: nothing is routed to a student and nothing is distilled. Each request is logged and priced
like any other: authenticated first (``Authorization: Bearer``), the body read with the size limit and checked
(``model`` is the configured model's name, with or without its provider prefix; ``input`` a text, a list of texts,
or token arrays, none of them empty; ``encoding_format``, ``dimensions``, ``user``, and the operator's
``RATCHET_PROVIDER_EXTRA_FIELDS``; any other field is a 400 naming it, ``ratchet_gateway.forwarded``; a large body in
the large-body lane, ``ratchet_gateway.offload``), admitted by the client's limits (``ratchet_gateway.limits``: a 429
before any model call; like a chat request it reserves its worst case, its input tokens counted and their price,
``ClientLimiter.embeddings_need``, and its row settles it), and its ledger row
(``api='embeddings'``, ``served_by='teacher'``, the model's usage and its price from litellm's local map) is
committed before the answer is released. The row stores no content: ``messages`` and ``answer`` are empty and
``params`` holds the request's parameters (redacted) and the number of inputs, never the input texts, so the
night's ``examples`` step, which takes only rows with messages, never learns from it. The task is the
``X-Ratchet-Task`` header's (else ``default``). Errors have OpenAI's shape; an upstream failure is recorded as a
failed row.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from ratchet_core.schema import request_row
from ratchet_gateway.apis.wire import validated
from ratchet_gateway.auth import invalid_key_error
from ratchet_gateway.chat.failures import failure
from ratchet_gateway.chat.handler import arrival
from ratchet_gateway.chat.rows import Recorder, canonical_json
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.forwarded import EMBEDDINGS_FIELDS, refuse_unknown
from ratchet_gateway.hooks import INFO
from ratchet_gateway.input_rules import InputRuleError, StrictInt, StrictStr, resolve_task
from ratchet_gateway.request_body import LARGE_BODY_BYTES, input_rule_error, parse_chat_body, read_body
from ratchet_gateway.responses import error_response, ratchet_headers
from ratchet_gateway.upstream import teacher_timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway

MAX_INPUTS = 2048  # OpenAI's own limit on inputs per request


class EmbeddingsRequest(BaseModel):
    """The embeddings body as the gateway reads it (other fields: the operator's extras, checked before)."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr = Field(min_length=1)
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]] = Field(
        description="A text, a list of texts, or token arrays (at most 2048 inputs)."
    )
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: StrictInt | None = Field(None, ge=1)
    user: StrictStr | None = None


def input_count(value: Any) -> int:
    """How many inputs a request's ``input`` holds (a token array is one input)."""
    if isinstance(value, str) or (value and isinstance(value[0], int)):
        return 1
    return len(value)


class Embeddings:
    """Answers ``POST /v1/embeddings`` (one per app, ``app.state.embeddings``)."""

    def __init__(self, gw: Gateway):
        self.gw = gw
        self.timeouts = teacher_timeouts(gw.settings)
        self.recorder = Recorder(gw)

    async def __call__(self, request: Request) -> Response:
        gw = self.gw
        t0 = time.perf_counter()
        headers = ratchet_headers()
        try:
            client = gw.keys.authenticate(request.headers.get("authorization"))
            if client is None:
                raise invalid_key_error()
            info = request.scope.get(INFO)
            if info is not None:
                info.client = client
            raw = await read_body(request, gw.settings.max_body_bytes)
            # a large body is parsed and validated in the lane, off the event loop (``ratchet_gateway.offload``)
            large = len(raw) > LARGE_BODY_BYTES
            extras = gw.settings.provider_extras
            body, req = await gw.offload.run(_parsed, raw, extras) if large else _parsed(raw, extras)
            del raw
            self._check_model(req.model)
            try:
                task = resolve_task(None, request.headers.get("x-ratchet-task"))
            except InputRuleError as exc:
                raise input_rule_error(exc) from None
            if info is not None:
                info.task = task
            return await self._answer(body, req, client, task, t0, headers, large)
        except Exception as exc:
            gw.limits.release(headers["x-ratchet-request-id"])  # ended before a row settled it (else a no-op)
            return error_response(failure(exc, t0, headers, gw.metrics, "/v1/embeddings"), headers)

    def _check_model(self, model: str) -> None:
        name = self.gw.settings.embedding_model
        if not name:
            raise GatewayError(
                404,
                "no embedding model is configured on this gateway: set RATCHET_EMBEDDING_MODEL "
                "(and RATCHET_EMBEDDING_API_BASE / _API_KEY)",
                "model_not_found",
            )
        if model not in (name, name.split("/", 1)[-1]):
            raise GatewayError(
                404,
                f"model {model!r} is not served here; embeddings use {name.split('/', 1)[-1]!r}",
                "model_not_found",
            )

    async def _answer(
        self,
        body: dict,
        req: EmbeddingsRequest,
        client: str,
        task: str,
        t0: float,
        headers: dict[str, str],
        large: bool,
    ) -> Response:
        gw = self.gw
        assert gw.embedder is not None  # checked by _check_model
        ts, day = arrival(gw.clock_now)
        # per-client limits, as for every model request: its input tokens and their price reserved (a 429 before
        # the call), settled by its row
        rid = headers["x-ratchet-request-id"]
        gw.limits.admit(client, day, await gw.limits.embeddings_need(client, req.input, large), rid)
        params = {k: v for k, v in body.items() if k not in ("model", "input")}
        # the parameters column: redacted, in the lane for a large body (its other fields may be large too)
        params_column = functools.partial(_params_column, gw.redact, params, input_count(req.input))
        fields = {
            "request_id": headers["x-ratchet-request-id"],
            "ts": ts,
            "day": day,
            "client": client,
            "task": task,
            "model_requested": req.model,
            "stage": "teacher",
            "served_by": "teacher",
            "api": "embeddings",
            "params": await gw.offload.run(params_column) if large else params_column(),
        }
        t = time.perf_counter()
        try:
            resp = await gw.embedder.embed(body, self.timeouts, task, large)
        except GatewayError as err:
            gw.metrics.upstream_faults.labels("embeddings", err.code or "").inc()
            await self.recorder.append_quietly(self._row(fields, {}, err, t0, t))
            raise
        row = self._row(fields, resp.get("usage") or {}, None, t0, t)
        await self.recorder.append(row)  # before the answer is released, as every row
        elapsed = (time.perf_counter() - t0) * 1000
        overhead = max(0.0, elapsed - row["upstream_ms"])
        headers["x-ratchet-overhead-ms"] = f"{overhead:.3f}"
        gw.metrics.served("teacher", elapsed / 1000, overhead / 1000)
        return Response(orjson.dumps(resp), media_type="application/json", headers=headers)

    def _row(self, fields: dict, usage: dict, err: GatewayError | None, t0: float, t: float) -> dict:
        now = time.perf_counter()
        upstream_ms = (now - t) * 1000
        latency = (now - t0) * 1000
        prompt = int(usage.get("prompt_tokens") or 0)
        cost = self.gw.embedding_prices.cost(prompt, 0) if err is None else 0.0
        return request_row(
            **fields,
            prompt_tokens=prompt,
            total_tokens=int(usage.get("total_tokens") or prompt),
            teacher_prompt_tokens=prompt,
            teacher_cost_usd=cost,
            actual_cost_usd=cost,
            latency_ms=latency,
            upstream_ms=upstream_ms,
            overhead_ms=max(0.0, latency - upstream_ms),
            finish_reason="error" if err else "",
            status_code=err.status if err else 200,
            error_type=err.type if err else "",
            error=self.gw.redact(err.message) if err else "",
        )


def _params_column(redact: Callable[[Any], Any], params: dict, inputs: int) -> str:
    return canonical_json({**redact(params), "inputs": inputs})


def _parsed(raw: bytes, extras: frozenset[str] = frozenset()) -> tuple[dict, EmbeddingsRequest]:
    body = parse_chat_body(raw, "'model' and 'input'")
    refuse_unknown(body, EMBEDDINGS_FIELDS, extras, "embeddings")
    return body, _validated(body)


def _validated(body: dict) -> EmbeddingsRequest:
    req = validated(EmbeddingsRequest, body, "OpenAI embeddings")
    n = input_count(req.input)
    if n == 0:
        raise GatewayError(400, "input: send at least one non-empty input", "invalid_request", param="input")
    _refuse_empty(req.input)
    if n > MAX_INPUTS:
        raise GatewayError(
            400, f"input: at most {MAX_INPUTS} inputs per request (got {n}); split the batch", param="input"
        )
    return req


def _refuse_empty(value: str | list) -> None:
    """A 400 naming the first empty input (``""``, a ``""`` or ``[]`` in the list), as OpenAI refuses them: an empty
    text has no embedding, and a provider answers it with an error or a vector of nothing."""
    if isinstance(value, str):
        if not value:
            raise GatewayError(400, "input: must not be empty text", "invalid_request", param="input")
        return
    if value and isinstance(value[0], int):
        return  # one token array, not empty (counted above)
    for i, item in enumerate(value):
        if not item:
            raise GatewayError(
                400,
                f"input.{i}: an input must not be empty (an empty text or token array has no embedding); "
                "leave it out",
                "invalid_request",
                param=f"input.{i}",
            )
