"""`/api/monitoring/{job_id}/playback` against a real server: order, progress, pace, controls."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection

from tests.api.live_support import (
    LiveServer,
    append_steps,
    close_code,
    live_server,
    open_ws,
    receive,
    receive_until,
)
from training_platform.settings import Settings

PLAYBACK = "/api/monitoring/run1/playback"


@pytest.fixture
def server_of(settings: Settings, metrics_dir: Path) -> Iterator[Any]:
    """`server_of(steps, **settings)`: a server whose run1 has `steps` stored records."""
    servers: list[Any] = []

    def start(steps: int, **overrides: Any) -> LiveServer:
        append_steps(metrics_dir / "run1_metrics.jsonl", range(steps))
        tuned = settings.model_copy(update={"history_page_size": 7, **overrides})
        context = live_server(tuned)
        server = context.__enter__()
        servers.append(context)
        sync = httpx.post(server.http_url("/api/monitoring/run1/metrics/sync"), timeout=30)
        assert sync.json()["new_metrics"] == steps
        return server

    yield start
    for context in servers:
        context.__exit__(None, None, None)


def metrics_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == "metric"]


def is_complete(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and messages[-1]["type"] == "playback_complete"


def test_playback_sends_info_every_record_with_progress_then_completes(server_of: Any) -> None:
    server = server_of(30, playback_interval=0.01)
    with open_ws(server.ws_url(f"{PLAYBACK}?start_step=5&end_step=24&speed=10")) as ws:
        messages = receive_until(ws, is_complete)
        code, _ = close_code(ws)

    assert messages[0] == {
        "type": "playback_info",
        "total_metrics": 20,
        "start_step": 5,
        "end_step": 24,
        "speed": 10.0,
    }
    metrics = metrics_of(messages)
    assert [m["data"]["step"] for m in metrics] == list(range(5, 25))  # over 3 pages of 7
    assert [m["current_index"] for m in metrics] == list(range(20))
    assert all(m["total"] == 20 for m in metrics)
    assert [m["progress"] for m in metrics] == [pytest.approx((i + 1) / 20) for i in range(20)]
    assert metrics[0]["data"]["reward"]["mean"] == 0.5
    assert messages[-1] == {"type": "playback_complete"} and code == 1000


def test_open_ends_are_the_stored_range_and_an_empty_range_completes_at_once(
    server_of: Any,
) -> None:
    server = server_of(12, playback_interval=0.01)
    with open_ws(server.ws_url(f"{PLAYBACK}?speed=10")) as ws:
        info = receive(ws)
        messages = receive_until(ws, is_complete)
    with open_ws(server.ws_url(f"{PLAYBACK}?start_step=100")) as ws:
        empty = receive_until(ws, is_complete)

    assert (info["start_step"], info["end_step"], info["total_metrics"]) == (0, 11, 12)
    assert [m["data"]["step"] for m in metrics_of(messages)] == list(range(12))
    assert [m["type"] for m in empty] == ["playback_info", "playback_complete"]
    assert empty[0]["total_metrics"] == 0


@pytest.mark.parametrize(("speed", "records"), [(1.0, 60), (4.0, 160)])
def test_pace_is_one_record_per_interval_divided_by_speed(
    server_of: Any, speed: float, records: int
) -> None:
    interval = 0.02  # speed 1: 1.2 s of playback; speed 4: 0.8 s
    server = server_of(records, playback_interval=interval)
    arrivals: list[float] = []
    asked = time.monotonic()
    with open_ws(server.ws_url(f"{PLAYBACK}?speed={speed}")) as ws:
        assert receive(ws)["type"] == "playback_info"
        while len(arrivals) < records:
            message = receive(ws)
            if message["type"] == "metric":
                arrivals.append(time.monotonic())

    expected = (records - 1) * interval / speed
    # Not faster: the last record cannot arrive before its time, counted from
    # the request (a client that stalled early reads a backlog in a burst, so
    # the first arrival is no clock for this bound). Not slower: the span of
    # the arrivals.
    assert arrivals[-1] - asked >= expected * 0.9, (arrivals[-1] - asked, expected)
    elapsed = arrivals[-1] - arrivals[0]
    assert elapsed <= expected * 1.1, (elapsed, expected)


def send(ws: ClientConnection, **control: Any) -> None:
    ws.send(json.dumps(control))


def next_of(ws: ClientConnection, kind: str) -> dict[str, Any]:
    for _ in range(1000):
        message = receive(ws)
        if message["type"] == kind:
            return message
    raise AssertionError(f"no {kind} message")


def test_pause_resume_speed_and_seek_steer_the_playback(server_of: Any) -> None:
    server = server_of(100, playback_interval=0.05)
    with open_ws(server.ws_url(f"{PLAYBACK}?speed=1")) as ws:
        assert receive(ws)["type"] == "playback_info"
        first = next_of(ws, "metric")

        send(ws, action="pause")
        paused = next_of(ws, "playback_state")
        assert paused["paused"] is True and paused["action"] == "pause"
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.4)  # nothing at all while paused

        send(ws, action="resume")
        resumed = next_of(ws, "playback_state")
        after_pause = next_of(ws, "metric")
        assert resumed["paused"] is False
        assert after_pause["current_index"] == resumed["current_index"]
        assert after_pause["current_index"] > first["current_index"]

        send(ws, action="speed", value=4)
        assert next_of(ws, "playback_state")["speed"] == 4.0

        send(ws, action="seek", step=90)
        sought = next_of(ws, "playback_state")
        landed = next_of(ws, "metric")
        assert sought["current_index"] == 90
        assert (landed["data"]["step"], landed["current_index"]) == (90, 90)

        rest = receive_until(ws, is_complete)

    assert [m["data"]["step"] for m in metrics_of(rest)] == list(range(91, 100))
    assert rest[-1]["type"] == "playback_complete"


@pytest.mark.parametrize(
    ("control", "words"),
    [
        ({"action": "speed", "value": 20}, "speed"),
        ({"action": "speed", "value": "fast"}, "speed"),
        ({"action": "seek", "step": 5000}, "outside the playback range"),
        ({"action": "seek", "step": -1}, "seek"),
        ({"action": "rewind"}, "action"),
        ("not json", "JSON"),
    ],
)
def test_a_bad_control_is_refused_and_the_playback_goes_on(
    server_of: Any, control: Any, words: str
) -> None:
    server = server_of(20, playback_interval=0.02)
    with open_ws(server.ws_url(f"{PLAYBACK}?speed=1")) as ws:
        assert receive(ws)["type"] == "playback_info"
        ws.send(control if isinstance(control, str) else json.dumps(control))
        error = next_of(ws, "error")
        messages = receive_until(ws, is_complete)

    assert error["code"] == "invalid_parameter" and words in error["detail"]
    assert messages[-1]["type"] == "playback_complete"
    assert metrics_of(messages)[-1]["data"]["step"] == 19


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("speed=0", "speed"),
        ("speed=0.05", "speed"),
        ("speed=10.5", "speed"),
        ("speed=abc", "speed"),
        ("speed=nan", "speed"),
        ("speed=inf", "speed"),
        ("start_step=-1", "start_step"),
        ("start_step=9&end_step=3", "after end_step"),
        ("sped=2", "unknown parameter"),
    ],
)
def test_bad_parameters_are_refused_with_a_policy_close(
    server_of: Any, query: str, words: str
) -> None:
    server = server_of(3)
    with open_ws(server.ws_url(f"{PLAYBACK}?{query}")) as ws:
        error = receive(ws)
        code, reason = close_code(ws)

    assert error["type"] == "error" and error["code"] == "invalid_parameter"
    assert words in error["detail"] and words in reason
    assert code == 1008


def test_an_unknown_job_is_refused_with_a_clear_reason(server_of: Any) -> None:
    server = server_of(1)
    with open_ws(server.ws_url("/api/monitoring/ghost/playback")) as ws:
        error = receive(ws)
        code, reason = close_code(ws)

    assert error["code"] == "job_not_found" and code == 1008 and "ghost" in reason
