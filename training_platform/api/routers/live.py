"""`/api/monitoring/{job_id}/live`: a job's new records, status and anomalies as they land.

Messages (docs/contract.md, plus `anomaly` and `error`):

- ``{"type": "waiting", "job_id": ..., "timeout": s}`` first when the job id
  is valid but no such job exists yet (its trainer has not written its first
  line): the socket stays open up to `live_job_wait` seconds, looking for the
  job every `JOB_WAIT_POLL` seconds, then goes on as below; a job that never
  appears ends with the usual `job_not_found` error;
- ``{"type": "status", "data": {...}}`` first (the job's current status), then
  at once whenever status, total_steps or the anomaly flag or reason change, and for
  progress alone (`current_step`) at most once per `live_status_interval`;
- ``{"type": "metric", "data": {...record...}}`` for every record committed;
- ``{"type": "anomaly", "data": {"step", "type", "severity", "message",
  "source", "sources", "created_at"}}`` once per incident, naming every
  source that found it;
- ``{"type": "finished", "status": "completed"}`` when the run ends; the
  server then closes with 1000.

With ``?since_step=N`` the stored records after step N come first (in step
order, read in pages), then the live ones, with no gap and no duplicate at the
hand-over. A client that falls `live_queue_size` messages behind, or whose
sends time out, is closed with 1013 and a reason; it should reconnect with
``since_step`` set to the last step it received. Messages from the client are
ignored (beyond the size cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Final

from anyio import to_thread
from fastapi import APIRouter, WebSocket

from training_platform.api.websocket import (
    CLOSE_NORMAL,
    CLOSE_TRY_AGAIN,
    ClientGone,
    Connection,
    check_job_id,
    query_params,
    serve_websocket,
    step_param,
)
from training_platform.errors import JobNotFoundError, PlatformError
from training_platform.live.channels import Dropped, HandOver, Subscription, metric_message
from training_platform.live.hub import LiveHub
from training_platform.store.models import TERMINAL_STATUSES

logger = logging.getLogger(__name__)
router = APIRouter(tags=["live"])

# How often a socket waiting for a not yet known job looks for it again.
JOB_WAIT_POLL: Final = 0.5


@router.websocket("/monitoring/{job_id}/live")
async def live_stream(websocket: WebSocket, job_id: str) -> None:
    hub: LiveHub = websocket.app.state.live_hub
    await serve_websocket(
        websocket, lambda connection: _stream(connection, hub, job_id), f"live stream of {job_id}"
    )


async def _stream(connection: Connection, hub: LiveHub, job_id: str) -> None:
    try:
        since_step = step_param(query_params(connection.websocket, ("since_step",)), "since_step")
        check_job_id(job_id)
    except PlatformError as exc:
        await connection.fail(exc)
        return
    # Reading from the start notices a client that leaves while we wait for its job.
    listen = asyncio.create_task(_ignore_incoming(connection))
    try:
        if not await _wait_for_job(connection, hub, job_id, listen):
            return
        # Subscribe first: whatever is committed from here on is queued for us,
        # and the hand-over below skips what the history pages already held.
        await to_thread.run_sync(hub.before_subscribe, job_id)
        subscription = hub.subscribe(job_id)
        try:
            await _serve(connection, hub, subscription, job_id, since_step, listen)
        except ClientGone as exc:
            subscription.drop(f"too slow: {exc}")
            await connection.close(CLOSE_TRY_AGAIN, subscription.dropped or "")
        finally:
            subscription.close()
    finally:
        listen.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listen


async def _wait_for_job(
    connection: Connection, hub: LiveHub, job_id: str, listen: asyncio.Task[None]
) -> bool:
    """True once the job is known. A page opened right after its run was started
    must not fail: a valid id is waited for (bounded), and a file that appears
    meanwhile is discovered. False when the client left or the job never came
    (the client was told `job_not_found`)."""
    if await to_thread.run_sync(hub.service.is_known, job_id):
        return True
    limit = hub.settings.live_job_wait
    if limit > 0:
        await connection.send_json({"type": "waiting", "job_id": job_id, "timeout": limit})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while (left := deadline - loop.time()) > 0:
            await asyncio.wait({listen}, timeout=min(JOB_WAIT_POLL, left))
            if listen.done():
                return False  # the client left
            if await to_thread.run_sync(hub.service.is_known, job_id):
                return True
    waited = f" (waited {limit:g} s for its metrics file to appear)" if limit > 0 else ""
    await connection.fail(JobNotFoundError(f"job {job_id!r} not found{waited}"))
    return False


async def _serve(
    connection: Connection,
    hub: LiveHub,
    subscription: Subscription,
    job_id: str,
    since_step: int | None,
    listen: asyncio.Task[None],
) -> None:
    status, status_seq = await to_thread.run_sync(hub.status_locked, job_id)
    handover = HandOver(status_seq)
    if status is not None:
        await connection.send_json({"type": "status", "data": status})
    if since_step is not None:
        await _send_history(connection, hub, handover, job_id, since_step)
    if status is not None and status["status"] in TERMINAL_STATUSES:
        await connection.send_json({"type": "finished", "status": status["status"]})
        await connection.close(CLOSE_NORMAL, f"run {status['status']}")
        return
    forward = asyncio.create_task(_forward(connection, subscription, handover))
    try:
        await asyncio.wait({forward, listen}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        forward.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await forward
    if forward.done() and not forward.cancelled() and forward.exception() is not None:
        raise forward.exception()  # type: ignore[misc]


async def _send_history(
    connection: Connection, hub: LiveHub, handover: HandOver, job_id: str, since_step: int
) -> None:
    """The stored records after `since_step`, page by page, each page with its commit number."""
    page_size = hub.settings.history_page_size
    max_bytes = hub.settings.live_max_message_bytes
    after = since_step
    while True:
        records, seq = await to_thread.run_sync(hub.history_locked, job_id, after, page_size)
        full = len(records) == page_size
        if records:
            after = records[-1]["step"]
        handover.add_page(after if full else math.inf, seq)
        for record in records:
            await connection.send_text(metric_message(seq, record, max_bytes=max_bytes).text)
        if not full:
            return


async def _forward(connection: Connection, subscription: Subscription, handover: HandOver) -> None:
    while True:
        item = await subscription.get()
        if isinstance(item, Dropped):
            await connection.close(CLOSE_TRY_AGAIN, item.reason)
            return
        if handover.already_sent(item):
            continue
        await connection.send_text(item.text)
        if item.kind == "finished":
            await connection.close(CLOSE_NORMAL, "run finished")
            return


async def _ignore_incoming(connection: Connection) -> None:
    """Read until the client goes (so a disconnect is noticed); enforce the size cap."""
    while await connection.receive_text() is not None:
        pass
