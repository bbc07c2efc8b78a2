"""System samples on the live socket: `{"type": "system", "data": {...}}`, once each, in order."""

from __future__ import annotations

from pathlib import Path

from tests.api.live_support import (
    append_steps,
    has_step,
    live_server,
    live_settings,
    open_ws,
    receive,
    receive_until,
)
from tests.system_support import T0, append_system, gpu, system_line
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"


def test_each_hosts_samples_are_announced_once_as_they_land(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"  # subscribed
        append_system(
            metrics_dir / "run1_system.jsonl",
            *(system_line(T0 + i, "trainer", i, gpus=[gpu(0, 90.0 + i)]) for i in range(3)),
        )
        append_system(metrics_dir / "run1_system.node-2.jsonl", system_line(T0, "node-2"))
        messages = receive_until(
            ws, lambda ms: sum(m["type"] == "system" for m in ms) >= 4, timeout=30
        )
        # A sentinel after everything settled: a repeat would come before it.
        messages += receive_until(ws, has_step(0), after=lambda: append_steps(run1, [0]))

    system = [m["data"] for m in messages if m["type"] == "system"]
    trainer = [s for s in system if s["host"] == "trainer"]
    assert [s["step"] for s in trainer] == [0, 1, 2]
    assert [s["values"]["gpus.0.utilization"] for s in trainer] == [90.0, 91.0, 92.0]
    assert trainer[0]["timestamp"] == T0
    (other,) = [s for s in system if s["host"] == "node-2"]
    assert other["step"] is None and other["values"]["memory.used_gib"] == 10.5
    assert len(system) == 4
