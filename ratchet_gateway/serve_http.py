"""uvicorn's httptools protocol with one change for the chat route: a response's head and body in one ``send``.

uvicorn writes a response's status line and headers in one socket write and its body in another. On loopback
each write costs the sender the receiver's TCP processing and wake-up (measured with py-spy at c=16: the two
response writes were ~16% of the gateway's main-thread CPU). :class:`GatewayHttpProtocol` offers the ASGI app a
scope extension, ``ratchet.hold_head``: calling it makes the connection hold the next write (the head the app's
``http.response.start`` produces) and send it together with the following one (the body). ``ChatHandler.asgi``
calls it for a complete (non-streaming) answer only, right before sending it; under any other server the
extension is absent and nothing changes. ``ratchet gateway`` selects this protocol (``ratchet_gateway.cli``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

EXTENSION = "ratchet.hold_head"
_NO_EXTENSIONS: dict = {}


def hold_head_of(scope: Any) -> Any:
    """The request's ``ratchet.hold_head`` callable, or None under any other server."""
    return scope.get("extensions", _NO_EXTENSIONS).get(EXTENSION)


class _HoldingTransport:
    """A transport that can hold one write and prepend it to the next (every other call is the transport's)."""

    __slots__ = ("_transport", "_hold", "_held")

    def __init__(self, transport: asyncio.Transport):
        self._transport = transport
        self._hold = False
        self._held: bytes | None = None

    def hold_next(self) -> None:
        self._hold = True

    def write(self, data: bytes) -> None:
        if self._hold:
            self._hold = False
            self._held = bytes(data)
            return
        held = self._held
        if held is not None:
            self._held = None
            data = held + data
        self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def _flush(self) -> None:
        self._hold = False
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatewayHttpProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` whose requests carry the ``ratchet.hold_head`` extension (see the module)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _HoldingTransport(transport)  # type: ignore[assignment]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        hold_next = self.transport.hold_next  # type: ignore[attr-defined]
        self.scope["extensions"] = {EXTENSION: hold_next}  # type: ignore[typeddict-unknown-key]
