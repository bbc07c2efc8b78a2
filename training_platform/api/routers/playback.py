"""`/api/monitoring/{job_id}/playback`: replay a stored run at a chosen pace.

``?start_step=&end_step=&speed=`` (speed 0.1 to 10, default 1; steps inclusive,
default the first and last stored). Sends ``playback_info``, then one
``metric`` message per record with ``progress``, ``current_index`` (0-based)
and ``total``, one every `playback_interval / speed` seconds, then
``playback_complete`` and closes with 1000.

During a playback the client may send ``{"action": "pause"}``,
``{"action": "resume"}``, ``{"action": "speed", "value": 4}`` or
``{"action": "seek", "step": 500}``; each is answered with a
``playback_state`` message (``paused``, ``speed``, ``current_index`` of the
next record, ``total``), a bad one with an ``error`` message (the playback
goes on). Bad query parameters: an ``error`` message and close code 1008.

Controls wait in a small bounded queue (`ControlQueue`) in which a burst
coalesces: a seek replaces a seek not yet applied, a speed a speed, and
pause/resume the last pause/resume. A superseded control is answered by the
``playback_state`` of the one that replaced it, so 2,000 seeks sent at once
cost one seek and one answer, not 2,000. While the queue is full the
server stops reading the client (TCP back-pressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, WebSocket
from sqlalchemy.orm import Session, sessionmaker

from training_platform.api.websocket import (
    CLOSE_NORMAL,
    ClientGone,
    Connection,
    check_job_id,
    number_between,
    query_params,
    serve_websocket,
    step_param,
)
from training_platform.errors import InvalidParameterError, JobNotFoundError, PlatformError
from training_platform.history.playback import (
    MAX_SPEED,
    MIN_SPEED,
    Control,
    ControlQueue,
    Pacer,
    PlaybackRange,
    index_of_step,
    known_index_of_step,
    metric_text,
    parse_control,
    plan_playback,
    read_page,
)
from training_platform.live.hub import LiveHub
from training_platform.settings import Settings

logger = logging.getLogger(__name__)
router = APIRouter(tags=["live"])

_GONE = Control("gone")  # the client left: stop


@router.websocket("/monitoring/{job_id}/playback")
async def playback(websocket: WebSocket, job_id: str) -> None:
    settings: Settings = websocket.app.state.settings
    await serve_websocket(
        websocket,
        lambda connection: _start(connection, websocket, settings, job_id),
        f"playback of {job_id}",
    )


async def _start(
    connection: Connection, websocket: WebSocket, settings: Settings, job_id: str
) -> None:
    hub: LiveHub = websocket.app.state.live_hub
    try:
        params = query_params(websocket, ("start_step", "end_step", "speed"))
        start_step = step_param(params, "start_step")
        end_step = step_param(params, "end_step")
        if start_step is not None and end_step is not None and start_step > end_step:
            raise InvalidParameterError(f"start_step {start_step} is after end_step {end_step}")
        speed = number_between(params.get("speed", "1"), "speed", MIN_SPEED, MAX_SPEED)
        check_job_id(job_id)
        if not await to_thread.run_sync(hub.service.is_known, job_id):
            raise JobNotFoundError(f"job {job_id!r} not found")
    except PlatformError as exc:
        await connection.fail(exc)
        return
    factory: sessionmaker[Session] = websocket.app.state.session_factory
    await _play(connection, factory, settings, job_id, start_step, end_step, speed)
    await connection.close(CLOSE_NORMAL, "playback complete")


async def _play(
    connection: Connection,
    factory: sessionmaker[Session],
    settings: Settings,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    speed: float,
) -> None:
    def plan() -> PlaybackRange:
        with factory() as session:
            return plan_playback(session, job_id=job_id, start_step=start_step, end_step=end_step)

    span = await to_thread.run_sync(plan)
    await connection.send_json(
        {
            "type": "playback_info",
            "total_metrics": span.total,
            "start_step": span.start_step,
            "end_step": span.end_step,
            "speed": speed,
        }
    )
    player = _Player(connection, factory, span, Pacer(settings.playback_interval, speed), settings)
    if await player.run():
        await connection.send_json({"type": "playback_complete"})


class _Player:
    """One playback: a send loop paced by `Pacer`, steered by the client's controls."""

    def __init__(
        self,
        connection: Connection,
        factory: sessionmaker[Session],
        span: PlaybackRange,
        pacer: Pacer,
        settings: Settings,
    ) -> None:
        self.connection = connection
        self.factory = factory
        self.span = span
        self.pacer = pacer
        self.page_size = settings.history_page_size
        self.max_bytes = settings.live_max_message_bytes
        self.controls = ControlQueue()
        self.index = 0  # of the next record to send
        self.next_step = span.start_step  # where the next page read starts
        self.buffer: deque[dict[str, Any]] = deque()
        self.paused = False
        self.last_sent_at: float | None = None

    async def run(self) -> bool:
        """Play to the end; False when the client left first."""
        listener = asyncio.create_task(self._listen())
        try:
            return await self._play()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    async def _play(self) -> bool:
        self.pacer.start(0)
        while self.index < self.span.total:
            control = await self._next_control()
            if control is _GONE:
                return False
            if control is not None:
                await self._apply(control)
                continue
            if not self.buffer:
                self.buffer.extend(await to_thread.run_sync(self._read_page))
                if not self.buffer:
                    break  # fewer records than counted at the start: nothing left to play
            record = self.buffer.popleft()
            self.next_step = record["step"] + 1
            text = metric_text(
                record, index=self.index, total=self.span.total, max_bytes=self.max_bytes
            )
            await self.connection.send_text(text)
            self.last_sent_at = time.monotonic()
            self.index += 1
        return True

    async def _next_control(self) -> Control | None:
        """A control that arrived before the next record is due (or while paused), else None."""
        if (control := self.controls.get_nowait()) is not None:
            return control
        if self.paused:
            return await self.controls.get()
        delay = self.pacer.due(self.index) - self.pacer.clock()
        if delay <= 0:
            return None
        try:
            return await asyncio.wait_for(self.controls.get(), delay)
        except TimeoutError:
            return None

    async def _apply(self, control: Control) -> None:
        if control.action == "pause":
            self.paused = True
        elif control.action == "resume":
            if self.paused:
                self.paused = False
                self.pacer.start(self.index)
        elif control.action == "speed":
            assert control.value is not None
            self.pacer.change_speed(control.value, self.index, self.last_sent_at)
        elif control.action == "seek":
            assert control.step is not None
            step = control.step
            index = known_index_of_step(self.span, step)
            if index is None:  # steps with gaps: count (once per coalesced burst)
                index = await to_thread.run_sync(self._index_of, step)
            self.index = index
            self.next_step = step
            self.buffer.clear()
            self.pacer.start(self.index)
        await self.connection.send_json(
            {
                "type": "playback_state",
                "action": control.action,
                "paused": self.paused,
                "speed": self.pacer.speed,
                "current_index": self.index,
                "total": self.span.total,
            }
        )

    async def _listen(self) -> None:
        """Turn client messages into controls; answer bad ones with an error message."""
        while True:
            text = await self.connection.receive_text()
            if text is None:
                self.controls.close(_GONE)
                return
            try:
                await self.controls.put(parse_control(text, self.span))
            except InvalidParameterError as exc:
                with contextlib.suppress(ClientGone):
                    await self.connection.send_json(
                        {"type": "error", "code": "invalid_parameter", "detail": str(exc)}
                    )

    def _read_page(self) -> list[dict[str, Any]]:
        with self.factory() as session:
            return read_page(session, self.span, from_step=self.next_step, limit=self.page_size)

    def _index_of(self, step: int) -> int:
        with self.factory() as session:
            return index_of_step(session, self.span, step)
