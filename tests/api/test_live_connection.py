"""`Connection`: a stuck send becomes `ClientGone`; the handshake's Origin and reason rules."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.websockets import WebSocketState

from training_platform.api.websocket import (
    ClientGone,
    Connection,
    close_reason,
    number_between,
    origin_allowed,
)
from training_platform.errors import InvalidParameterError


class StuckSocket:
    """Looks like a Starlette WebSocket whose peer stopped reading after `fine` sends."""

    def __init__(self, fine: int) -> None:
        self.fine = fine
        self.sent: list[str] = []
        self.closed_with: tuple[int, str] | None = None
        self.application_state = WebSocketState.CONNECTED

    async def send_text(self, text: str) -> None:
        if len(self.sent) >= self.fine:
            await asyncio.Event().wait()  # blocks for good, like a full socket buffer
        self.sent.append(text)

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = (code, reason)
        self.application_state = WebSocketState.DISCONNECTED


def test_a_send_that_never_completes_is_a_gone_client_and_the_task_goes_on() -> None:
    async def scenario() -> tuple[list[str], str, bool]:
        socket = StuckSocket(fine=2)
        async with Connection(socket, send_timeout=0.2, max_incoming=100) as connection:  # type: ignore[arg-type]
            for text in ("a", "b"):
                await connection.send_text(text)
            with pytest.raises(ClientGone) as gone:
                await asyncio.wait_for(connection.send_text("c"), 10)
            await asyncio.sleep(0)  # the task was not left cancelled
            current = asyncio.current_task()
            still_fine = current is not None and current.cancelling() == 0
        return socket.sent, str(gone.value), still_fine

    sent, why, still_fine = asyncio.run(scenario())
    assert sent == ["a", "b"] and "longer than 0.2 s" in why and still_fine


def test_a_caller_cancelling_a_send_is_not_mistaken_for_a_stuck_client() -> None:
    async def scenario() -> Any:
        socket = StuckSocket(fine=0)
        async with Connection(socket, send_timeout=60, max_incoming=100) as connection:  # type: ignore[arg-type]
            task = asyncio.create_task(connection.send_text("x"))
            await asyncio.sleep(0.01)
            task.cancel()
            return await asyncio.gather(task, return_exceptions=True)

    (outcome,) = asyncio.run(scenario())
    assert isinstance(outcome, asyncio.CancelledError)


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "ok"),
    [
        ("https://dash.example", "api.example", ["https://dash.example"], True),
        ("https://DASH.example/", "api.example", ["https://dash.example"], True),
        ("https://evil.example", "api.example", ["https://dash.example"], False),
        ("http://api.example:8000", "api.example:8000", [], True),  # same origin
        ("http://api.example:9000", "api.example:8000", [], False),
        ("null", "api.example", [], False),  # sandboxed frames, file:// pages
        ("https://anything.example", "api.example", ["*"], True),
    ],
)
def test_origin_rules(origin: str, host: str, allowed: list[str], ok: bool) -> None:
    assert origin_allowed(origin, host, allowed) is ok


def test_close_reasons_fit_in_a_close_frame() -> None:
    reason = close_reason("é" * 200)
    assert len(reason.encode()) <= 123 and reason.endswith("...")
    assert close_reason("short") == "short"


@pytest.mark.parametrize("value", ["0.09", "10.01", "nan", "-inf", "x", True, None])
def test_speed_outside_its_range_is_refused(value: Any) -> None:
    with pytest.raises(InvalidParameterError):
        number_between(value, "speed", 0.1, 10)


def test_speed_at_its_bounds_is_accepted() -> None:
    assert number_between("0.1", "speed", 0.1, 10) == 0.1
    assert number_between(10, "speed", 0.1, 10) == 10.0
