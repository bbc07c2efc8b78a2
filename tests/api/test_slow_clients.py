"""Clients that never read are disconnected for good, the API keeps answering meanwhile,
and SIGTERM still stops the server promptly.

The client here is a raw TCP socket with a tiny receive buffer that completes
the WebSocket handshake and then never reads again: the kernel buffers on both
sides fill, the server's sends stall, and only a send timeout or an unanswered
ping can notice. "Disconnected" is checked on the server (uvicorn's own set of
open connections), not just the live hub: a socket the app has given up on but
whose transport still waits to flush megabytes is the failure being tested.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.api.live_support import LiveServer, append_steps, live_server, live_settings, wait_for
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"
# ~12 KB per record: 400 of them are ~5 MB of history per client, more than the
# kernel buffers of one loopback socket can absorb.
EXTRA = {f"actor/metric_{i:04d}": 0.5 + i for i in range(400)}
HISTORY_RECORDS = 400
# Seconds: these requests take milliseconds when nothing is wrong, and a loaded CI
# machine once took 1.3 s; a stuck event loop would take a whole send timeout (3 s).
NORMAL_LATENCY = 2.0


def stalled_client(port: int, path: str, *, extra_headers: str = "") -> socket.socket:
    """Handshake by hand on a socket with a tiny receive buffer, then never read again."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Set before connect, so the kernel cannot grow the window later.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{extra_headers}\r\n"
        ).encode()
    )
    response = b""
    while b"\r\n\r\n" not in response:  # one byte at a time: nothing past the headers
        chunk = sock.recv(1)
        assert chunk, "server closed during the handshake"
        response += chunk
    assert response.startswith(b"HTTP/1.1 101"), response
    return sock


def open_server_connections(server: LiveServer, sockets: list[socket.socket]) -> int:
    """How many of these clients' connections uvicorn still holds open."""
    ports = {sock.getsockname()[1] for sock in sockets}
    held = list(server.server.server_state.connections)
    clients = [getattr(protocol, "client", None) for protocol in held]
    return sum(1 for client in clients if client is not None and client[1] in ports)


def assert_api_answers_promptly(base_url: str, within: float = NORMAL_LATENCY) -> None:
    for path in ("/healthz", "/api/jobs", "/api/monitoring/run1/metrics?limit=5"):
        started = time.monotonic()
        response = httpx.get(base_url + path, timeout=10)
        took = time.monotonic() - started
        assert response.status_code == 200, (path, response.text)
        assert took < within, f"{path} took {took:.2f} s"


@contextmanager
def closing_all(sockets: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def test_clients_that_never_read_are_closed_by_the_send_timeout(
    settings: Settings, metrics_dir: Path
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    append_steps(run1, range(HISTORY_RECORDS), extra=EXTRA)
    # Pings off: only the send timeout can notice these clients. Longer (3 s) than
    # NORMAL_LATENCY, so that a loop blocked by a stuck send shows in the answers.
    tight = live_settings(settings, live_send_timeout=3.0, ws_ping_interval=0)
    with live_server(tight) as server:
        base = server.http_url("")
        assert httpx.post(base + "/api/monitoring/run1/metrics/sync", timeout=60).status_code == 200
        with closing_all(
            [stalled_client(server.port, f"{LIVE}?since_step=0") for _ in range(3)]
        ) as stalled:
            assert wait_for(lambda: server.hub.subscriber_count("run1") == 3)
            assert_api_answers_promptly(base)  # while their sends are stuck
            # The send timeout (3 s) plus the bounded close: well under 20 s.
            assert wait_for(lambda: open_server_connections(server, stalled) == 0, timeout=20), (
                "the server still holds connections to clients that never read"
            )
            assert server.hub.subscriber_count("run1") == 0
            assert_api_answers_promptly(base)


def test_clients_that_never_read_are_closed_by_the_ping_timeout(
    settings: Settings, metrics_dir: Path
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    append_steps(run1, range(HISTORY_RECORDS), extra=EXTRA)
    # A long send timeout: the unanswered pings must be what ends these clients.
    pinging = live_settings(
        settings, live_send_timeout=60.0, ws_ping_interval=0.3, ws_ping_timeout=1.0
    )
    with live_server(pinging) as server:
        base = server.http_url("")
        assert httpx.post(base + "/api/monitoring/run1/metrics/sync", timeout=60).status_code == 200
        with closing_all(
            [stalled_client(server.port, f"{LIVE}?since_step=0") for _ in range(3)]
        ) as stalled:
            assert wait_for(lambda: server.hub.subscriber_count("run1") == 3)
            # A loop blocked by these sends would wait out their 60 s timeout;
            # 5 s leaves room for a loaded CI machine (1.4 s seen there).
            assert_api_answers_promptly(base, within=5.0)
            assert wait_for(lambda: open_server_connections(server, stalled) == 0, timeout=15), (
                "the server still holds connections to clients that never answer pings"
            )
            assert wait_for(lambda: server.hub.subscriber_count("run1") == 0, timeout=5)
            assert_api_answers_promptly(base, within=5.0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_sigterm_stops_the_server_promptly_with_stalled_clients_and_a_seek_flood(
    settings: Settings, metrics_dir: Path, tmp_path: Path
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    append_steps(run1, range(HISTORY_RECORDS), extra=EXTRA)
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url,
        "PLATFORM_METRICS_DIR": str(metrics_dir),
        "PLATFORM_HOST": "127.0.0.1",
        "PLATFORM_PORT": str(port),
        # Long timeouts: SIGTERM must not have to wait for them.
        "PLATFORM_LIVE_SEND_TIMEOUT": "60",
        "PLATFORM_WS_PING_INTERVAL": "60",
        "PLATFORM_WS_PING_TIMEOUT": "60",
    }
    env.pop("PLATFORM_API_TOKEN", None)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "training-platform"), "serve", "--log-level", "warning"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stalled: list[socket.socket] = []
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _answers(base + "/healthz"), timeout=30), _tail(tmp_path)
        assert httpx.post(base + "/api/monitoring/run1/metrics/sync", timeout=60).status_code == 200
        stalled = [stalled_client(port, f"{LIVE}?since_step=0") for _ in range(3)]
        # A playback client that floods seeks and never reads the answers.
        flood = stalled_client(port, "/api/monitoring/run1/playback?speed=10")
        stalled.append(flood)
        seek = _masked_text_frame(b'{"action": "seek", "step": 200}')
        flood.settimeout(0.5)
        for _ in range(2000):
            try:
                flood.sendall(seek)
            except (TimeoutError, BlockingIOError):
                break  # the server stopped reading it: enough
        time.sleep(1.0)  # let the sends stall
        assert _answers(base + "/healthz")

        server.send_signal(signal.SIGTERM)
        # Stalled sockets are reset 2 s into the shutdown; 8 s stays under the
        # CLI's 10 s graceful-shutdown backstop, so the backstop alone fails this.
        try:
            server.wait(timeout=8)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGTERM did not stop the server within 8 s: {_tail(tmp_path)}")
    finally:
        for sock in stalled:
            sock.close()
        if server.poll() is None:
            server.kill()
            server.wait(10)
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _masked_text_frame(payload: bytes) -> bytes:
    """One client-to-server text frame (clients must mask; short payloads only)."""
    assert len(payload) < 126
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


def _tail(tmp_path: Path) -> str:
    return (tmp_path / "server.log").read_text(errors="replace")[-2000:]
