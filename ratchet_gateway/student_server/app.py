"""The student server: an OpenAI-compatible chat endpoint over a local base + LoRA adapters, with vLLM's
runtime LoRA admin API, so the gateway talks to it exactly as it talks to vLLM ``--enable-lora`` at scale.

Routes: ``POST /v1/chat/completions`` (``model`` = the base's name or a loaded adapter's name; the prompt rendered
by the base's chat template as vLLM renders it, ``ratchet_core.chat_format``; greedy when temperature is 0 or
absent; ``max_tokens``/``max_completion_tokens``; ``stop``; ``logprobs`` + ``top_logprobs`` in OpenAI's shape;
``tools`` answered as ``tool_calls`` read from the model's text as vLLM's ``hermes`` tool parser reads them,
``ratchet_core.tool_calls``; ``response_format`` honoured by constrained decoding, ``constrained``; a prompt that
does not fit the base's context refused with HTTP 400, never cut; ``stream`` as SSE with usage when
``stream_options.include_usage``), ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}``,
``POST /v1/unload_lora_adapter {"lora_name"}``, ``POST /tokenize`` (vLLM's: a chat request's ``messages`` and
``tools`` as the chat route renders them, or a plain ``prompt``, as token ids: what the GPU check compares with
vLLM's), ``GET /v1/models``, ``GET /health``, ``GET /healthz``.
Errors have OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from ratchet_core.chat_encoding import encode
from ratchet_core.chat_format import chat_template, render_prompt
from ratchet_core.tool_calls import HERMES, answer_message, tool_parser_of
from ratchet_gateway.student_server.constrained import FormatError
from ratchet_gateway.student_server.engine import (
    AdapterError,
    ContextError,
    Generation,
    GenerationRequest,
    StudentEngine,
    UnknownModelError,
)

_ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}


def error_response(status: int, message: str, code: str | None = None) -> Response:
    body = {
        "error": {"message": message, "type": _ERROR_TYPES.get(status, "InternalServerError"), "param": None}
    }
    body["error"]["code"] = code if code is not None else status
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


class ChatRequest(BaseModel):
    """The chat-completions fields the student honours; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    n: int | None = Field(None, ge=1, le=1)


class LoadAdapter(BaseModel):
    model_config = ConfigDict(extra="allow")
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadAdapter(BaseModel):
    model_config = ConfigDict(extra="allow")
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None


