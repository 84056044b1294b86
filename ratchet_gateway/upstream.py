"""Calling the teacher and the student: a lean HTTP/1.1 hot path for OpenAI-compatible upstreams, litellm otherwise.

Measured here: ``litellm.acompletion`` costs ~12 ms of CPU per call, an aiohttp POST ~0.2-0.3 ms, a POST on this
module's own client ~0.03 ms. So litellm does
what it is good at *once, at startup*: ``litellm.get_llm_provider`` resolves the teacher's provider, API base and
credentials, and the price map gives per-token prices (cached per model). When the provider speaks the OpenAI
wire format (openai, hosted_vllm, openai-compatible bases: vLLM, OpenAI, most open-model hosts) every request
goes through kept-alive connections of the gateway's own lean HTTP/1.1 client (``ratchet_gateway.http1``: ~30 us
of CPU per call where aiohttp's session took ~200) with orjson and the model name rewritten; any other provider
(anthropic, bedrock, vertex...) goes through ``litellm.acompletion`` (the fallback path).

Failures map to OpenAI-shaped errors the gateway returns: connection refused -> 503, timeout -> 504, upstream
5xx or garbage -> 502, upstream 4xx passed through with its status (it is the client's request that is wrong; its
message cut at 300 characters), except 401 and 403 (the operator's credentials were refused: a 502) and 429 (the
operator's account is limited: a 429), which quote nothing of the provider's message (it names part of the
operator's key, its organization, what every client together used of its limits).
"Garbage" is checked, not assumed away: a body that is not a chat completion (cut short, ``choices`` not a list of
objects, non-numeric ``usage``) and a stream chunk that is not one (not JSON, a JSON list, an SSE ``error`` event,
a body that ends before ``[DONE]``) raise :class:`GatewayError` 502, so the caller records a failed row instead of
serving or storing a broken answer.

Timeouts (:class:`Timeouts`) are the ones a user expects of a model call: ``connect`` (TCP connect), ``first_byte``
(from sending the request to the first chunk of a stream, or to the whole answer of a non-streaming call, since
a non-streaming body only starts once generation is done), ``idle`` (the longest silence between two chunks once
a stream started) and an optional ``total``. A stream that keeps producing tokens is never cut unless ``total``
is set.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from ratchet_core import json_pieces
from ratchet_gateway import http1
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.forwarded import CHAT_FIELDS, EMBEDDINGS_FIELDS, litellm_args, upstream_body

# litellm providers whose chat API is the OpenAI wire format.
OPENAI_COMPATIBLE = {
    "openai",
    "hosted_vllm",
    "openai_like",
    "custom_openai",
    "vllm",
    "deepseek",
    "together_ai",
    "fireworks_ai",
    "groq",
    "openrouter",
    "deepinfra",
    "lm_studio",
    "xai",
    "mistral",
}


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed per phase of one model call (see the module docstring); ``total=None`` = no overall cap."""

    first_byte: float
    connect: float = 10.0
    idle: float = 60.0
    total: float | None = None


def teacher_timeouts(settings: Any) -> Timeouts:
    """The teacher's timeouts from ``ratchet_core.settings`` (RATCHET_UPSTREAM_*_TIMEOUT_S)."""
    return Timeouts(
        first_byte=settings.upstream_timeout_s,
        connect=settings.upstream_connect_timeout_s,
        idle=settings.upstream_idle_timeout_s,
        total=settings.upstream_total_timeout_s,
    )


def student_timeouts(settings: Any) -> Timeouts:
    """The student's: its whole (non-streaming) answer within RATCHET_STUDENT_TIMEOUT_S, else the teacher answers."""
    t = settings.student_timeout_s
    return Timeouts(first_byte=t, connect=min(settings.upstream_connect_timeout_s, t), idle=t, total=t)


# A task name travels as a header only when it cannot split the request (the input rules allow far less).
_HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,256}")


