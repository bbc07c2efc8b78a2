"""Playback controls under a burst: a bounded, coalescing queue and seeks without count queries."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.api.live_support import LiveServer, append_steps, live_server, open_ws, receive
from training_platform.history.playback import Control, ControlQueue
from training_platform.settings import Settings

PLAYBACK = "/api/monitoring/run1/playback"
SEEKS = 2000


@contextmanager
def counting_count_queries(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement with a COUNT the server runs inside the block."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "count(" in statement.lower():
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@contextmanager
def server_with(settings: Settings, metrics_dir: Path, steps: list[int]) -> Iterator[LiveServer]:
    append_steps(metrics_dir / "run1_metrics.jsonl", steps)
    with live_server(settings.model_copy(update={"playback_interval": 1.0})) as server:
        sync = httpx.post(server.http_url("/api/monitoring/run1/metrics/sync"), timeout=30)
        assert sync.json()["new_metrics"] == len(steps)
        yield server


def flood_of_seeks(server: LiveServer, target: int, steps: list[int]) -> dict[str, Any]:
    """Pause, send SEEKS seeks then one to `target`; what the answers looked like.

    The flood never seeks to `target` itself: the answers are read up to the
    one that lands there, which must be the last seek's (an earlier seek to
    the same step, answered individually on a loaded machine, stopped the
    reading while later seeks still ran their count queries).
    """
    flood = [step for step in steps if step != target]
    with open_ws(server.ws_url(f"{PLAYBACK}?speed=0.1")) as ws:
        assert receive(ws)["type"] == "playback_info"
        ws.send(json.dumps({"action": "pause"}))
        while receive(ws)["type"] != "playback_state":
            pass
        engine: Engine = server.app.state.engine
        with counting_count_queries(engine) as counts:
            started = time.monotonic()
            for i in range(SEEKS):
                ws.send(json.dumps({"action": "seek", "step": flood[i % len(flood)]}))
            ws.send(json.dumps({"action": "seek", "step": target}))
            health_started = time.monotonic()
            assert httpx.get(server.http_url("/healthz"), timeout=10).status_code == 200
            health_took = time.monotonic() - health_started
            states: list[dict[str, Any]] = []
            while not states or states[-1]["current_index"] != steps.index(target):
                message = receive(ws, timeout=30)
                assert message["type"] == "playback_state", message
                states.append(message)
            answered_after = time.monotonic() - started
            ws.send(json.dumps({"action": "resume"}))
            while (message := receive(ws))["type"] != "metric":
                pass
    return {
        "states": states,
        "count_queries": len(counts),
        "answered_after": answered_after,
        "health_took": health_took,
        "landed": message,
    }


def test_a_burst_of_seeks_is_coalesced_and_runs_no_count_query(
    settings: Settings, metrics_dir: Path
) -> None:
    steps = list(range(300))
    with server_with(settings, metrics_dir, steps) as server:
        outcome = flood_of_seeks(server, 77, steps)

    assert outcome["count_queries"] == 0  # steps 0..299: where a seek lands is arithmetic
    # Each seek is answered at most once, and a superseded one maybe never: how
    # many get answered depends on how the server's transport interleaves reading
    # and playing (uvicorn 0.54 reads one frame per loop turn: most are answered),
    # so the queue's coalescing is tested directly below, and here what it buys:
    # the burst's last seek answered soon, the server responsive meanwhile.
    assert len(outcome["states"]) <= SEEKS + 1
    assert outcome["answered_after"] < 5.0
    assert outcome["health_took"] < 1.0
    landed = outcome["landed"]
    assert (landed["data"]["step"], landed["current_index"]) == (77, 77)


def test_seeks_in_a_run_with_gaps_count_at_most_once_per_answer(
    settings: Settings, metrics_dir: Path
) -> None:
    steps = list(range(0, 600, 2))  # every other step: the index needs a count
    with server_with(settings, metrics_dir, steps) as server:
        outcome = flood_of_seeks(server, 78, steps)

    assert outcome["count_queries"] <= len(outcome["states"]) < SEEKS // 2
    landed = outcome["landed"]
    assert (landed["data"]["step"], landed["current_index"]) == (78, 39)


def test_the_control_queue_coalesces_and_is_bounded() -> None:
    async def scenario() -> tuple[list[Control], bool, list[Control]]:
        queue = ControlQueue(maxsize=2)
        for step in range(100):
            await queue.put(Control("seek", step=step))
        await queue.put(Control("pause"))
        await queue.put(Control("resume"))  # replaces the pause
        first = [c for c in (queue.get_nowait(), queue.get_nowait()) if c is not None]
        await queue.put(Control("speed", value=2.0))
        await queue.put(Control("seek", step=5))
        third = asyncio.create_task(queue.put(Control("pause")))  # a new kind: no room
        await asyncio.sleep(0.05)
        blocked = not third.done()
        taken = [await queue.get()]
        await asyncio.wait_for(third, 1)
        taken += [await queue.get(), await queue.get()]
        return first, blocked, taken

    first, blocked, taken = asyncio.run(scenario())
    assert first == [Control("seek", step=99), Control("resume")]
    assert blocked
    assert taken == [Control("speed", value=2.0), Control("seek", step=5), Control("pause")]


def test_a_closed_queue_answers_its_final_control_at_once() -> None:
    async def scenario() -> Control:
        queue = ControlQueue()
        await queue.put(Control("seek", step=3))
        queue.close(Control("gone"))
        return await asyncio.wait_for(queue.get(), 1)

    assert asyncio.run(scenario()) == Control("gone")


@pytest.mark.parametrize("maxsize", [1, 3])
def test_put_never_waits_for_a_control_that_replaces_a_pending_one(maxsize: int) -> None:
    async def scenario() -> int:
        queue = ControlQueue(maxsize=maxsize)
        for step in range(50):
            await asyncio.wait_for(queue.put(Control("seek", step=step)), 1)
        return len(queue)

    assert asyncio.run(scenario()) == 1
