"""The effect gate over MCP: the tools of ``ratchet_assets.effects.tools`` served with the official MCP SDK.

Two transports, one server (:func:`mcp_server`):

- stdio, ``ratchet effects mcp`` (:func:`serve_stdio`): the process opens the control DB itself and acts as the
  one caller its key names (``RATCHET_EFFECTS_API_KEY``), checked against ``RATCHET_API_KEYS`` and
  ``RATCHET_ADMIN_KEY`` like a bearer key;
- streamable HTTP, ``POST /mcp`` on ``ratchet effects serve`` (:class:`McpHttpDoor`): every request carries the
  caller's ``Authorization: Bearer <key>``, authenticated before the SDK sees the request, exactly as the REST
  routes do. The transport is stateless with JSON answers (no ``Mcp-Session-Id``, no server-sent stream, so
  ``/mcp`` takes POST only and ``GET`` is 405): each call stands alone, which is all a gate whose every answer
  is one ledger transaction needs, and any replica can answer it.

A tool runs the REST route's :class:`~ratchet_assets.effects.caller.CallerGate` method in a worker thread (the
ledger is synchronous SQL); what the caller can fix comes back as a tool error whose text is OpenAI's error
document, the REST route's body for the same mistake.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from ratchet_assets.effects.caller import ApiError, CallerGate
from ratchet_assets.effects.ledger import EffectLedger
from ratchet_assets.effects.tools import (
    INSTRUCTIONS,
    NAME,
    SUMMARY,
    TITLE,
    TOOLS,
    TOOLS_BY_NAME,
    GateTool,
)
from ratchet_core.api_keys import KeyStore

log = logging.getLogger(__name__)

CALLER_STATE = "ratchet_effects_caller"  # the authenticated caller, in the HTTP request's scope state
INTERNAL = "internal error of the effect gate; retry, and report it if it persists"
CallerOf = Callable[[ServerRequestContext[Any, Any]], str | None]


def _tool(tool: GateTool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema(),
        output_schema=tool.output_schema(),
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.idempotent,
            open_world_hint=False,
        ),
    )


def _refused(exc: ApiError) -> types.CallToolResult:
    """A tool error: OpenAI's error document as the text an agent reads."""
    text = json.dumps(exc.body().model_dump())
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def mcp_server(ledger: EffectLedger, caller_of: CallerOf) -> Server[Any]:
    """The gate's MCP server over `ledger`; `caller_of` names the authenticated caller of a request (None:
    nobody, and every tool call is refused)."""
    listed = [_tool(tool) for tool in TOOLS]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = caller_of(ctx)
        if caller is None:
            return _refused(
                ApiError(401, "send 'Authorization: Bearer <client key or admin key>'", "invalid_api_key")
            )
        tool = TOOLS_BY_NAME.get(params.name)
        if tool is None:
            known = ", ".join(TOOLS_BY_NAME)
            return _refused(
                ApiError(404, f"no tool {params.name[:80]!r}; the tools are {known}", "unknown_tool")
            )
        gate = CallerGate(ledger, caller)
        try:
            answer = await anyio.to_thread.run_sync(tool.call, gate, params.arguments or {})
        except ApiError as exc:
            return _refused(exc)
        except Exception as exc:  # the caller gets no internals; the log gets the kind of failure
            log.error("effect gate: tool %s failed: %s", tool.name, type(exc).__name__)
            return _refused(ApiError(500, INTERNAL, "internal"))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(answer))], structured_content=answer
        )

    return Server(
        NAME,
        version="1",
        title=TITLE,
        description=SUMMARY,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def caller_from_request(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The caller :class:`McpHttpDoor` authenticated for this HTTP request (None over any other transport)."""
    request = ctx.request
    if request is None:
        return None
    return request.scope.get("state", {}).get(CALLER_STATE)


def _error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ApiError(status, message, code).body().model_dump(), status, headers=headers)


class McpHttpDoor:
    """``/mcp``: the bearer key authenticated as the REST routes do, then the SDK's streamable HTTP transport.

    Stateless, JSON answers. A browser page of another origin is refused (the MCP transport's rule against DNS
    rebinding); agents and MCP clients send no ``Origin``."""

    def __init__(self, ledger: EffectLedger, keys: KeyStore) -> None:
        self.keys = keys
        self.manager = StreamableHTTPSessionManager(
            app=mcp_server(ledger, caller_from_request), json_response=True, stateless=True
        )

    def running(self) -> AbstractAsyncContextManager[None]:
        """The transport's task group, entered for the app's lifetime (its lifespan)."""
        return self.manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin and urlsplit(origin).netloc != headers.get("host"):
            message = (
                f"requests from the page {origin[:100]!r} are refused; call /mcp from an agent or MCP client"
            )
            await _error(403, message, "cross_origin")(scope, receive, send)
            return
        caller = self.keys.authenticate(headers.get("authorization"))
        if caller is None:
            refused = _error(
                401,
                "send 'Authorization: Bearer <client key or admin key>' with every /mcp request",
                "invalid_api_key",
                {"WWW-Authenticate": 'Bearer realm="ratchet-effect-gate"'},
            )
            await refused(scope, receive, send)
            return
        scope.setdefault("state", {})[CALLER_STATE] = caller
        await self.manager.handle_request(scope, receive, send)


def stdio_caller(api_key: str | None) -> tuple[EffectLedger, str]:
    """The ledger and the caller of ``ratchet effects mcp``: the control DB and keys from RATCHET_* settings, and
    the caller its key (`api_key`, else ``RATCHET_EFFECTS_API_KEY``) names. ValueError says what to set."""
    from ratchet_assets.effects.caller import ADMIN, key_store
    from ratchet_core.api_keys import parse_api_keys
    from ratchet_core.control_db import make_engine
    from ratchet_core.settings import load_settings

    settings = load_settings()
    key = api_key or settings.effects_api_key
    if not key:
        raise ValueError(
            "no key: set RATCHET_EFFECTS_API_KEY (or pass --api-key) to a client's key from RATCHET_API_KEYS, or "
            "to RATCHET_ADMIN_KEY"
        )
    caller = key_store(parse_api_keys(settings.api_keys), settings.admin_key).authenticate_token(key)
    if caller is None:
        raise ValueError(
            "the key is neither a client's key in RATCHET_API_KEYS nor RATCHET_ADMIN_KEY; set "
            "RATCHET_EFFECTS_API_KEY to one of them"
        )
    log.info("effect gate over stdio as %s", "the admin" if caller == ADMIN else f"client {caller}")
    return EffectLedger(
        make_engine(settings.control_db_url), max_cost_usd=settings.effects_max_cost_usd
    ), caller


def serve_stdio(ledger: EffectLedger, caller: str) -> None:
    """Serve the tools over stdin/stdout as `caller` until the client closes the stream."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(ledger, lambda ctx: caller)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