def _provider(model: str, api_base: str | None):
    import litellm

    return litellm.get_llm_provider(model, api_base=api_base)


class Upstream:
    """One model endpoint. ``complete(body)`` -> response dict; ``stream(body)`` -> SSE ``data:`` payloads."""

    def __init__(
        self,
        model: str,
        api_base: str | None,
        api_key: str | None,
        timeout_s: float,
        resolve: bool = True,
        force_litellm: bool = False,
        offload: Any = None,
        max_response_bytes: int = http1.DEFAULT_MAX_RESPONSE_BYTES,
        extras: frozenset[str] = frozenset(),
    ):
        # the operator's provider-specific fields (RATCHET_PROVIDER_EXTRA_FIELDS), sent beside the allow-list's
        self.extras = extras
        self.max_response_bytes = max_response_bytes
        self.requested_model = model
        # the lane a large request's body is encoded in (``ratchet_gateway.offload``); None: encoded inline
        self._offload = offload
        self.api_key = api_key
        self.timeout_s = timeout_s
        if resolve:
            name, provider, dyn_key, base = _provider(model, api_base)
        else:  # already a bare model name on an OpenAI-compatible base (the student server)
            name, provider, dyn_key, base = model, "openai", None, api_base
        self.model = name
        self.provider = provider
        self.api_key = api_key or dyn_key
        if provider == "openai" and not base:
            base = "https://api.openai.com/v1"
        self.base = (base or "").rstrip("/")
        self.fast = provider in OPENAI_COMPATIBLE and bool(self.base) and not force_litellm
        self._pool: http1.Pool | None = None
        headers = {"Content-Type": "application/json", "User-Agent": "ratchet-gateway"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            self._headers = http1.header_block(headers)
        except ValueError:
            raise ValueError(
                "the model endpoint's API key has characters an HTTP header cannot carry"
            ) from None

    async def start(self) -> None:
        if self._pool is None and self.fast:
            self._pool = http1.Pool(self.base, max_response_bytes=self.max_response_bytes)

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _timeouts(self, timeout_s: float | None, timeouts: Timeouts | None) -> Timeouts:
        if timeouts is not None:
            return timeouts
        t = timeout_s or self.timeout_s
        return Timeouts(first_byte=t, connect=min(t, 10.0), idle=t)

    def _hdrs(self, task: str | None) -> bytes:
        # The task travels as a header (OpenAI rejects `metadata` without `store`); OpenAI-compatible servers
        # ignore unknown headers, Ratchet's demo teacher uses it.
        if task and _HEADER_SAFE.fullmatch(task):
            return self._headers + b"X-Ratchet-Task: " + task.encode() + b"\r\n"
        return self._headers

    async def _post(
        self, body: dict, task: str | None, t: Timeouts, path: str = "/chat/completions", large: bool = False
    ) -> http1.Response:
        assert self._pool is not None, "Upstream.start() first"
        if large and self._offload is not None:  # a large request's body, encoded in the lane
            payload = await self._offload.run(json_pieces.dumps, body)
        else:
            payload = orjson.dumps(body)
        return await self._pool.post(path, payload, self._hdrs(task), t.connect)

    async def complete(
        self,
        body: dict[str, Any],
        model: str | None = None,
        timeout_s: float | None = None,
        task: str | None = None,
        timeouts: Timeouts | None = None,
        large: bool = False,
    ) -> dict:
        """The completion for `body` (validated: :func:`check_completion`); GatewayError on any failure. `large`:
        the body is a large request's, encoded in the lane."""
        body = {
            **upstream_body(body, CHAT_FIELDS, self.extras),
            "model": model or self.model,
            "stream": False,
        }
        body.pop("stream_options", None)
        t = self._timeouts(timeout_s, timeouts)
        if not self.fast:
            return await self._litellm_complete(body, t.total or t.first_byte)
        return check_completion(await self._answer("/chat/completions", body, task, t, large))

    async def embed(
        self, body: dict[str, Any], timeouts: Timeouts, task: str | None = None, large: bool = False
    ) -> dict:
        """The embeddings of `body` (OpenAI's ``POST /embeddings``, the model rewritten; litellm's ``aembedding``
        for other providers), checked by :func:`check_embeddings`; GatewayError on any failure. `large`: a large
        request's body, encoded in the lane."""
        body = {**upstream_body(body, EMBEDDINGS_FIELDS, self.extras), "model": self.model}
        if not self.fast:
            return check_embeddings(await self._litellm_embed(body, timeouts.total or timeouts.first_byte))
        return check_embeddings(await self._answer("/embeddings", body, task, timeouts, large))

    async def _answer(
        self, path: str, body: dict, task: str | None, t: Timeouts, large: bool = False
    ) -> dict:
        """The JSON object a non-streaming POST of `body` to `path` answers; GatewayError on any failure."""
        deadline = asyncio.get_running_loop().time() + (
            min(t.first_byte, t.total) if t.total else t.first_byte
        )
        phase = "answer"
        try:
            # the whole non-streaming answer is its first byte: the body starts only once generation is done
            async with asyncio.timeout_at(deadline):
                resp = await self._post(body, task, t, path, large)
                try:
                    phase = "body"
                    raw = await resp.read()
                    status = resp.status
                finally:
                    resp.release()
        except TimeoutError as exc:
            raise _timeout_error(phase, t) from exc
        except http1.Http1Error as exc:
            raise _transport_error(exc, t) from exc
        return _parse_response(status, raw)

    async def stream(
        self,
        body: dict[str, Any],
        timeout_s: float | None = None,
        task: str | None = None,
        timeouts: Timeouts | None = None,
        large: bool = False,
    ) -> AsyncIterator[tuple[bytes, dict]]:
        """Yield each chunk as (its ``data:`` payload, the parsed and checked chunk), ``[DONE]`` excluded: the
        chunks of :meth:`stream_batches` one at a time (its errors too)."""
        async for batch in self.stream_batches(body, timeout_s, task, timeouts, large):
            for item in batch:
                yield item

    async def stream_batches(
        self,
        body: dict[str, Any],
        timeout_s: float | None = None,
        task: str | None = None,
        timeouts: Timeouts | None = None,
        large: bool = False,
    ) -> AsyncIterator[list[tuple[bytes, dict]]]:
        """Yield the chunks that arrived together (one read of the upstream's body: never one that is still to
        come), each as (its ``data:`` payload, the parsed and checked chunk), ``[DONE]`` excluded; never an empty
        batch. The relay sends a batch in one write (``chat.relay``): on loopback each write costs the sender the
        receiver's wake-up, and an upstream that writes its events together gets them relayed together.

        Raises GatewayError before the first chunk (the caller can still answer with an HTTP error) or between two
        batches (the caller ends its stream with an error event): an SSE error event, a chunk that is not a chunk
        object (:func:`check_chunk`), a body that ends before ``[DONE]``, a timeout of any phase (the good chunks of
        a read before a bad one are yielded first)."""
        body = {**upstream_body(body, CHAT_FIELDS, self.extras), "model": self.model, "stream": True}
        body["stream_options"] = {"include_usage": True}
        t = self._timeouts(timeout_s, timeouts)
        if not self.fast:
            async for raw in self._litellm_stream(body, t.total or t.first_byte):
                yield [(raw, check_chunk(orjson.loads(raw)))]
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        first = start + (min(t.first_byte, t.total) if t.total else t.first_byte)
        try:
            async with asyncio.timeout_at(first):
                resp = await self._post(body, task, t, large=large)
        except TimeoutError as exc:
            raise _timeout_error("first", t) from exc
        except http1.Http1Error as exc:
            raise _transport_error(exc, t) from exc
        try:
            if resp.status != 200:
                try:
                    async with asyncio.timeout(t.idle):
                        raw = await resp.read()
                except (TimeoutError, http1.Http1Error):
                    raw = b""
                _parse_response(resp.status, raw)
            buf = b""
            started = False
            while True:
                deadline = loop.time() + t.idle if started else first
                if t.total:
                    deadline = min(deadline, start + t.total)
                try:
                    async with asyncio.timeout_at(deadline):
                        piece = await resp.chunk()
                except TimeoutError as exc:
                    total_hit = bool(t.total) and deadline >= start + t.total
                    raise _timeout_error("total" if total_hit else "idle" if started else "first", t) from exc
                except http1.Http1Error as exc:
                    raise GatewayError(
                        502, "the model's stream broke off; retry", "upstream_stream_broken"
                    ) from exc
                if not piece:
                    break
                buf += piece
                if b"\n\n" not in buf:
                    continue
                *events, buf = buf.split(b"\n\n")
                batch = []
                done = False
                for event in events:
                    data, is_error = _sse_data(event)
                    if data is None:
                        continue
                    if data == b"[DONE]":
                        done = True
                        break
                    try:
                        batch.append((data, _parse_chunk(data, is_error)))
                    except GatewayError:
                        if batch:  # the chunks before the bad one go out first, as they would one at a time
                            yield batch
                        raise
                if batch:
                    started = True
                    yield batch
                if done:
                    return
            # OpenAI-compatible servers always end with [DONE]: a body that stops before it is a broken stream.
            raise GatewayError(502, "the model's stream ended before [DONE]; retry", "upstream_stream_broken")
        finally:
            resp.release()

    # litellm fallback (non-OpenAI providers) ----------------------------------------------------------------
    # Only the allow-list's fields become litellm's arguments (``ratchet_gateway.forwarded``): the model, the key,
    # the API base and the timeout are the operator's, and nothing else litellm reads (an endpoint, headers, a
    # mocked answer, retries, callbacks' metadata) can come from a client.
    async def _litellm_complete(self, body: dict, timeout_s: float | None) -> dict:
        import litellm

        kwargs = litellm_args(body, CHAT_FIELDS, self.extras)
        try:
            resp = await litellm.acompletion(
                model=self.requested_model,
                api_key=self.api_key,
                api_base=self.base or None,
                timeout=timeout_s or self.timeout_s,
                **kwargs,
            )
        except Exception as exc:
            raise _litellm_error(exc) from exc
        return resp.model_dump(exclude_none=True)

    async def _litellm_embed(self, body: dict, timeout_s: float | None) -> dict:
        import litellm

        kwargs = litellm_args(body, EMBEDDINGS_FIELDS, self.extras)
        try:
            resp = await litellm.aembedding(
                model=self.requested_model,
                input=body["input"],
                api_key=self.api_key,
                api_base=self.base or None,
                timeout=timeout_s or self.timeout_s,
                **kwargs,
            )
        except Exception as exc:
            raise _litellm_error(exc) from exc
        return resp.model_dump(exclude_none=True)

    async def _litellm_stream(self, body: dict, timeout_s: float | None) -> AsyncIterator[bytes]:
        import litellm

        kwargs = litellm_args(body, CHAT_FIELDS, self.extras)
        try:
            resp = await litellm.acompletion(
                model=self.requested_model,
                api_key=self.api_key,
                api_base=self.base or None,
                stream=True,
                timeout=timeout_s or self.timeout_s,
                **kwargs,
            )
            async for chunk in resp:
                yield orjson.dumps(chunk.model_dump(exclude_none=True))
        except GatewayError:
            raise
        except Exception as exc:
            raise _litellm_error(exc) from exc


def _transport_error(exc: http1.Http1Error, t: Timeouts) -> GatewayError:
    if isinstance(exc, http1.ConnectTimeout):
        return _timeout_error("connect", t)
    if isinstance(exc, http1.TooLarge):
        return GatewayError(
            502,
            "the model's answer is larger than the gateway reads (RATCHET_UPSTREAM_MAX_RESPONSE_BYTES); ask for a "
            "shorter one (max_tokens)",
            "upstream_response_too_large",
        )
    if isinstance(exc, http1.Disconnected) and exc.before_headers and exc.sent:
        return GatewayError(
            502,
            "the model endpoint closed the connection without answering; it was not asked again, since it may "
            "have received the request (retry if you want it asked again)",
            "upstream_bad_response",
        )
    if isinstance(exc, http1.ConnectFailed) or (isinstance(exc, http1.Disconnected) and exc.before_headers):
        return GatewayError(503, "the model endpoint is unreachable; retry later", "upstream_unavailable")
    if isinstance(exc, http1.Disconnected):
        return GatewayError(502, "the model's answer was cut short; retry", "upstream_bad_response")
    return GatewayError(502, "the model endpoint's answer is not HTTP/1.1; retry", "upstream_bad_response")


def _timeout_error(phase: str, t: Timeouts) -> GatewayError:
    if phase == "connect":
        what = f"the model endpoint did not accept a connection within {t.connect:g} s"
    elif phase == "idle":
        what = f"the model stopped sending for {t.idle:g} s"
    elif phase == "total":
        what = f"the model's answer took longer than the {t.total:g} s total limit"
    elif phase == "first":
        what = f"the model did not start answering within {t.first_byte:g} s"
    else:
        what = f"the model did not answer within {min(t.first_byte, t.total or t.first_byte):g} s"
    return GatewayError(504, f"{what}; retry later", "upstream_timeout")


def _sse_data(event: bytes) -> tuple[bytes | None, bool]:
    """(the data of one SSE event or None when it has none, whether its ``event:`` field says ``error``)."""
    data: list[bytes] = []
    is_error = False
    for line in event.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"data:"):
            data.append(line[5:].strip())
        elif line.startswith(b"event:") and line[6:].strip() == b"error":
            is_error = True
    return (b"\n".join(data) if data else None), is_error


