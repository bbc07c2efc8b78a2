"""Playback clients that never read (issue 23 §5), as tests/api/test_slow_clients.py
does for the live stream.

A client opens a playback at 10x of a run of megabytes and then never reads:
the kernel buffers on both sides fill and the server's sends stall. The
server must not buffer the run for it (it holds one page of records,
PLATFORM_HISTORY_PAGE_SIZE, and asyncio's 64 KiB write buffer, whatever the
run's size), must keep answering the API and other playbacks meanwhile, and
must drop it after the send timeout, as it drops a live client. This held
without a change.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.api.live_support import (
    LiveServer,
    append_steps,
    live_server,
    live_settings,
    open_ws,
    receive_until,
    wait_for,
)
from tests.api.test_slow_clients import (
    EXTRA,
    assert_api_answers_promptly,
    closing_all,
    open_server_connections,
    stalled_client,
)
from training_platform.settings import Settings

pytestmark = pytest.mark.slow  # a real server, megabytes of history, a timeout waited out

RECORDS = 500  # ~12 KB each: ~6 MB per playback, more than a loopback socket absorbs
PLAYBACK = "/api/monitoring/run1/playback?speed=10"
# What the server may hold for one stalled client beyond the kernel's buffers:
# asyncio's write buffer pauses at 64 KiB, plus the one message being written.
MAX_BUFFERED = 1 << 20


def buffered_bytes(server: LiveServer, ports: set[int]) -> list[int]:
    """Bytes the server holds in user space, unsent, for each of these clients."""
    held = []
    for protocol in list(server.server.server_state.connections):
        client = getattr(protocol, "client", None)
        transport = getattr(protocol, "transport", None)
        if client is not None and client[1] in ports and transport is not None:
            held.append(transport.get_write_buffer_size())
    return held


class PeakBuffer:
    """The most any one of `ports` had buffered, sampled every 10 ms in a thread."""

    def __init__(self, server: LiveServer, ports: set[int]) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(server, ports), daemon=True)

    def _watch(self, server: LiveServer, ports: set[int]) -> None:
        while not self._stop.wait(0.01):
            self.peak = max([self.peak, *buffered_bytes(server, ports)])

    def __enter__(self) -> PeakBuffer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_playback_clients_that_never_read_are_bounded_and_dropped(
    settings: Settings, metrics_dir: Path
) -> None:
    append_steps(metrics_dir / "run1_metrics.jsonl", range(RECORDS), extra=EXTRA)
    # 10x of a 1 ms interval: the whole run is due at once. Pings off: only the
    # send timeout can notice these clients, as in the live stream's test.
    tight = live_settings(
        settings,
        live_send_timeout=2.0,
        ws_ping_interval=0,
        playback_interval=0.001,
        poll_interval=0,
    )
    with live_server(tight) as server:
        base = server.http_url("")
        server.app.state.sync_service.sync_job("run1")
        with (
            closing_all([stalled_client(server.port, PLAYBACK) for _ in range(3)]) as stalled,
            PeakBuffer(server, {sock.getsockname()[1] for sock in stalled}) as buffered,
        ):
            assert wait_for(lambda: open_server_connections(server, stalled) == 3)
            # Their sends stall (asyncio's buffer reaches its high-water mark) ...
            assert wait_for(lambda: buffered.peak > 0, timeout=5), "the sends never stalled"
            # A stalled player holds its page of records, never a database connection.
            pool = server.app.state.engine.pool
            assert wait_for(lambda: pool.checkedout() == 0, timeout=5), pool.status()

            # ... while another playback is served whole, and the API answers.
            with open_ws(server.ws_url(PLAYBACK)) as ws:
                messages = receive_until(
                    ws, lambda got: bool(got) and got[-1]["type"] == "playback_complete"
                )
            metrics = [m["current_index"] for m in messages if m["type"] == "metric"]
            assert metrics == list(range(RECORDS))
            assert_api_answers_promptly(base)

            # The stalled ones are dropped after the send timeout, as live clients are.
            assert wait_for(lambda: open_server_connections(server, stalled) == 0, timeout=15), (
                "the server still holds playbacks to clients that never read"
            )
            # Never more than a bounded buffer each, not the run they asked for.
            assert buffered.peak <= MAX_BUFFERED, f"{buffered.peak} bytes held for one client"
        assert_api_answers_promptly(base)
