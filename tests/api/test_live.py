"""`/api/monitoring/{job_id}/live` against a real server: order, hand-over, status, anomalies."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import httpx

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
    record_line,
    wait_for,
)
from tests.webhook_receiver import Receiver
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"


def write_status(metrics_dir: Path, status: str, step: int = 0) -> None:
    temp = metrics_dir / ".run1_status.json.tmp"
    temp.write_text(
        f'{{"job_id": "run1", "status": "{status}", "current_step": {step}, '
        f'"total_steps": 1000, "anomaly_detected": false, "anomaly_reason": null, '
        f'"started_at": 1700000000.0, "updated_at": {1700000000.0 + step}}}'
    )
    temp.replace(metrics_dir / "run1_status.json")  # atomic, as the callback does


def test_many_appends_and_a_partial_line_arrive_once_in_order(
    settings: Settings, run1: Path
) -> None:
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"  # the current status comes first
        for start in range(0, 200, 10):
            append_steps(run1, range(start, start + 10))
            time.sleep(0.005)
        with run1.open("ab") as handle:
            handle.write(record_line(200)[:25])  # the writer is half-way through a line
        assert wait_for(lambda: server.hub.channel("run1").seq > 0)
        time.sleep(0.3)  # a sync or two see the partial line and hold it back
        with run1.open("ab") as handle:
            handle.write(record_line(200)[25:])
        messages = receive_until(ws, has_step(200))
        # A last line after everything settled: a duplicate would come before it.
        messages += receive_until(ws, has_step(201), after=lambda: append_steps(run1, [201]))

    assert metric_steps(messages) == list(range(202))
    last = next(m for m in messages if m["type"] == "metric" and m["data"]["step"] == 200)
    assert last["data"]["reward"]["mean"] == 20.0


def test_a_truncated_and_rewritten_file_streams_its_new_records(
    settings: Settings, run1: Path
) -> None:
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        # The status comes once the socket is subscribed: lines appended before
        # that are history (since_step), not live, and a loaded machine can
        # take a while between the handshake and the subscription.
        assert receive(ws)["type"] == "status"
        append_steps(run1, range(10))
        first = receive_until(ws, has_step(9))
        # A restarted run rewrites its file from scratch, with other values.
        run1.write_bytes(b"".join(record_line(s, reward={"mean": 100.0 + s}) for s in range(5)))
        second = receive_until(ws, lambda ms: len(metric_steps(ms)) >= 5)
        second += receive_until(ws, has_step(5), after=lambda: append_steps(run1, [5]))

    assert metric_steps(first) == list(range(10))
    assert metric_steps(second) == list(range(6))
    rewards = [m["data"]["reward"]["mean"] for m in second if m["type"] == "metric"]
    assert rewards[:5] == [100.0 + s for s in range(5)]


def test_since_step_hands_over_without_gap_or_duplicate_while_appending(
    settings: Settings, run1: Path
) -> None:
    total = 600
    fast = live_settings(settings, history_page_size=16)  # many pages, appends in between
    with live_server(fast) as server:
        writing = threading.Event()

        def writer() -> None:
            for start in range(0, total, 5):
                append_steps(run1, range(start, start + 5))
                if start >= 150:
                    writing.set()
                time.sleep(0.005)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert writing.wait(20)
            # The client has steps up to 50 from an earlier connection: the server
            # has stored them (a loaded machine ingests behind the writer). A step
            # up to 50 committed after the client's history would be sent again,
            # as a rewrite of a step it has is.
            stored = server.http_url("/api/monitoring/run1/metrics?start_step=60&limit=1")
            assert wait_for(lambda: bool(httpx.get(stored, timeout=10).json()["metrics"]), 30)
            with open_ws(server.ws_url(f"{LIVE}?since_step=50")) as ws:
                messages = receive_until(ws, has_step(total - 1), timeout=30)
                thread.join(30)
                messages += receive_until(
                    ws, has_step(total), after=lambda: append_steps(run1, [total])
                )
        finally:
            thread.join(30)

    assert metric_steps(messages) == list(range(51, total + 1))


def test_status_changes_then_finished_then_a_normal_close(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["data"]["status"] == "pending"
        write_status(metrics_dir, "running", 0)
        running = receive_until(ws, lambda ms: any(m["type"] == "status" for m in ms))
        append_steps(run1, range(3))
        # The trainer's last lines, then its final status, in one go.
        append_steps(run1, range(3, 5))
        write_status(metrics_dir, "completed", 4)
        rest = receive_until(ws, lambda ms: any(m["type"] == "finished" for m in ms))
        code, reason = close_code(ws)

    assert running[-1]["data"]["status"] == "running"
    assert running[-1]["data"]["total_steps"] == 1000
    assert metric_steps(running + rest) == list(range(5))
    assert [m["type"] for m in rest[-2:]] == ["status", "finished"]
    assert rest[-2]["data"]["status"] == "completed"
    assert rest[-1] == {"type": "finished", "status": "completed"}
    assert code == 1000 and "finished" in reason


def test_a_finished_run_sends_its_history_and_finished_then_closes(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    append_steps(run1, range(4))
    write_status(metrics_dir, "failed", 3)
    with live_server(live_settings(settings)) as server:
        httpx.post(server.http_url("/api/monitoring/run1/metrics/sync"), timeout=10)
        with open_ws(server.ws_url(f"{LIVE}?since_step=1")) as ws:
            messages = receive_until(ws, lambda ms: any(m["type"] == "finished" for m in ms))
            code, _ = close_code(ws)

    assert messages[0]["type"] == "status" and messages[0]["data"]["status"] == "failed"
    assert metric_steps(messages) == [2, 3]
    assert messages[-1] == {"type": "finished", "status": "failed"}
    assert code == 1000


def test_non_finite_values_are_strings_and_anomalies_are_announced(
    settings: Settings, run1: Path
) -> None:
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"
        append_steps(run1, range(3))
        append_steps(run1, [3], loss={"total_loss": math.nan}, kl={"mean": math.inf})
        messages = receive_until(ws, lambda ms: any(m["type"] == "anomaly" for m in ms))
        stored = httpx.get(server.http_url("/api/monitoring/run1/metrics/anomalies"), timeout=10)

    record = next(m["data"] for m in messages if m["type"] == "metric" and m["data"]["step"] == 3)
    assert record["loss"] == {"total_loss": "NaN"} and record["kl"] == {"mean": "Infinity"}
    anomaly = next(m["data"] for m in messages if m["type"] == "anomaly")
    assert (anomaly["step"], anomaly["source"]) == (3, "platform")
    assert anomaly["type"] in {"nan_inf", "kl_explosion"}
    assert {(a["step"], a["source"]) for a in stored.json()["anomalies"]} == {(3, "platform")}


def test_a_callback_anomaly_goes_out_once_as_the_row_that_was_stored(
    settings: Settings, run1: Path
) -> None:
    quiet = live_settings(settings, diagnostics_enabled=False)  # the callback's finding alone
    flagged = build_record(
        3,
        {"loss": {"total_loss": 0.5}},
        timestamp=1_700_000_003.0,
        anomalies=[{"type": "loss_spike", "severity": "warning", "message": "spike"}],
    )
    with live_server(quiet) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"
        append_steps(run1, range(3))
        with run1.open("ab") as handle:
            handle.write(encode_record(flagged))
        messages = receive_until(ws, lambda ms: any(m["type"] == "anomaly" for m in ms))
        append_steps(run1, [4])  # and whatever else was to come for step 3 arrives before it
        messages += receive_until(ws, lambda ms: 4 in metric_steps(ms))
        stored = httpx.get(server.http_url("/api/monitoring/run1/metrics/anomalies"), timeout=10)

    announced = [m["data"] for m in messages if m["type"] == "anomaly"]
    (row,) = stored.json()["anomalies"]
    assert len(announced) == 1  # one message, one kind: not rebuilt, not repeated
    # The stored row, created_at included; `ongoing` and `episode` are the
    # REST list's view of the rows around it, not the row's.
    stored_row = {key: value for key, value in row.items() if key not in ("ongoing", "episode")}
    assert {key: announced[0][key] for key in stored_row} == stored_row
    assert announced[0]["sources"] == ["callback"]


def test_manual_sync_racing_the_background_one_announces_each_record_once(
    settings: Settings, run1: Path
) -> None:
    total = 400
    # Polling every 10 ms (no notifications): the background sync and the
    # manual one keep colliding, whichever wins a given batch.
    racing = live_settings(settings, poll_interval=0.01, watch_files=False)
    with live_server(racing) as server:
        sync_url = server.http_url("/api/monitoring/run1/metrics/sync")
        with open_ws(server.ws_url(LIVE)) as ws, httpx.Client(timeout=10) as http:
            assert receive(ws)["type"] == "status"
            synced = 0
            for start in range(0, total, 20):
                append_steps(run1, range(start, start + 20))
                synced += http.post(sync_url).json()["new_metrics"]
            messages = receive_until(ws, has_step(total - 1))
            messages += receive_until(
                ws, has_step(total), after=lambda: append_steps(run1, [total])
            )
            history = http.get(server.http_url("/api/monitoring/run1/metrics")).json()

    assert metric_steps(messages) == list(range(total + 1))
    assert [r["step"] for r in history["metrics"]] == list(range(total + 1))
    assert synced <= total


def test_the_configured_webhook_hears_of_each_new_anomaly(
    settings: Settings, run1: Path, receiver: Receiver
) -> None:
    with live_server(live_settings(settings, webhook_url=receiver.url)) as server:
        append_steps(run1, range(3))
        append_steps(run1, [3], kl={"mean": 7.0})
        assert wait_for(lambda: bool(receiver.events("anomaly")))
        httpx.post(server.http_url("/api/monitoring/run1/metrics/sync"), timeout=10)

    posts = receiver.payloads()
    incidents = [post for post in posts if post["event"] == "anomaly"]
    assert [(p["job_id"], p["step"], p["type"], p["source"]) for p in incidents] == [
        ("run1", 3, "kl_explosion", "platform")
    ]
    # The job was marked by it (tests/api/test_job_anomaly_flag.py): told once besides.
    assert [post["event"] for post in posts].count("job_anomaly") <= 1
