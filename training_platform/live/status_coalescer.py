"""Coalesced status messages: progress reaches live clients, at a bounded rate.

A status file changes every step (`current_step`, `updated_at`). Announcing
each change would cost one message per step per client; announcing none (as
before) left clients that follow only status messages (a progress bar, a
supervisor) with a `current_step` that never moved. So:

- a change of what a client acts on (`status`, `total_steps`, the anomaly
  flag) goes out at once, as before;
- a change of progress alone goes out at most once per `interval` per job:
  the newest one waits for the interval to end, replacing any older one still
  waiting, and nothing goes out when nothing changed.

Each message is built once (in the sync's worker thread) and fanned out to
every subscriber as the same text. Everything here runs on the event loop, so
it needs no lock; the pipeline hands messages over with `call_soon_threadsafe`,
which keeps their order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # live.py builds the coalescer: no import cycle at run time
    from training_platform.live.channels import JobChannel, Message


class StatusCoalescer:
    """When each job's status messages go out (event loop only)."""

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self.interval = interval
        self.clock = clock
        self._last_sent: dict[str, float] = {}
        self._waiting: dict[str, tuple[JobChannel, Sequence[Message]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def announce(self, channel: JobChannel, messages: Sequence[Message]) -> None:
        """Send now: what they say cannot wait. Supersedes any progress still waiting."""
        self._waiting.pop(channel.job_id, None)
        timer = self._timers.pop(channel.job_id, None)
        if timer is not None:
            timer.cancel()
        self._send(channel, messages)

    def progress(self, channel: JobChannel, messages: Sequence[Message]) -> None:
        """Send now if the job's last status message is `interval` old, else the newest
        progress goes out when the interval ends."""
        job_id = channel.job_id
        due = self._last_sent.get(job_id, -float("inf")) + self.interval
        now = self.clock()
        if now >= due and job_id not in self._waiting:
            self._send(channel, messages)
            return
        self._waiting[job_id] = (channel, messages)
        if job_id not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[job_id] = loop.call_later(max(0.0, due - now), self._flush, job_id)

    def waiting(self, job_id: str) -> bool:
        return job_id in self._waiting

    def cancel(self) -> None:
        """Drop every waiting message (the server is stopping)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._waiting.clear()

    def _flush(self, job_id: str) -> None:
        self._timers.pop(job_id, None)
        waiting = self._waiting.pop(job_id, None)
        if waiting is not None:
            self._send(*waiting)

    def _send(self, channel: JobChannel, messages: Sequence[Message]) -> None:
        self._last_sent[channel.job_id] = self.clock()
        channel.publish(messages)