def _bad(what: str) -> GatewayError:
    return GatewayError(502, f"the model sent a malformed answer ({what}); retry", "upstream_bad_response")


def _upstream_error_message(err: Any) -> str:
    msg = err.get("message") if isinstance(err, dict) else err
    return str(msg)[:300] if msg else "no message"


def _parse_chunk(data: bytes, is_error: bool = False) -> dict:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _bad("a stream chunk that is not JSON") from None
    if is_error or (isinstance(obj, dict) and "error" in obj):
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        raise GatewayError(
            502, f"the model failed mid-answer: {_upstream_error_message(err)}", "upstream_stream_error"
        )
    return check_chunk(obj)


def _is_count(v: Any) -> bool:
    # some OpenAI-compatible servers write counts as 12.0: a number, not text or a flag
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 2**53)


def _check_usage(usage: Any) -> None:
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise _bad("usage is not an object")
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if not _is_count(usage.get(k)):
            raise _bad(f"usage.{k} is not a count")
    details = usage.get("completion_tokens_details")
    if details is not None and (
        not isinstance(details, dict) or not _is_count(details.get("reasoning_tokens"))
    ):
        raise _bad("usage.completion_tokens_details is not an object of counts")


def _check_calls(calls: Any, where: str) -> None:
    if calls is None:
        return
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise _bad(f"{where}.tool_calls is not a list of objects")
    for c in calls:
        fn = c.get("function")
        if fn is not None and not (
            isinstance(fn, dict)
            and isinstance(fn.get("name") or "", str)
            and isinstance(fn.get("arguments") or "", str)
        ):
            raise _bad(f"{where}.tool_calls[].function is not a name and arguments")
        if not _is_count(c.get("index")):
            raise _bad(f"{where}.tool_calls[].index is not a number")


