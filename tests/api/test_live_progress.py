"""The live stream from a run's first second: waiting for a new job, coalesced progress,
one message per anomaly incident. Real uvicorn, real sockets, both databases."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.api.live_support import (
    append_steps,
    close_code,
    has_step,
    live_server,
    live_settings,
    metric_steps,
    open_ws,
    receive,
    receive_until,
)
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.live.channels import JobChannel, Message, status_messages
from training_platform.live.status_coalescer import StatusCoalescer
from training_platform.settings import Settings


def write_status(metrics_dir: Path, job_id: str, status: str, step: int, total: int = 100) -> None:
    temp = metrics_dir / f".{job_id}_status.json.tmp"
    temp.write_text(
        json.dumps(
            {
                "job_id": job_id,
                "status": status,
                "current_step": step,
                "total_steps": total,
                "anomaly_detected": False,
                "anomaly_reason": None,
                "started_at": 1_700_000_000.0,
                "updated_at": 1_700_000_000.0 + step,
            }
        )
    )
    temp.replace(metrics_dir / f"{job_id}_status.json")  # atomic, as the callback does


def statuses(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["data"] for m in messages if m["type"] == "status"]


def reached_step(step: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda messages: any(s["current_step"] == step for s in statuses(messages))


def test_a_stream_opened_before_the_jobs_first_line_waits_then_streams(
    settings: Settings, metrics_dir: Path
) -> None:
    url = "/api/monitoring/fresh/live?since_step=0"
    fresh = metrics_dir / "fresh_metrics.jsonl"
    with (
        live_server(live_settings(settings, live_job_wait=30)) as server,
        open_ws(server.ws_url(url)) as ws,
    ):
        assert receive(ws) == {"type": "waiting", "job_id": "fresh", "timeout": 30}
        time.sleep(0.6)  # a look or two finds nothing: still waiting, still open
        append_steps(fresh, range(3))
        messages = receive_until(ws, has_step(2))
        messages += receive_until(ws, has_step(3), after=lambda: append_steps(fresh, [3]))

    assert messages[0]["type"] == "status" and messages[0]["data"]["job_id"] == "fresh"
    # Step 0 is at or before since_step=0 (the client fetches it itself, see the dashboard).
    assert metric_steps(messages) in ([1, 2, 3], [0, 1, 2, 3])


def test_a_job_that_never_appears_ends_with_job_not_found(settings: Settings) -> None:
    with live_server(live_settings(settings, live_job_wait=0.8)) as server:
        started = time.monotonic()
        with open_ws(server.ws_url("/api/monitoring/never/live")) as ws:
            assert receive(ws)["type"] == "waiting"
            error = receive(ws)
            code, reason = close_code(ws)
        waited = time.monotonic() - started

    assert error["type"] == "error" and error["code"] == "job_not_found"
    assert "waited 0.8 s" in error["detail"]
    assert code == 1008 and "not found" in reason
    assert 0.7 <= waited < 5


def test_progress_reaches_status_only_clients_coalesced_and_identical(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    interval = 0.5
    fast = live_settings(settings, live_status_interval=interval, poll_interval=0.05)
    write_status(metrics_dir, "run1", "running", 0)
    path = "/api/monitoring/run1/live"
    with (
        live_server(fast) as server,
        open_ws(server.ws_url(path)) as first,
        open_ws(server.ws_url(path)) as second,
    ):
        # Both start from "running" (the first status may be the stored "pending"
        # when a socket beat the first sync of the status file).
        for ws in (first, second):
            receive_until(ws, lambda ms: any(s["status"] == "running" for s in statuses(ms)))
        started = time.monotonic()
        for step in range(1, 41):  # a status file rewritten every 50 ms for 2 s
            write_status(metrics_dir, "run1", "running", step)
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        seen = [receive_until(ws, reached_step(40), timeout=10) for ws in (first, second)]

    steps = [s["current_step"] for s in statuses(seen[0])]
    assert steps[-1] == 40  # the newest progress always goes out in the end
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # At most one per interval (plus the first, sent at once, and the last).
    assert 3 <= len(steps) <= elapsed / interval + 2
    # Built once: every subscriber gets the same messages.
    assert statuses(seen[0]) == statuses(seen[1])


def test_a_status_change_is_not_held_back_by_the_progress_interval(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    slow = live_settings(settings, live_status_interval=30)
    write_status(metrics_dir, "run1", "running", 0)
    with live_server(slow) as server, open_ws(server.ws_url("/api/monitoring/run1/live")) as ws:
        # The first status is the stored one: "pending" when the socket beat the
        # first sync of the status file, which then goes out at once.
        receive_until(ws, lambda ms: any(s["status"] == "running" for s in statuses(ms)))
        write_status(metrics_dir, "run1", "running", 5)  # progress: sent (first in 30 s)
        write_status(metrics_dir, "run1", "running", 6)  # progress: waits
        time.sleep(0.5)
        write_status(metrics_dir, "run1", "completed", 7)  # a change of status: at once
        messages = receive_until(ws, lambda ms: any(m["type"] == "finished" for m in ms))

    final = statuses(messages)[-1]
    assert (final["status"], final["current_step"]) == ("completed", 7)
    assert messages[-1] == {"type": "finished", "status": "completed"}


def test_an_anomaly_both_sources_found_goes_out_once(settings: Settings, run1: Path) -> None:
    spike = build_record(
        3,
        {"kl": {"mean": 7.0}, "loss": {"total_loss": 1.0}},
        timestamp=1_700_000_003.0,
        anomalies=[{"type": "kl_explosion", "severity": "warning", "message": "KL 7 (trainer)"}],
    )
    with (
        live_server(live_settings(settings)) as server,
        open_ws(server.ws_url("/api/monitoring/run1/live")) as ws,
    ):
        assert receive(ws)["type"] == "status"
        append_steps(run1, range(3))
        with run1.open("ab") as handle:
            handle.write(encode_record(spike))
        messages = receive_until(ws, has_step(3))
        # A sentinel: anything sent about step 3 arrives before step 4's record.
        messages += receive_until(ws, has_step(4), after=lambda: append_steps(run1, [4]))

    anomalies = [m["data"] for m in messages if m["type"] == "anomaly"]
    assert len(anomalies) == 1
    (incident,) = anomalies
    assert (incident["step"], incident["type"]) == (3, "kl_explosion")
    assert incident["sources"] == ["callback", "platform"] and incident["source"] == "callback"
    assert incident["severity"] == "critical" and incident["message"] == "KL 7 (trainer)"


def test_the_coalescer_sends_at_once_then_the_newest_after_the_interval() -> None:
    async def scenario() -> tuple[list[int], list[float]]:
        channel = JobChannel("job", queue_size=100)
        subscription = channel.subscribe()
        coalescer = StatusCoalescer(0.2, time.monotonic)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for step in range(10):
            status = {"job_id": "job", "status": "running", "current_step": step}
            coalescer.progress(channel, status_messages(step, status))
        received: list[int] = []
        times: list[float] = []
        for _ in range(2):
            message = await asyncio.wait_for(subscription.get(), 2)
            assert isinstance(message, Message)
            received.append(json.loads(message.text)["data"]["current_step"])
            times.append(loop.time() - started)
        await asyncio.sleep(0.3)
        assert subscription.pending == 0  # nothing else waited
        return received, times

    received, times = asyncio.run(scenario())
    assert received == [0, 9]
    assert times[0] < 0.1 and 0.18 <= times[1] < 1.0
