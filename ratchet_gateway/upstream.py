"""Calling the teacher and the student: a lean aiohttp hot path for OpenAI-compatible upstreams, litellm otherwise.

Measured here: ``litellm.acompletion`` costs ~12 ms of CPU per call, a raw aiohttp POST ~0.3 ms. So litellm does
what it is good at *once, at startup*: ``litellm.get_llm_provider`` resolves the teacher's provider, API base and
credentials, and the price map gives per-token prices (cached per model). When the provider speaks the OpenAI
wire format (openai, hosted_vllm, openai-compatible bases: vLLM, OpenAI, most open-model hosts) every request
goes through one shared keep-alive ``aiohttp.ClientSession`` with orjson and the model name rewritten; any other
provider (anthropic, bedrock, vertex...) goes through ``litellm.acompletion`` (the fallback path).

Failures map to OpenAI-shaped errors the gateway returns: connection refused -> 503, timeout -> 504, upstream
5xx or garbage -> 502, upstream 4xx passed through with its status (it is the client's request that is wrong).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from ratchet_core.pricing import Prices, model_prices  # noqa: F401  (re-exported)
from ratchet_gateway.errors import GatewayError

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


# The teacher's prices live in ratchet_core.pricing (the receipt states the same numbers); re-exported here.


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
    ):
        self.requested_model = model
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
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json"}
        if self.api_key:
            self._headers["Authorization"] = f"Bearer {self.api_key}"

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300),
                json_serialize=lambda o: orjson.dumps(o).decode(),
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        t = seconds or self.timeout_s
        return aiohttp.ClientTimeout(total=t, sock_connect=min(t, 10.0))

    def _hdrs(self, task: str | None) -> dict[str, str]:
        # The task travels as a header (OpenAI rejects `metadata` without `store`); OpenAI-compatible servers
        # ignore unknown headers, Ratchet's demo teacher uses it.
        return {**self._headers, "X-Ratchet-Task": task} if task else self._headers

    async def complete(
        self,
        body: dict[str, Any],
        model: str | None = None,
        timeout_s: float | None = None,
        task: str | None = None,
    ) -> dict:
        body = {**body, "model": model or self.model, "stream": False}
        body.pop("stream_options", None)
        if not self.fast:
            return await self._litellm_complete(body, timeout_s)
        try:
            async with self._session.post(
                self.base + "/chat/completions",
                data=orjson.dumps(body),
                headers=self._hdrs(task),
                timeout=self._timeout(timeout_s),
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except TimeoutError as exc:
            raise GatewayError(
                504,
                f"the model did not answer within {timeout_s or self.timeout_s:.0f} s; retry later",
                "upstream_timeout",
            ) from exc
        except aiohttp.ClientConnectionError as exc:
            raise GatewayError(
                503, "the model endpoint is unreachable; retry later", "upstream_unavailable"
            ) from exc
        return _parse_response(status, raw)

    async def stream(
        self, body: dict[str, Any], timeout_s: float | None = None, task: str | None = None
    ) -> AsyncIterator[bytes]:
        """Yield each SSE event's data payload (bytes, ``[DONE]`` excluded). Raises GatewayError before the first."""
        body = {**body, "model": self.model, "stream": True}
        body["stream_options"] = {"include_usage": True}
        if not self.fast:
            async for chunk in self._litellm_stream(body, timeout_s):
                yield chunk
            return
        try:
            resp = await self._session.post(
                self.base + "/chat/completions",
                data=orjson.dumps(body),
                headers=self._hdrs(task),
                timeout=self._timeout(timeout_s),
            )
        except TimeoutError as exc:
            raise GatewayError(
                504, "the model did not start answering in time; retry later", "upstream_timeout"
            ) from exc
        except aiohttp.ClientConnectionError as exc:
            raise GatewayError(
                503, "the model endpoint is unreachable; retry later", "upstream_unavailable"
            ) from exc
        try:
            if resp.status != 200:
                _parse_response(resp.status, await resp.read())
            buf = b""
            async for piece in resp.content.iter_any():
                buf += piece
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if line.startswith(b"data:"):
                            data = line[5:].strip()
                            if data == b"[DONE]":
                                return
                            yield data
            # OpenAI-compatible servers always end with [DONE]: a body that stops before it is a broken stream.
            raise GatewayError(502, "the model's stream ended before [DONE]; retry", "upstream_stream_broken")
        finally:
            resp.release()

    # litellm fallback (non-OpenAI providers) ----------------------------------------------------------------
    async def _litellm_complete(self, body: dict, timeout_s: float | None) -> dict:
        import litellm

        kwargs = {k: v for k, v in body.items() if k not in ("model", "stream")}
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

    async def _litellm_stream(self, body: dict, timeout_s: float | None) -> AsyncIterator[bytes]:
        import litellm

        kwargs = {k: v for k, v in body.items() if k not in ("model", "stream")}
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


def _parse_response(status: int, raw: bytes) -> dict:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if status >= 500 or (status == 200 and not isinstance(data, dict)):
        raise GatewayError(502, f"the model endpoint failed (HTTP {status}); retry later", "upstream_error")
    if status != 200:
        msg = "the model endpoint rejected the request"
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            msg = str(data["error"].get("message") or msg)
        code = 429 if status == 429 else (status if 400 <= status < 500 else 502)
        raise GatewayError(code, msg, "upstream_rejected")
    return data


def _litellm_error(exc: Exception) -> GatewayError:
    status = getattr(exc, "status_code", None)
    if isinstance(exc, asyncio.TimeoutError) or "Timeout" in type(exc).__name__:
        return GatewayError(504, "the model did not answer in time; retry later", "upstream_timeout")
    if isinstance(status, int) and 400 <= status < 500:
        return GatewayError(status, "the model endpoint rejected the request", "upstream_rejected")
    return GatewayError(502, "the model endpoint failed; retry later", "upstream_error")
