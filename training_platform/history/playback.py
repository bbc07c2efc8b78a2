"""Playback of a stored run: its range, its pages, its pacing and its controls.

Pure pieces, with no WebSocket in sight (the route in `api/routers/playback.py`
drives them): history is read in pages by step (keyset, never the whole run),
and the `Pacer` says when each record is due. Record `i` is due at
``anchor + (i - anchor_index) * interval / speed``: deadlines are absolute, so
the time a send or a page read takes does not add up over a playback, and
the pace stays accurate however long it runs. Speed changes, pauses and seeks
move the anchor.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.errors import InvalidParameterError
from training_platform.history.iso_time import iso_utc
from training_platform.history.metrics_query import list_metrics
from training_platform.store.models import TrainingMetric

MIN_SPEED: Final = 0.1
MAX_SPEED: Final = 10.0
ACTIONS: Final = ("pause", "resume", "speed", "seek")


@dataclass(frozen=True)
class PlaybackRange:
    """The records a playback covers, fixed when it starts."""

    job_id: str
    start_step: int
    end_step: int | None  # None: the job has no records in range
    total: int
    # The first stored step of the range, and whether every step from it on is
    # stored (steps 0, 1, 2, ...: the usual case): then a seek's index is plain
    # arithmetic, with no count query.
    first_stored: int | None = None
    dense: bool = False


def plan_playback(
    session: Session, *, job_id: str, start_step: int | None, end_step: int | None
) -> PlaybackRange:
    """Resolve open ends to the stored first/last step and count the records between."""
    where = [TrainingMetric.job_id == job_id]
    if start_step is not None:
        where.append(TrainingMetric.step >= start_step)
    if end_step is not None:
        where.append(TrainingMetric.step <= end_step)
    total, first, last = session.execute(
        select(func.count(), func.min(TrainingMetric.step), func.max(TrainingMetric.step)).where(
            *where
        )
    ).one()
    start = start_step if start_step is not None else (first if first is not None else 0)
    # An open end is the last step stored now: records landing during the
    # playback do not make it longer than the total it announced.
    end = end_step if end_step is not None else last
    dense = first is not None and last - first + 1 == total
    return PlaybackRange(
        job_id=job_id,
        start_step=start,
        end_step=end,
        total=total,
        first_stored=first,
        dense=dense,
    )


def read_page(
    session: Session, playback: PlaybackRange, *, from_step: int, limit: int
) -> list[dict[str, Any]]:
    """Up to `limit` API-safe records of the range, from `from_step` on."""
    if playback.end_step is None or from_step > playback.end_step:
        return []
    return list_metrics(
        session,
        job_id=playback.job_id,
        start_step=from_step,
        end_step=playback.end_step,
        limit=limit,
        nonfinite_as_strings=True,
    )


def known_index_of_step(playback: PlaybackRange, step: int) -> int | None:
    """Where a seek to `step` lands, when the range alone tells (it is dense); else None."""
    if playback.first_stored is None:
        return 0  # nothing stored in range: every seek lands at the end, which is 0
    if not playback.dense:
        return None
    return min(max(step - playback.first_stored, 0), playback.total)


def index_of_step(session: Session, playback: PlaybackRange, step: int) -> int:
    """How many records of the range come before `step` (where a seek lands).

    A count query: use `known_index_of_step` first, which needs none.
    """
    return session.execute(
        select(func.count()).where(
            TrainingMetric.job_id == playback.job_id,
            TrainingMetric.step >= playback.start_step,
            TrainingMetric.step < step,
        )
    ).scalar_one()


def metric_text(record: dict[str, Any], *, index: int, total: int, max_bytes: int) -> str:
    """The playback's metric message for the record at `index` (0-based) of `total`,
    with `timestamp_iso` as on the live stream (`live/channels.py`)."""
    timestamp = record.get("timestamp")
    iso = iso_utc(timestamp)
    message: dict[str, Any] = {
        "type": "metric",
        "data": {**record, "timestamp_iso": iso},
        "progress": round((index + 1) / total, 6) if total else 1.0,
        "current_index": index,
        "total": total,
    }
    text = orjson.dumps(message).decode()
    if len(text) > max_bytes:  # see live.metric_message: fetch it over REST
        message["data"] = {"step": record["step"], "timestamp": timestamp, "timestamp_iso": iso}
        message["truncated"] = True
        text = orjson.dumps(message).decode()
    return text


@dataclass(frozen=True)
class Control:
    """A client's playback command: pause, resume, speed (value) or seek (step)."""

    action: str
    value: float | None = None
    step: int | None = None


