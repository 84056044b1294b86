"""``GatewayError``: the error every gateway layer raises (routes, dependencies, upstream calls).

Its ``status`` is the HTTP status the client gets and its ``type`` OpenAI's error type for that status. Turning it
into a response (OpenAI's ``{"error": {...}}`` shape with the ``x-ratchet-*`` headers) happens in one place,
``ratchet_gateway.responses``; the app's exception handler does it for errors raised in routes and dependencies.
"""

from __future__ import annotations

# HTTP status -> OpenAI error type
ERROR_TYPES = {
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


def error_type(status: int) -> str:
    """OpenAI's error type for an HTTP status (``api_error`` for any other)."""
    return ERROR_TYPES.get(status, "api_error")


class GatewayError(Exception):
    """An error the gateway answers with; ``status`` is the HTTP status returned to the client."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        type_: str | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type_ or error_type(status)
        self.param = param  # OpenAI's ``param``: the request field at fault, when one is
