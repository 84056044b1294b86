"""The demo teacher's HTTP API: OpenAI chat completions (JSON and SSE streaming), OpenAI's Responses API,
Anthropic's Messages API and embeddings (``ratchet_gateway.demo_teacher.model_apis``), models, health.

`create_app(config)` builds the app. Answers come from `ratchet_core.workloads.solve` for requests of a built-in
task (recognised by ``metadata.ratchet_task``, the ``X-Ratchet-Task`` header, or the task's system prompt); any
other request gets a deterministic answer inside its own contract (a declared tool called with schema-valid
arguments, a JSON instance of its ``json_schema``, else a short text), so it can stand in for a real model. Knobs for tests and benchmarks: fixed latency, injected errors with a chosen
status (OpenAI's error shape), deliberately wrong answers, reported reasoning tokens, optional bearer key.
Bodies are parsed and written with orjson, and nothing else heavy runs per request, so the teacher is never
the bottleneck of a gateway benchmark.
"""

from __future__ import annotations

import asyncio
import hmac
import random
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ratchet_core import pricing

from . import answers, model_apis

_ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout_error", "timeout"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


@dataclass(frozen=True)
class DemoTeacherConfig:
    """How the demo teacher behaves. `error_rate` and `wrong_rate` are probabilities in [0, 1]."""

    model: str = "demo-teacher"
    latency_ms: float = 0.0
    error_rate: float = 0.0
    error_status: int = 500
    seed: int = 0
    reasoning_tokens: int = 0
    wrong_rate: float = 0.0
    api_key: str | None = None

    def __post_init__(self) -> None:
        for name in ("error_rate", "wrong_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {v}")
        if self.latency_ms < 0 or self.reasoning_tokens < 0:
            raise ValueError("latency_ms and reasoning_tokens must be >= 0")
        if not 400 <= self.error_status <= 599:
            raise ValueError(f"error_status must be an HTTP error status (400-599), got {self.error_status}")


def _json(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json", headers=headers)


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None) -> Response:
    """An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""
    etype, default_code = _ERROR_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return _json(
        {"error": {"message": message, "type": etype, "param": param, "code": code or default_code}}, status
    )


def _usage(prompt: int, completion: int, reasoning: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
            "audio_tokens": 0,
        },
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    }


def create_app(config: DemoTeacherConfig | None = None) -> FastAPI:
    """The demo teacher as a FastAPI app (serve it with uvicorn, as `ratchet demo-teacher` does)."""
    config = config or DemoTeacherConfig()
    pricing.warm_up(
        config.model
    )  # usage is counted with the teacher's tokenizer: load it before the first request
    app = FastAPI(title="Ratchet demo teacher", docs_url=None, redoc_url=None)
    app.state.config = config
    errors_rng = random.Random(f"demo-teacher-errors:{config.seed}")
    expected_auth = f"Bearer {config.api_key}".encode() if config.api_key else None

    def auth_error(request: Request) -> Response | None:
        if expected_auth is None:
            return None
        got = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(got, expected_auth):
            return None
        anthropic = request.headers.get("x-api-key")  # Anthropic's clients (and litellm's anthropic provider)
        if anthropic is not None and hmac.compare_digest(b"Bearer " + anthropic.encode(), expected_auth):
            return None
        return openai_error(
            401,
            "Incorrect or missing API key: send `Authorization: Bearer <key>` with the key the demo "
            "teacher was started with (--api-key).",
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        hint = f"{request.method} {request.url.path} is not served here; try POST /v1/chat/completions"
        return openai_error(exc.status_code, f"{exc.detail}: {hint}")

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok", "model": config.model})

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if err := auth_error(request):
            return err
        card = {"id": config.model, "object": "model", "created": 1700000000, "owned_by": "ratchet-demo"}
        return _json({"object": "list", "data": [card]})

    async def answered(request: Request, body: Any) -> Response | tuple[dict, int, int]:
        """(the answer message, n, top_logprobs) of a chat body, after the configured latency, or the error
        the teacher answers with (a bad body, another model, an injected error)."""
        if not isinstance(body, dict):
            return openai_error(400, "The request body must be a JSON object.")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return openai_error(400, "`messages` must be a non-empty list of message objects.", "messages")
        if body.get("model") != config.model:
            return openai_error(
                404,
                f"The model `{body.get('model')}` does not exist; this demo teacher serves `{config.model}`.",
                "model",
                "model_not_found",
            )
        n = body.get("n") or 1
        top = body.get("top_logprobs") or 0
        if not isinstance(n, int) or not 1 <= n <= 8:
            return openai_error(400, "`n` must be an integer between 1 and 8.", "n")
        if not isinstance(top, int) or not 0 <= top <= 20:
            return openai_error(400, "`top_logprobs` must be an integer between 0 and 20.", "top_logprobs")

        if config.latency_ms:
            await asyncio.sleep(config.latency_ms / 1000)
        if config.error_rate and errors_rng.random() < config.error_rate:
            return openai_error(
                config.error_status,
                f"Injected error (demo teacher error_rate={config.error_rate}); retry the request.",
            )

        task = answers.resolve_task(body, request.headers.get("x-ratchet-task"))
        wrong = bool(config.wrong_rate) and (
            answers.unit(config.seed, "wrong", orjson.dumps(messages)) < config.wrong_rate
        )
        return answers.answer(body, task, wrong), n, top

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        if err := auth_error(request):
            return err
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return openai_error(
                400, "The request body is not valid JSON; send an OpenAI chat completions body."
            )
        got = await answered(request, body)
        if isinstance(got, Response):
            return got
        return _respond(config, body, *got)

    async def chat_answer(request: Request, body: dict) -> Response | dict:
        got = await answered(request, body)
        if isinstance(got, Response):
            return got
        message, _, top = got
        head, message, finish, usage, logprob_entries = _parts(config, body, message, 1, top)
        return _completion(head, message, finish, 1, logprob_entries, usage, bool(body.get("logprobs")))

    model_apis.register(app, config.model, auth_error, chat_answer, openai_error)
    return app


def _respond(config: DemoTeacherConfig, body: dict, message: dict, n: int, top: int) -> Response:
    head, message, finish, usage, logprob_entries = _parts(config, body, message, n, top)
    if body.get("stream"):
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        stream = _sse(head, message, finish, n, logprob_entries, usage if include_usage else None)
        return StreamingResponse(
            stream, media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )
    return _json(_completion(head, message, finish, n, logprob_entries, usage, bool(body.get("logprobs"))))


def _parts(config: DemoTeacherConfig, body: dict, message: dict, n: int, top: int) -> tuple:
    """(head, message, finish_reason, usage, logprob entries) of the answer: cut at the request's token limit."""
    content = message.get("content")
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if content and isinstance(limit, int) and limit > 0 and answers.count_tokens(len(content)) > limit:
        content = content[: limit * 4]
        message = {**message, "content": content}
        finish = "length"
    text = answers.generated_text(message)
    logprob_entries = answers.token_logprobs(text, top, salt=config.model) if body.get("logprobs") else None
    completion_tokens = answers.completion_tokens(body, text) + config.reasoning_tokens
    usage = _usage(answers.prompt_tokens(body), completion_tokens * n, config.reasoning_tokens * n)
    head = {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "created": int(time.time()),
        "model": config.model,
        "system_fingerprint": "fp_ratchet_demo",
    }
    return head, message, finish, usage, logprob_entries