def parse_control(text: str, playback: PlaybackRange) -> Control:
    """Validate one control message; raises `InvalidParameterError` saying what is wrong."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidParameterError('controls are JSON objects, e.g. {"action": "pause"}') from None
    if not isinstance(data, dict) or data.get("action") not in ACTIONS:
        raise InvalidParameterError(f"'action' must be one of {', '.join(ACTIONS)}")
    action = data["action"]
    if action == "speed":
        value = data.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = None
        if value is None or not MIN_SPEED <= value <= MAX_SPEED:  # NaN fails too
            raise InvalidParameterError(
                f"speed 'value' must be a number from {MIN_SPEED:g} to {MAX_SPEED:g}, "
                f"got {data.get('value')!r}"
            )
        return Control(action, value=float(value))
    if action == "seek":
        step = data.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidParameterError(f"seek 'step' must be an integer >= 0, got {step!r}")
        end = playback.end_step
        if step < playback.start_step or (end is not None and step > end):
            raise InvalidParameterError(
                f"seek step {step} is outside the playback range "
                f"{playback.start_step}..{'' if end is None else end}"
            )
        return Control(action, step=step)
    return Control(action)


class Pacer:
    """When each record of a playback is due (see the module docstring)."""

    def __init__(
        self, interval: float, speed: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.speed = speed
        self.clock = clock
        self._anchor_time = clock()
        self._anchor_index = 0

    @property
    def gap(self) -> float:
        """Seconds between two records at the current speed."""
        return self.interval / self.speed

    def start(self, index: int) -> None:
        """Record `index` is due now; the following ones one gap apart."""
        self._anchor_time, self._anchor_index = self.clock(), index

    def due(self, index: int) -> float:
        return self._anchor_time + (index - self._anchor_index) * self.gap

    def change_speed(self, speed: float, next_index: int, last_sent_at: float | None) -> None:
        """From now on, one record per interval/speed, counted from the last one sent."""
        self.speed = speed
        base = self.clock() if last_sent_at is None else last_sent_at + self.gap
        self._anchor_time, self._anchor_index = max(self.clock(), base), next_index


# Controls that may wait at once. With coalescing at most three kinds wait
# (a seek, a speed, a pause/resume), so this bound is only reached by a
# control kind added later; a full queue stops the reading of the client.
MAX_PENDING_CONTROLS: Final = 8


class ControlQueue:
    """A playback's pending controls: bounded, and coalescing bursts.

    A new seek replaces a pending seek, a speed a pending speed, and a pause or
    resume the pending pause/resume: only the latest of each still matters,
    and applying every one of a burst (each seek a page read, each an answer)
    is what made a burst of seeks slow to answer (docs/benchmarks.md, Live
    playback). `close(final)` makes `final` (e.g. "the client left") the next
    control, ahead of everything pending.
    """

    def __init__(self, maxsize: int = MAX_PENDING_CONTROLS) -> None:
        self.maxsize = maxsize
        self._pending: list[Control] = []
        self._final: Control | None = None
        self._available = asyncio.Event()  # set while a control waits
        self._room = asyncio.Event()  # set when a control was taken since the last wait
        # One reader (the client's listener) puts, one player gets: with no await
        # between a check and its change, events are all the locking needed.

    def __len__(self) -> int:
        return len(self._pending)

    async def put(self, control: Control) -> None:
        """Queue `control`, replacing the pending one it supersedes; waits while full."""
        group = _coalescing_group(control.action)
        while True:
            kept = [c for c in self._pending if _coalescing_group(c.action) != group]
            if len(kept) < len(self._pending) or len(kept) < self.maxsize:
                break
            self._room.clear()
            await self._room.wait()
        self._pending = [*kept, control]
        self._available.set()

    def close(self, final: Control) -> None:
        """`final` is the next control, and every one after it; nothing pending is kept."""
        self._final = final
        self._pending.clear()
        self._available.set()
        self._room.set()

    def get_nowait(self) -> Control | None:
        """The next control, or None when none waits."""
        if self._final is not None:
            return self._final
        if not self._pending:
            return None
        control = self._pending.pop(0)
        if not self._pending:
            self._available.clear()
        self._room.set()
        return control

    async def get(self) -> Control:
        """The next control, waiting for one."""
        while (control := self.get_nowait()) is None:
            await self._available.wait()
        return control


def _coalescing_group(action: str) -> str:
    return "pause" if action in ("pause", "resume") else action
