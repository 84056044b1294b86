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
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type_ or error_type(status)
        self.param = param  # OpenAI's ``param``: the request field at fault, when one is
        self.headers = headers  # extra response headers (``retry-after`` on a 429)


CLIENT_CLOSED = 499  # nginx's "client closed request": the client left before the gateway could answer it


def client_closed_error() -> GatewayError:
    """The 499 of a request whose client closed the connection before sending its whole body: logged and counted
    as such, never a 500 (nobody reads the answer)."""
    return GatewayError(
        CLIENT_CLOSED,
        "the client closed the connection before sending the whole request body",
        "client_closed_request",
    )
