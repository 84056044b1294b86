"""The demo teacher's other model APIs, offline and deterministic: OpenAI's Responses API (``POST /v1/responses``),
Anthropic's Messages API (``POST /v1/messages``, what litellm's ``anthropic/`` provider calls) and embeddings
(``POST /v1/embeddings``), so the gateway's tests have a real server for every API a client or a teacher speaks.

Responses and Messages bodies are translated to a chat request with the gateway's own translations
(``ratchet_gateway.apis``), answered exactly as the chat route answers it (same answers, usage, latency and
injected errors), and written back with the gateway's formats; a stream is the whole answer replayed as the API's
events. Messages errors have Anthropic's shape. Embeddings: one unit vector per input, from SHA-256 of the model
and the input, ``dimensions`` long (default :data:`DIMENSIONS`), ``base64`` as little-endian float32 when asked;
usage is the inputs' tokens as the model's tokenizer counts them (a token array: its length).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

from ratchet_core import pricing
from ratchet_gateway.apis.messages_format import MESSAGES
from ratchet_gateway.apis.responses_format import RESPONSES
from ratchet_gateway.chat.context import Received
from ratchet_gateway.chat.formats import ApiFormat
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.responses import new_request_id

DIMENSIONS = 64
ChatAnswer = Callable[[Request, dict], Awaitable["Response | dict"]]
ErrorResponse = Callable[..., Response]


def register(
    app: FastAPI,
    model: str,
    auth_error: Callable[[Request], Response | None],
    chat_answer: ChatAnswer,
    openai_error: ErrorResponse,
) -> None:
    """Add the routes to the demo teacher's `app`, serving `model`: ``chat_answer`` is the chat route's answer to a
    chat body (one choice), or its error; ``openai_error(status, message, param, code)`` an error in OpenAI's
    shape."""

    async def serve(request: Request, api: ApiFormat) -> Response:
        if (err := auth_error(request)) is not None:
            return _in_format(api, err)
        try:
            chat, req, origin = api.parse(await request.body())
        except GatewayError as exc:
            return api.error(exc, {})
        resp = await chat_answer(request, chat)
        if isinstance(resp, Response):
            return _in_format(api, resp)
        received = Received(
            new_request_id(), 0.0, time.time_ns() // 1000, "", "demo", "", req, chat, api.api, origin
        )
        if not req.stream:
            return Response(api.answer(resp, received), media_type="application/json")
        out = api.stream(received)
        events = [*out.replay(resp, received.request_id), out.end()]

        async def replay():
            for event in events:
                yield event

        return StreamingResponse(replay(), media_type=out.media_type, headers={"cache-control": "no-cache"})

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await serve(request, RESPONSES)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await serve(request, MESSAGES)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        if (err := auth_error(request)) is not None:
            return err
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return openai_error(400, "The request body is not valid JSON; send an OpenAI embeddings body.")
        if not isinstance(body, dict) or body.get("model") != model:
            return openai_error(404, f"This demo teacher embeds with `{model}`.", "model", "model_not_found")
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)) else inputs
        dims = body.get("dimensions") or DIMENSIONS
        if not isinstance(inputs, list) or not inputs or not isinstance(dims, int) or not 1 <= dims <= 4096:
            return openai_error(
                400, "`input` must be a text or a list; `dimensions` between 1 and 4096.", "input"
            )
        as_base64 = body.get("encoding_format") == "base64"
        data, tokens = [], 0
        for i, item in enumerate(inputs):
            text = item if isinstance(item, str) else orjson.dumps(item).decode()
            tokens += pricing.text_tokens(model, item) if isinstance(item, str) else len(item)
            vector = embedding(model, text, dims)
            value: Any = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode() if as_base64 else vector
            data.append({"object": "embedding", "index": i, "embedding": value})
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return Response(
            orjson.dumps({"object": "list", "data": data, "model": model, "usage": usage}),
            media_type="application/json",
        )


def embedding(model: str, text: str, dims: int) -> list[float]:
    """A deterministic unit vector of `dims` numbers for `text` (SHA-256 blocks of the model and the text)."""
    values: list[float] = []
    block = 0
    while len(values) < dims:
        digest = hashlib.sha256(f"{model}\x1f{block}\x1f{text}".encode()).digest()
        values.extend(b / 127.5 - 1.0 for b in digest)
        block += 1
    values = values[:dims]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _in_format(api: ApiFormat, err: Response) -> Response:
    """An error the chat route answered (OpenAI's shape) in `api`'s own shape."""
    try:
        message = orjson.loads(err.body)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        message = "the demo teacher could not answer"
    return api.error(GatewayError(err.status_code, str(message)), {})
