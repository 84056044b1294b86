"""FastAPI dependencies: the gateway state and who is calling.

- :func:`get_gateway` (``GatewayDep``): the app's :class:`~ratchet_gateway.state.Gateway`, from ``app.state``,
  so a test or an embedding app replaces it by building its own app (no module globals).
- :func:`client_name` (``ClientDep``): the calling client's name from ``Authorization: Bearer <key>``
  (``RATCHET_API_KEYS``), else 401.
- :func:`require_admin` (``AdminDep``): ``Authorization: Bearer <RATCHET_ADMIN_KEY>``, else 403.

Failures raise :class:`~ratchet_gateway.errors.GatewayError`; the app's exception handler answers it in OpenAI's
shape. The two bearer schemes are declared with ``HTTPBearer`` so ``/openapi.json`` documents them
(``clientKey``, ``adminKey``); the key is checked here, not by FastAPI (``auto_error=False``), so a missing key
gets the same OpenAI-shaped answer as a wrong one.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from ratchet_gateway.auth import invalid_key_error
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.state import Gateway

client_bearer = HTTPBearer(
    scheme_name="clientKey",
    description="A client key from RATCHET_API_KEYS (name:secret; send the secret).",
    auto_error=False,
)
admin_bearer = HTTPBearer(
    scheme_name="adminKey",
    description="The gateway's RATCHET_ADMIN_KEY (safety switches only).",
    auto_error=False,
)
Credentials = HTTPAuthorizationCredentials | None


def get_gateway(request: Request) -> Gateway:
    return request.app.state.gateway


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


def client_name(gw: GatewayDep, credentials: Annotated[Credentials, Security(client_bearer)]) -> str:
    """The name of the client whose key was sent (never the key), else 401."""
    client = gw.keys.authenticate_token(credentials.credentials if credentials else None)
    if client is None:
        raise invalid_key_error()
    return client


ClientDep = Annotated[str, Depends(client_name)]


def require_admin(gw: GatewayDep, credentials: Annotated[Credentials, Security(admin_bearer)]) -> None:
    """Pass only with the admin key (compared in constant time); 403 when it is off or wrong."""
    key = gw.settings.admin_key
    if not key:
        raise GatewayError(
            403, "admin routes are off: set RATCHET_ADMIN_KEY on the gateway to use them", "admin_disabled"
        )
    token = credentials.credentials.strip() if credentials else ""
    if not hmac.compare_digest(token.encode(), key.encode()):
        raise GatewayError(403, "admin routes need 'Authorization: Bearer <RATCHET_ADMIN_KEY>'", "forbidden")


AdminDep = Depends(require_admin)
