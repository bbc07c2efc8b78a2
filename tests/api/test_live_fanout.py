"""Fan-out under load on a real server: 50 clients keep up while a slow one is dropped;
dead clients are noticed by WebSocket pings."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.api.live_support import append_steps, live_server, live_settings, wait_for
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"
FAST_CLIENTS = 50
BATCH = 5
MAX_BATCHES = 150
# ~12 KB per message: a client that stops reading fills its socket buffers
# after a few dozen, while 50 readers in this same process keep up at 50/s.
EXTRA = {f"actor/metric_{i:04d}": 0.5 + i for i in range(400)}


async def _collect(ws: ClientConnection, last: list[int], timeout: float) -> list[int]:
    """Metric steps until the step in `last` (set once known) arrives, or `timeout`."""
    steps: list[int] = []
    deadline = time.monotonic() + timeout
    while not (last and steps and steps[-1] == last[0]):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            message = json.loads(await asyncio.wait_for(ws.recv(), left))
        except (TimeoutError, ConnectionClosed):
            break
        if message["type"] == "metric":
            steps.append(message["data"]["step"])
    return steps


def _slow_socket(port: int) -> socket.socket:
    # A small receive buffer (set before connect, so the kernel cannot grow it)
    # makes "a client that stopped reading" fill up after kilobytes, not megabytes.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def test_fifty_clients_get_everything_while_a_slow_one_is_dropped(
    settings: Settings, metrics_dir: Path
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    run1.write_bytes(b"")
    tight = live_settings(settings, live_queue_size=50, live_send_timeout=3.0)
    with live_server(tight) as server:
        hub = server.hub
        url = server.ws_url(LIVE)

        async def scenario() -> tuple[list[list[int]], list[int], tuple[Any, str], int]:
            fast = [
                await connect(url, open_timeout=10, compression=None) for _ in range(FAST_CLIENTS)
            ]
            # max_queue=1: the client library stops reading the socket too.
            slow = await connect(url, sock=_slow_socket(server.port), max_queue=1, compression=None)
            assert wait_for(lambda: hub.subscriber_count("run1") == FAST_CLIENTS + 1)
            last: list[int] = []
            collectors = [asyncio.create_task(_collect(ws, last, 120)) for ws in fast]
            written = 0
            # Write until the slow client is dropped (bounded), then a sentinel.
            for _ in range(MAX_BATCHES):
                append_steps(run1, range(written, written + BATCH), extra=EXTRA)
                written += BATCH
                await asyncio.sleep(0.1)
                if hub.subscriber_count("run1") == FAST_CLIENTS:
                    break
            remaining = hub.subscriber_count("run1")
            # Dropped: now the slow client reads what it got, then the close and its
            # reason. At once, while the others go on: the server gives a dropped
            # client `live_send_timeout` seconds to take its close, then resets it.
            slow_steps: list[int] = []

            async def read_slow() -> None:
                with contextlib.suppress(ConnectionClosed):
                    async for raw in slow:
                        message = json.loads(raw)
                        if message["type"] == "metric":
                            slow_steps.append(message["data"]["step"])

            slow_reader = asyncio.create_task(read_slow())
            last.append(written)
            append_steps(run1, [written], extra=EXTRA)
            results = list(await asyncio.gather(*collectors))
            await asyncio.wait_for(slow_reader, 30)
            for ws in fast:
                await ws.close()
            return results, slow_steps, (slow.close_code, slow.close_reason or ""), remaining

        results, slow_steps, closed, remaining = asyncio.run(scenario())

    assert remaining == FAST_CLIENTS  # the slow one went, the others stayed
    written = len(results[0]) - 1
    for steps in results:  # every step exactly once, in order
        assert steps == list(range(written + 1))
    assert slow_steps == list(range(len(slow_steps)))  # a clean prefix, then the close
    assert len(slow_steps) < written
    code, reason = closed
    assert code == 1013 and "too slow" in reason


def _raw_upgrade(port: int, path: str) -> socket.socket:
    """Complete a WebSocket handshake by hand, then never read again (a dead peer)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(4096)
        assert chunk, "server closed during the handshake"
        response += chunk
    assert response.startswith(b"HTTP/1.1 101"), response
    return sock


def test_a_client_that_stops_answering_pings_is_dropped(
    settings: Settings, metrics_dir: Path
) -> None:
    (metrics_dir / "run1_metrics.jsonl").write_bytes(b"")
    pinging = live_settings(settings, ws_ping_interval=0.3, ws_ping_timeout=1.0)
    with live_server(pinging) as server:
        hub = server.hub

        async def live_client_survives() -> bool:
            async with connect(server.ws_url(LIVE), open_timeout=10) as ws:
                await ws.recv()
                await asyncio.sleep(2.0)  # several ping rounds, answered by the library
                return hub.subscriber_count("run1") == 1

        assert asyncio.run(live_client_survives())
        assert wait_for(lambda: hub.subscriber_count("run1") == 0)

        dead = _raw_upgrade(server.port, LIVE)
        try:
            assert wait_for(lambda: hub.subscriber_count("run1") == 1)
            assert wait_for(lambda: hub.subscriber_count("run1") == 0, timeout=10)
        finally:
            dead.close()
