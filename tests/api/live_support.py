"""Helpers for the WebSocket tests: a real uvicorn server on a loopback port, and clients.

The live stream's behaviour under load (slow clients, socket buffers filling,
pings) only exists with real sockets, so these tests run the app in uvicorn
on 127.0.0.1 in a background thread and talk to it with the `websockets`
library. Every wait here is bounded.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from training_platform.api.main import create_app
from training_platform.api.websocket import uvicorn_ws_options
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.live.hub import LiveHub
from training_platform.settings import Settings


class LiveServer:
    """The app in uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app: FastAPI, **ws_options: Any) -> None:
        self.app = app
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on", **ws_options)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(20)
        self._socket.close()

    @property
    def hub(self) -> LiveHub:
        hub: LiveHub = self.app.state.live_hub
        return hub

    def ws_url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def http_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def live_server(settings: Settings, **ws_overrides: Any) -> Iterator[LiveServer]:
    """The app in uvicorn, configured the way `training-platform serve` configures it."""
    options = {**uvicorn_ws_options(settings), **ws_overrides}
    server = LiveServer(create_app(settings), **options)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def live_settings(settings: Settings, **overrides: Any) -> Settings:
    """The test settings with the background sync on and quick (the fixture turns it off)."""
    values: dict[str, Any] = {"poll_interval": 0.2, "watch_files": True, "ssh_poll_interval": 0.2}
    values.update(overrides)
    return settings.model_copy(update=values)


def record_line(step: int, **groups: Any) -> bytes:
    metrics = groups or {"reward": {"mean": step / 10}, "loss": {"total_loss": 1.0 / (step + 1)}}
    return encode_record(build_record(step, metrics, timestamp=1_700_000_000.0 + step))


def append_steps(path: Path, steps: range | list[int], **groups: Any) -> None:
    with path.open("ab") as handle:
        handle.write(b"".join(record_line(step, **groups) for step in steps))


def open_ws(url: str, **kwargs: Any) -> ClientConnection:
    return connect(url, open_timeout=10, close_timeout=5, **kwargs)


def receive(ws: ClientConnection, timeout: float = 10.0) -> dict[str, Any]:
    message = ws.recv(timeout=timeout)
    return json.loads(message, parse_constant=_refuse)  # type: ignore[no-any-return]


def receive_until(
    ws: ClientConnection,
    done: Callable[[list[dict[str, Any]]], bool],
    *,
    timeout: float = 20.0,
    after: Callable[[], object] | None = None,
) -> list[dict[str, Any]]:
    """Messages until `done(messages)` holds, the server closes, or `timeout` passes.

    `after`, if given, runs first (e.g. append a sentinel line: since messages
    arrive in commit order, a duplicate of anything earlier shows up before it).
    """
    if after is not None:
        after()
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not done(messages):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            messages.append(receive(ws, timeout=left))
        except (TimeoutError, ConnectionClosed):
            break
    return messages


def metric_steps(messages: list[dict[str, Any]]) -> list[int]:
    return [m["data"]["step"] for m in messages if m["type"] == "metric"]


def has_step(step: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda messages: step in metric_steps(messages)


def close_code(ws: ClientConnection, timeout: float = 10.0) -> tuple[int | None, str]:
    """Read until the server closes; the close code and reason it sent."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ws.recv(timeout=max(0.01, deadline - time.monotonic()))
    except ConnectionClosed as closed:
        return (closed.rcvd.code, closed.rcvd.reason) if closed.rcvd else (None, "")
    except TimeoutError:
        pass
    return None, "still open"


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def _refuse(token: str) -> None:
    raise AssertionError(f"bare {token} in a WebSocket message")