def check_completion(data: dict) -> dict:
    """`data` if it is a chat completion the gateway can serve and record, else GatewayError 502."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise _bad("choices is not a list of objects")
    for c in choices:
        msg = c.get("message")
        if not isinstance(msg, dict):
            raise _bad("a choice has no message object")
        if not isinstance(msg.get("content") or "", str):
            raise _bad("message.content is not text")
        _check_calls(msg.get("tool_calls"), "message")
        if not isinstance(c.get("finish_reason") or "", str):
            raise _bad("finish_reason is not text")
    _check_usage(data.get("usage"))
    return data


def check_embeddings(data: dict) -> dict:
    """`data` if it is an embeddings answer the gateway can serve and record (a list of objects, each with an
    ``embedding`` list or base64 text; counts in ``usage``), else GatewayError 502. The vectors themselves are
    passed on unread: checking every number would cost the event loop time in proportion to the answer."""
    items = data.get("data")
    if not isinstance(items, list) or not all(isinstance(d, dict) for d in items):
        raise _bad("data is not a list of objects")
    if not all(isinstance(d.get("embedding"), list | str) for d in items):
        raise _bad("an embedding is not a list or base64 text")
    _check_usage(data.get("usage"))
    return data


def check_chunk(obj: Any) -> dict:
    """`obj` if it is a chat completion chunk (choices a list of objects with a delta object), else 502."""
    if not isinstance(obj, dict):
        raise _bad("a stream chunk that is not an object")
    choices = obj.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise _bad("a stream chunk whose choices is not a list of objects")
        for c in choices:
            delta = c.get("delta")
            if delta is not None:
                if not isinstance(delta, dict):
                    raise _bad("a stream chunk whose delta is not an object")
                if not isinstance(delta.get("content") or "", str):
                    raise _bad("a stream chunk whose content is not text")
                _check_calls(delta.get("tool_calls"), "delta")
            if not isinstance(c.get("finish_reason") or "", str):
                raise _bad("a stream chunk whose finish_reason is not text")
    _check_usage(obj.get("usage"))
    return obj


def _parse_response(status: int, raw: bytes) -> dict:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if status >= 500 or (status == 200 and not isinstance(data, dict)):
        raise GatewayError(502, f"the model endpoint failed (HTTP {status}); retry later", "upstream_error")
    if status in _CREDENTIALS:
        raise _credentials_refused(status)
    if status == 429:
        raise _account_limited()
    if status != 200:
        msg = "the model endpoint rejected the request"
        if isinstance(data, dict) and isinstance(data.get("error"), dict) and data["error"].get("message"):
            msg = _upstream_error_message(data["error"])
        raise GatewayError(status if 400 <= status < 500 else 502, msg, "upstream_rejected")
    return data


# An upstream 401 or 403 is about the operator's key, not the client's: never passed on as the client's (its SDK
# would blame its own key) nor with the provider's words (which quote part of the operator's key).
_CREDENTIALS = (401, 403)


def _credentials_refused(status: int) -> GatewayError:
    return GatewayError(
        502,
        f"the model endpoint refused this gateway's own credentials (HTTP {status}); the operator must check "
        "them. Retry later",
        "upstream_credentials",
    )


def _account_limited() -> GatewayError:
    # a provider's 429 is about the operator's account: its words name the organization and what every client
    # together used of its limits ("in organization org-... Limit 30000, Used 29500")
    return GatewayError(
        429,
        "the model endpoint is limiting this gateway's account (its rate or quota); retry later",
        "upstream_rate_limited",
    )


def _litellm_error(exc: Exception) -> GatewayError:
    status = getattr(exc, "status_code", None)
    if isinstance(exc, asyncio.TimeoutError) or "Timeout" in type(exc).__name__:
        return GatewayError(504, "the model did not answer in time; retry later", "upstream_timeout")
    if status in _CREDENTIALS:
        return _credentials_refused(status)
    if status == 429:
        return _account_limited()
    if isinstance(status, int) and 400 <= status < 500:
        return GatewayError(status, "the model endpoint rejected the request", "upstream_rejected")
    return GatewayError(502, "the model endpoint failed; retry later", "upstream_error")