class TokenizeRequest(BaseModel):
    """vLLM's ``POST /tokenize`` body: chat ``messages`` (with ``tools``) or a plain ``prompt``."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    prompt: str | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool | None = None  # vLLM's defaults: False for messages, True for a prompt
    return_token_strs: bool = False


def _logprob_entries(gen: Generation, top: int) -> list[dict]:
    return [
        {
            "token": t.text,
            "logprob": t.logprob,
            "bytes": t.bytes,
            "top_logprobs": [{"token": s, "logprob": lp, "bytes": b} for s, b, lp in t.top[:top]],
        }
        for t in gen.tokens
    ]


def create_app(
    base_path: str | Path,
    max_batch: int = 8,
    api_key: str | None = None,
    served_model_name: str | None = None,
    adapters: dict[str, str] | None = None,
    adapter_cache: str | Path | None = None,
) -> FastAPI:
    """The student server over the HF base model at `base_path`; `adapters` (name -> path) load at start-up.

    An adapter path may be an object-store URL (``s3://bucket/artifacts/adapters/v3-...``): it is downloaded into
    `adapter_cache` (default ``<tmp>/ratchet-adapter-cache``), digest-checked against the request's optional
    ``adapter_digest`` and renamed into place whole, then loaded (``ratchet_core.artifact_store.fetch_adapter``).

    `served_model_name` is the name clients use for the base (default: the base's name from
    ratchet_core.student_model.base_identity). With `api_key`, every /v1 route needs ``Bearer <api_key>``.
    """
    from ratchet_core.student_model import DEMO_BASE_NAME, is_demo_base

    base_path = Path(base_path)
    base_name = served_model_name or (DEMO_BASE_NAME if is_demo_base(base_path) else base_path.name)
    engine = StudentEngine(base_path, max_batch=max_batch)
    created = int(time.time())

    cache = Path(adapter_cache) if adapter_cache else Path(tempfile.gettempdir()) / "ratchet-adapter-cache"

    async def _local_adapter(path: str, digest: str = "") -> str:
        """A local folder for `path`: itself, or an object-store URL downloaded into the adapter cache."""
        from ratchet_core.artifact_store import fetch_adapter
        from ratchet_core.lake import is_url

        if not is_url(path):
            return path
        return str(await asyncio.to_thread(fetch_adapter, path, cache, digest))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import asyncio

        await asyncio.to_thread(engine.load_base)
        chat_template(
            engine.tokenizer
        )  # a base without one cannot be served as it is trained (a clear error)
        engine.start()
        try:
            for name, path in (adapters or {}).items():
                await engine.load_adapter(name, await _local_adapter(path))
            yield
        finally:
            engine.stop()

    app = FastAPI(title="Ratchet student server", lifespan=lifespan)
    app.state.engine = engine
    app.state.base_name = base_name

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return error_response(400, f"Invalid request: {problems}. Fix these fields and retry.")

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return error_response(
                    401,
                    "Missing or wrong API key: send `Authorization: Bearer <key>` with the server's --api-key.",
                )
        return await call_next(request)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok", "base": base_name, "adapters": sorted(engine.adapters)}

    @app.get("/v1/models")
    async def models() -> dict:
        data = [
            {
                "id": base_name,
                "object": "model",
                "created": created,
                "owned_by": "ratchet",
                "root": str(base_path),
                "parent": None,
            }
        ]
        for name, path in sorted(engine.adapters.items()):
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "ratchet",
                    "root": path,
                    "parent": base_name,
                }
            )
        return {"object": "list", "data": data}

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(body: LoadAdapter) -> Response:
        if body.lora_name in (base_name, str(base_path)):
            return error_response(
                400, f"'{body.lora_name}' is the base model's name; choose another lora_name."
            )
        try:
            path = await _local_adapter(body.lora_path, getattr(body, "adapter_digest", None) or "")
            await engine.load_adapter(body.lora_name, path)
        except AdapterError as exc:
            return error_response(exc.status, str(exc))
        except (OSError, ValueError) as exc:  # the store has no adapter there, or its digest differs
            return error_response(400, f"cannot fetch adapter {body.lora_path}: {exc}")
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(body: UnloadAdapter) -> Response:
        try:
            await engine.unload_adapter(body.lora_name)
        except AdapterError as exc:
            return error_response(exc.status, str(exc))
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> Response:
        if body.model is not None and body.model not in (base_name, str(base_path), *engine.adapters):
            return error_response(404, f"The model `{body.model}` does not exist.", code="model_not_found")
        if (body.messages is None) == (body.prompt is None):
            return error_response(400, "Send either `messages` (a chat request) or `prompt`, not both.")
        tokenizer = engine.tokenizer
        if body.messages is not None:
            if not body.add_generation_prompt:
                return error_response(
                    400, "This server renders a chat request with its generation prompt only: drop "
                    "`add_generation_prompt` or set it to true.",
                )  # fmt: skip
            if body.add_special_tokens:
                return error_response(
                    400, "A chat prompt is tokenized without added special tokens (the template writes them): "
                    "drop `add_special_tokens`.",
                )  # fmt: skip
            text = await asyncio.to_thread(render_prompt, tokenizer, body.messages, body.tools)
            ids = await asyncio.to_thread(encode, tokenizer, text)
        else:
            added = body.add_special_tokens is not False
            ids = list(tokenizer(body.prompt, add_special_tokens=added)["input_ids"])
        strs = tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
        payload = {"count": len(ids), "max_model_len": engine.context_len, "tokens": ids, "token_strs": strs}
        return Response(orjson.dumps(payload), media_type="application/json")

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest) -> Response:
        if body.model in (base_name, str(base_path)):
            adapter = None
        elif body.model in engine.adapters:
            adapter = body.model
        else:
            return error_response(404, f"The model `{body.model}` does not exist.", code="model_not_found")
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        top = body.top_logprobs or 0
        request = GenerationRequest(
            prompt=await asyncio.to_thread(render_prompt, engine.tokenizer, body.messages, body.tools),
            adapter=adapter,
            response_format=body.response_format,
            max_tokens=body.max_completion_tokens or body.max_tokens,
            temperature=body.temperature or 0.0,
            top_p=body.top_p or 1.0,
            stop=stop,
            top_logprobs=top,
            seed=body.seed,
        )
        try:
            gen = await engine.generate(request)
        except UnknownModelError as exc:  # unloaded while the request waited
            return error_response(404, str(exc), code="model_not_found")
        except (ContextError, FormatError) as exc:
            return error_response(400, str(exc))
        hermes = tool_parser_of(chat_template(engine.tokenizer)) == HERMES
        message = answer_message(gen.text, body.tools if hermes else None, body.tool_choice)
        finish = (
            "tool_calls" if message.get("tool_calls") and gen.finish_reason == "stop" else gen.finish_reason
        )
        usage = {
            "prompt_tokens": gen.prompt_tokens,
            "completion_tokens": gen.completion_tokens,
            "total_tokens": gen.prompt_tokens + gen.completion_tokens,
        }
        logprobs = {"content": _logprob_entries(gen, top)} if body.logprobs else None
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        now = int(time.time())
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(
                _sse(
                    cid,
                    now,
                    body.model,
                    message,
                    gen,
                    finish,
                    usage,
                    top if body.logprobs else None,
                    include_usage,
                ),
                media_type="text/event-stream",
            )
        if message.get("tool_calls") is None:
            message.pop("tool_calls", None)
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        payload = {
            "id": cid,
            "object": "chat.completion",
            "created": now,
            "model": body.model,
            "choices": [choice],
            "usage": usage,
        }
        return Response(orjson.dumps(payload), media_type="application/json")

    return app


async def _sse(
    cid: str,
    created: int,
    model: str,
    message: dict,
    gen: Generation,
    finish: str,
    usage: dict,
    top: int | None,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """OpenAI's chunk sequence: role, content deltas (one per token, with its logprobs), finish, usage, DONE."""

    def chunk(delta: dict, finish_reason: str | None = None, logprobs: Any = None, **extra: Any) -> bytes:
        body = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
            **extra,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if message.get("tool_calls"):
        calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        yield chunk({"tool_calls": calls})
    else:
        entries = _logprob_entries(gen, top or 0) if top is not None else None
        emitted = ""
        pending: list[dict] = []
        # Byte tokens can split a UTF-8 character: emit the text of the prefix decoded so far, per token.
        for i, _ in enumerate(gen.tokens):
            if entries is not None:
                pending.append(entries[i])
            upto = gen.text[: len(_prefix_text(gen, i + 1))]
            delta = upto[len(emitted) :]
            if not delta and i + 1 < len(gen.tokens):
                continue
            emitted = upto
            lp = {"content": pending} if entries is not None else None
            pending = []
            yield chunk({"content": delta}, logprobs=lp)
        if emitted != gen.text:
            yield chunk({"content": gen.text[len(emitted) :]})
    yield chunk({}, finish_reason=finish)
    if include_usage:
        body = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
        yield b"data: " + orjson.dumps(body) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _prefix_text(gen: Generation, n: int) -> str:
    raw = b"".join(bytes(t.bytes) for t in gen.tokens[:n])
    return raw.decode("utf-8", errors="ignore")
