"""The gateway's answer to a missing or unknown client key (the keys themselves: ``ratchet_core.api_keys``)."""

from __future__ import annotations

from ratchet_gateway.errors import GatewayError


def invalid_key_error() -> GatewayError:
    """The 401 every client route answers for a missing or unknown key (the key itself is never echoed)."""
    return GatewayError(
        401,
        "invalid or missing API key: send 'Authorization: Bearer <key>' with a key from RATCHET_API_KEYS",
        "invalid_api_key",
    )
