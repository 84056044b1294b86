"""Errors in OpenAI's shape: ``{"error": {"message", "type", "code"}}``, plus Ratchet's response headers.

Every message a client can trigger says what to do next and never contains a secret (keys, bearer tokens,
upstream credentials): upstream error text is passed through ``ratchet_core.redact.redact_text`` first.
"""

from __future__ import annotations

import orjson
from starlette.responses import Response

from ratchet_core.redact import redact_text

# HTTP status -> OpenAI error type
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout",
}


class GatewayError(Exception):
    """An error the gateway answers with; ``status`` is the HTTP status returned to the client."""

    def __init__(self, status: int, message: str, code: str | None = None, type_: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type_ or _TYPES.get(status, "api_error")


def error_body(status: int, message: str, type_: str | None = None, code: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": type_ or _TYPES.get(status, "api_error"),
                "param": None,
                "code": code,
            }
        }
    )


def error_response(err: GatewayError, headers: dict[str, str]) -> Response:
    return Response(
        error_body(err.status, redact_text(err.message), err.type, err.code),
        status_code=err.status,
        media_type="application/json",
        headers=headers,
    )