def _completion(
    head: dict, message: dict, finish: str, n: int, logprob_entries: list | None, usage: dict, want: bool
) -> dict:
    logprobs = {"content": logprob_entries, "refusal": None} if want else None
    choice_message = {
        "role": "assistant",
        "content": message.get("content"),
        "refusal": None,
        "tool_calls": message.get("tool_calls"),
    }
    choices = [
        {"index": i, "message": choice_message, "logprobs": logprobs, "finish_reason": finish}
        for i in range(n)
    ]
    return {**head, "object": "chat.completion", "choices": choices, "usage": usage}


async def _sse(
    head: dict, message: dict, finish: str, n: int, logprob_entries: list[dict] | None, usage: dict | None
) -> AsyncIterator[bytes]:
    """OpenAI's chunk sequence: role, content or tool-call deltas (name first, then argument pieces), the
    finish chunk, the usage chunk (choices [] when stream_options.include_usage), then ``data: [DONE]``."""
    base = {**head, "object": "chat.completion.chunk"}
    with_usage = usage is not None

    def chunk(
        index: int, delta: dict, finish_reason: str | None = None, entries: list | None = None
    ) -> bytes:
        logprobs = {"content": entries, "refusal": None} if entries is not None else None
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        obj = {**base, "choices": [choice]}
        if with_usage:
            obj["usage"] = None
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    for i in range(n):
        pos = 0  # index into logprob_entries, which cover the generated text piece by piece

        def take(k: int) -> list | None:
            nonlocal pos
            if logprob_entries is None:
                return None
            part = logprob_entries[pos : pos + k]
            pos += k
            return part

        calls = message.get("tool_calls")
        if calls:
            yield chunk(i, {"role": "assistant", "content": None})
            for k, call in enumerate(calls):
                fn = call["function"]
                head_delta = {
                    "index": k,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": fn["name"]},
                }
                head_delta["function"]["arguments"] = ""
                yield chunk(i, {"tool_calls": [head_delta]}, entries=take(len(answers.pieces(fn["name"]))))
                for piece in _groups(answers.pieces(fn["arguments"])):
                    delta = {"tool_calls": [{"index": k, "function": {"arguments": "".join(piece)}}]}
                    yield chunk(i, delta, entries=take(len(piece)))
        else:
            yield chunk(i, {"role": "assistant", "content": ""})
            for piece in _groups(answers.pieces(message.get("content") or "")):
                yield chunk(i, {"content": "".join(piece)}, entries=take(len(piece)))
        yield chunk(i, {}, finish)
    if usage is not None:
        yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _groups(items: list[str], size: int = 3) -> list[list[str]]:
    """A few token pieces per chunk: realistic enough, and fewer writes than one chunk per piece."""
    return [items[j : j + size] for j in range(0, len(items), size)]
