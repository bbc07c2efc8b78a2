"""uvicorn's WebSocket protocol, with closes that end the connection for good.

uvicorn closes a WebSocket's transport with `transport.close()`, which waits
until every buffered byte has been written. A client that stopped reading
never takes them, so after a send timeout (the app closes with 1013), a ping
timeout or a SIGTERM, the connection stayed open, holding its buffers (in
asyncio and in the kernel: megabytes each) and keeping a graceful shutdown
waiting for ever.

Here a close gives the peer `linger` seconds to take what is still buffered
(asyncio's buffer and the kernel's send queue), then resets the connection
(RST, which also drops what the kernel holds). A client that reads gets every
byte and a normal close, as before.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
from typing import Any, Final

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

# How often a closing connection's buffers are looked at while it drains.
_DRAIN_POLL: Final = 0.1
# On SIGTERM a stalled client gets this long, however long `linger` is.
SHUTDOWN_LINGER: Final = 2.0


def _kernel_unsent_bytes(transport: asyncio.BaseTransport) -> int:
    """Bytes still in the socket's kernel send queue (Linux SIOCOUTQ); 0 where unknown."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        size = array.array("i", [0])
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, size)
    except (OSError, ValueError):
        return 0
    return int(size[0])


class LingerBoundedTransport:
    """Wraps a transport so that `close()` drains within `linger` seconds or resets.

    Every other attribute is the wrapped transport's.
    """

    def __init__(self, transport: asyncio.Transport, linger: float) -> None:
        self._transport = transport
        self.linger = linger
        self._close_requested = False
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._close_requested or self._transport.is_closing()

    def close(self, linger: float | None = None) -> None:
        """Close once the peer has taken what is buffered; reset it after `linger` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.linger if linger is None else linger)
        if self._close_requested:
            self._deadline = min(self._deadline, deadline)  # a shorter linger wins
            return
        self._close_requested = True
        self._deadline = deadline
        self._check_drained()

    def _check_drained(self) -> None:
        self._timer = None
        transport = self._transport
        if transport.is_closing() and transport.get_write_buffer_size() == 0:
            return  # already closed (e.g. the connection was lost)
        pending = transport.get_write_buffer_size() + _kernel_unsent_bytes(transport)
        loop = asyncio.get_running_loop()
        if pending == 0:
            transport.close()  # nothing left to deliver: a normal close (FIN)
        elif loop.time() >= self._deadline:
            self.reset()
        else:
            self._timer = loop.call_later(_DRAIN_POLL, self._check_drained)

    def stop_draining(self) -> None:
        """The connection is gone: no more looking at its buffers."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def reset(self) -> None:
        """End the connection now, dropping anything unsent (RST, not FIN)."""
        self.stop_draining()
        self._close_requested = True
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            # Linger on, timeout 0: close() discards the kernel's send queue and
            # sends RST, instead of leaving it to retry into a zero window.
            with contextlib.suppress(OSError, ValueError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._transport.abort()


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol over a `LingerBoundedTransport`.

    `linger` is set per server by `protocol_class` (uvicorn builds protocols itself).
    """

    linger: float = 10.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        wrapped = LingerBoundedTransport(transport, self.linger)  # type: ignore[arg-type]
        super().connection_made(wrapped)  # type: ignore[arg-type]

    def _bounded(self) -> LingerBoundedTransport | None:
        transport = self.transport
        return transport if isinstance(transport, LingerBoundedTransport) else None

    def keepalive_timeout(self) -> None:
        # The peer had ping_timeout to answer: it does not get `linger` on top.
        super().keepalive_timeout()
        if (bounded := self._bounded()) is not None:
            bounded.close(linger=min(self.linger, self.ping_timeout or self.linger))

    def shutdown(self) -> None:
        try:
            super().shutdown()
        except InvalidState:
            # The peer's close frame arrived and ours is not sent yet: uvicorn
            # starts a second closing handshake, which websockets refuses (and
            # the server's shutdown would die on). The connection is ending.
            self.transport.close()
        if (bounded := self._bounded()) is not None:
            bounded.close(linger=min(self.linger, SHUTDOWN_LINGER))

    def connection_lost(self, exc: Exception | None) -> None:
        if (bounded := self._bounded()) is not None:
            bounded.stop_draining()
        super().connection_lost(exc)


def protocol_class(linger: float) -> type[BoundedWebSocketProtocol]:
    """The protocol class to pass as uvicorn's `ws` option, with this `linger`."""
    return type("BoundedWebSocketProtocol", (BoundedWebSocketProtocol,), {"linger": linger})
