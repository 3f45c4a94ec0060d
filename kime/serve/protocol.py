"""uvicorn's HTTP/1.1 protocol with a deadline on request headers.

uvicorn bounds an idle keep-alive connection but not one that sends its request line and headers
a byte at a time (slowloris): such a client would hold a connection slot for as long as it
likes. Here a connection whose headers are not complete `header_read_timeout` seconds after its
first byte (or after it connected) gets a 408 and is closed. The body has its own deadline in
the app (`body_read_timeout`).
"""
from __future__ import annotations

import asyncio
from typing import Any, Optional, Type

from uvicorn.protocols.http.h11_impl import H11Protocol

TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"content-length: 29\r\nconnection: close\r\n\r\nrequest headers took too long")


class HeaderDeadlineProtocol(H11Protocol):
    """`H11Protocol`, closing connections whose request headers arrive too slowly."""

    header_read_timeout: float = 10.0

    # uvicorn's own override narrows asyncio.Protocol's BaseTransport the same way
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: Optional[asyncio.TimerHandle] = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self._between_requests():
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if not self._between_requests():
            self._disarm()  # the headers are in: the app's body deadline takes over

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        cycle = self.cycle
        return cycle is None or bool(cycle.response_complete)

    def _arm(self) -> None:
        if self.header_read_timeout > 0:
            self._header_timer = self.loop.call_later(self.header_read_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.write(TIMEOUT_RESPONSE)
            self.transport.close()


def with_header_deadline(seconds: float) -> Type[Any]:
    """The protocol class for uvicorn's `http=`, with `seconds` as its header deadline."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,),
                {"header_read_timeout": float(seconds)})
