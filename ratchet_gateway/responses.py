"""The parts every gateway response shares, built here and nowhere else: the ``x-ratchet-*`` headers and OpenAI's
error shape ``{"error": {"message", "type", "param", "code"}}``.

Every response carries ``x-ratchet-request-id``, ``x-ratchet-served-by`` (``teacher`` | ``student``),
``x-ratchet-version``, ``x-ratchet-manifest``, ``x-ratchet-overhead-ms`` (the gateway's own time) and
``X-Content-Type-Options: nosniff``; the chat route fills in the real values (``ratchet_gateway.chat``), every
other route the defaults (``GatewayApp`` adds any a route left out, the manifest sequence in force among them).
On a chat answer ``x-ratchet-version`` is the adapter version when the student served and ``teacher`` when the
teacher did (or nobody: an error), and ``x-ratchet-manifest`` the sequence of the release manifest the request
was routed by. The HTML pages and their files add :data:`PAGE_HEADERS` (a strict Content-Security-Policy: the
page runs only its own script, loads nothing from elsewhere and cannot be framed).

Every error message a client can trigger says what to do next and never contains a secret (keys, bearer tokens,
upstream credentials): it is passed through ``ratchet_core.redact.redact_text`` here, on its way out.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from pydantic import BaseModel
from starlette.responses import Response

from ratchet_core.redact import redact_text
from ratchet_gateway.errors import GatewayError, error_type


def new_request_id() -> str:
    """``req_`` + 24 hex digits from the OS's CSPRNG (``secrets.token_hex(12)`` without its two layers)."""
    return "req_" + os.urandom(12).hex()


def ratchet_headers(request_id: str | None = None) -> dict[str, str]:
    """The ``x-ratchet-*`` headers of a response the teacher (or nobody) served; a fresh request id when none."""
    return {
        "x-ratchet-request-id": request_id or new_request_id(),
        "x-ratchet-served-by": "teacher",
        "x-ratchet-version": "teacher",
        "x-ratchet-overhead-ms": "0.000",
        "x-content-type-options": "nosniff",
    }


# What every page the gateway serves (the dashboard, its script and style) sends besides the x-ratchet-* headers.
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}


def default_headers(manifest_sequence: int) -> list[tuple[bytes, bytes]]:
    """The x-ratchet-* headers (and nosniff) as raw ASGI pairs, for a response that set none of its own."""
    h = ratchet_headers()
    h["x-ratchet-manifest"] = str(manifest_sequence)
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in h.items()]


def error_body(
    status: int, message: str, type_: str | None = None, code: str | None = None, param: str | None = None
) -> bytes:
    """OpenAI's error document (the message redacted)."""
    return orjson.dumps(
        {
            "error": {
                "message": redact_text(message),
                "type": type_ or error_type(status),
                "param": param,
                "code": code,
            }
        }
    )


def error_event(err: GatewayError) -> bytes:
    """An SSE ``data:`` event carrying `err` in OpenAI's shape (a stream that broke after its headers went out)."""
    return b"data: " + error_body(err.status, err.message, err.type, err.code) + b"\n\n"


def error_response(err: GatewayError, headers: dict[str, str] | None = None) -> Response:
    """`err` in OpenAI's shape, with `headers` (default: fresh ``x-ratchet-*`` ones) and the error's own."""
    headers = headers or ratchet_headers()
    if err.headers:
        headers = {**headers, **err.headers}
    return Response(
        error_body(err.status, err.message, err.type, err.code, err.param),
        status_code=err.status,
        media_type="application/json",
        headers=headers,
    )


def openai_error(status: int, message: str, code: str | None = None) -> Response:
    return error_response(GatewayError(status, message, code))


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """`obj` as JSON (orjson) with the ``x-ratchet-*`` headers."""
    return Response(
        orjson.dumps(obj),
        status_code=status,
        media_type="application/json",
        headers=headers or ratchet_headers(),
    )


# OpenAPI documentation of the error shape (responses are built by the functions above, not by these models).


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error shape; every non-2xx answer of the gateway has it."""

    error: ErrorDetail


_ERROR_DESCRIPTIONS = {
    400: "Invalid request (the message names the field and what to fix)",
    401: "Invalid or missing API key",
    403: "Forbidden",
    404: "Not found",
    413: "Request body too large",
    500: "Internal gateway error",
    502: "The model endpoint failed",
    503: "Service unavailable (ledger or model endpoint)",
    504: "The model did not answer in time",
}


def error_docs(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: these statuses answer with :class:`ErrorResponse`."""
    return {s: {"model": ErrorResponse, "description": _ERROR_DESCRIPTIONS.get(s, "Error")} for s in statuses}
