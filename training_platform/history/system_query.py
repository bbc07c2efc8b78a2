"""A job's system samples per host, sized for a chart (`GET .../system`, docs/metrics-api.md).

Per host the answer is columnar like the metric history's: `timestamps` and
`steps` (the newest training step the sampler knew) as the two x axes, and
one entry per series. When the range holds at most `max_points` samples they
come back exactly (`values`); otherwise as buckets of consecutive samples
with each series' `min` and `max`, so a spike or an idle dip survives any
zoom. A long range is read from the per-minute or per-hour rollups
(store/system_values.py) instead of the samples: a 30-day run at 1 s is
2.6 million samples per host, but 720 hourly rows.

The answer's columns are numpy arrays, for `ANSWER_JSON` (orjson writes a
float32 in its shortest form, 97.3 rather than 97.30000305, and NaN, a value
the host did not report, as null).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.errors import InvalidParameterError
from training_platform.store.jobs import get_job
from training_platform.store.models import SystemLayout, SystemRollup
from training_platform.store.system_blocks import read_range
from training_platform.store.system_values import FLOAT32, ROLLUP_WIDTHS

# A tier is read when it has at most this many rows per point asked (or at
# most ALWAYS_READABLE rows, cheap whatever the points): more rows cost
# reading time, a coarser tier would make buckets coarser than asked.
ROWS_PER_POINT: Final = 4
ALWAYS_READABLE: Final = 8_000
MAX_HOSTS: Final = 64  # hosts per answer (a host picker asks for one)
ANSWER_JSON: Final = orjson.OPT_SERIALIZE_NUMPY


@dataclass
class _Rows:
    """Rows of one host in time order: times, steps (-1: none), and per series low/high
    as (rows, series) float32 arrays, NaN where the series has no value."""

    timestamps: np.ndarray
    steps: np.ndarray
    lows: np.ndarray
    highs: np.ndarray


def system_history(
    session: Session,
    *,
    job_id: str,
    host: str | None = None,
    start: float | None = None,
    end: float | None = None,
    max_points: int = 1000,
    series: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The answer of `GET /api/monitoring/{job_id}/system` (raises `JobNotFoundError`)."""
    get_job(session, job_id)
    if start is not None and end is not None and start > end:
        raise InvalidParameterError(f"start ({start}) is after end ({end})")
    layouts: dict[str, list[tuple[int, list[str]]]] = {}
    query = select(SystemLayout.host, SystemLayout.id, SystemLayout.series).where(
        SystemLayout.job_id == job_id
    )
    for name, layout_id, names in session.execute(query.order_by(SystemLayout.id)):
        layouts.setdefault(name, []).append((layout_id, list(names)))
    hosts = sorted(layouts)
    if host is not None and host not in layouts:
        known = ", ".join(hosts[:20]) or "none yet"
        raise InvalidParameterError(f"host {host!r} has no system samples (hosts: {known})")
    wanted = _matcher(series)
    answer: dict[str, Any] = {}
    for name in [host] if host is not None else hosts[:MAX_HOSTS]:
        answer[name] = _host_answer(session, layouts[name], start, end, max_points, wanted)
    return {
        "job_id": job_id,
        "max_points": max_points,
        "start": start,
        "end": end,
        "all_hosts": hosts,
        "hosts": answer,
    }


def _matcher(series: Iterable[str] | None) -> Any:
    if series is None:
        return None
    names = frozenset(series)
    return lambda name: name in names or any(name.startswith(n + ".") for n in names)


def _host_answer(
    session: Session,
    layouts: list[tuple[int, list[str]]],
    start: float | None,
    end: float | None,
    max_points: int,
    wanted: Any,
) -> dict[str, Any]:
    names = sorted({name for _, series in layouts for name in series})
    if wanted is not None:
        names = [name for name in names if wanted(name)]
    width = _tier(session, [layout_id for layout_id, _ in layouts], start, end, max_points)
    rows = _read(session, layouts, names, start, end, width)
    count = len(rows.timestamps)
    per_bucket = max(1, math.ceil(count / max_points))
    exact = width == 0 and per_bucket == 1
    firsts = np.arange(0, count, per_bucket)
    # Whole-array reductions (numpy): a month of 8 GPUs is ~100 series x 2,000
    # points, too many values for a Python loop within the 100 ms budget.
    # fmin/fmax skip NaN, so a bucket's value is its samples' own extreme.
    if count and per_bucket > 1:
        lows = np.fmin.reduceat(rows.lows, firsts, axis=0)
        highs = np.fmax.reduceat(rows.highs, firsts, axis=0)
        steps = np.maximum.reduceat(rows.steps, firsts)
    else:
        lows, highs, steps = rows.lows, rows.highs, rows.steps
    lows, highs = np.ascontiguousarray(lows.T), np.ascontiguousarray(highs.T)
    columns: dict[str, Any] = {}
    for index, name in enumerate(names):
        if exact:
            columns[name] = {"values": lows[index]}
        else:
            columns[name] = {"min": lows[index], "max": highs[index]}
    return {
        "downsampled": not exact,
        "source": "samples" if width == 0 else f"rollups of {width} s",
        "samples_per_point": per_bucket if width == 0 else None,
        "count": len(firsts),
        "timestamps": rows.timestamps[firsts],
        "steps": [None if step < 0 else step for step in steps.tolist()],
        "series": columns,
    }


def _tier(
    session: Session,
    layout_ids: list[int],
    start: float | None,
    end: float | None,
    max_points: int,
) -> int:
    """0 (the samples) or a rollup width: the finest with at most ROWS_PER_POINT rows a point."""
    limit = max(max_points * ROWS_PER_POINT, ALWAYS_READABLE)
    for width in (0, *ROLLUP_WIDTHS):
        if width == ROLLUP_WIDTHS[-1] or _rows_in(session, layout_ids, start, end, width) <= limit:
            return width
    return ROLLUP_WIDTHS[-1]


def _rows_in(
    session: Session, layout_ids: list[int], start: float | None, end: float | None, width: int
) -> int:
    """How many rows of the tier the range holds, counted on the coarsest rollup
    (a few hundred rows a month): samples are summed, finer buckets bounded."""
    coarsest = ROLLUP_WIDTHS[-1]
    query = select(func.coalesce(func.sum(SystemRollup.sample_count), 0), func.count()).where(
        SystemRollup.layout_id.in_(layout_ids), SystemRollup.width == coarsest
    )
    if start is not None:
        query = query.where(SystemRollup.bucket >= math.floor(start / coarsest))
    if end is not None:
        query = query.where(SystemRollup.bucket <= math.floor(end / coarsest))
    samples, hours = session.execute(query).one()
    if width == 0:
        return int(samples)
    return min(int(samples), int(hours) * (coarsest // width))


def _read(
    session: Session,
    layouts: list[tuple[int, list[str]]],
    names: list[str],
    start: float | None,
    end: float | None,
    width: int,
) -> _Rows:
    """The host's rows of the tier in time order, every layout's values put in `names` order."""
    position = {name: index for index, name in enumerate(names)}
    parts = []
    for layout_id, series in layouts:
        if width == 0:
            timestamps, steps, values = read_range(session, layout_id, len(series), start, end)
            lows = highs = values
        else:
            timestamps, steps, lows, highs = _rollups(session, layout_id, width, start, end)
        if len(timestamps):
            targets = [position[name] for name in series if name in position]
            sources = [i for i, name in enumerate(series) if name in position]
            parts.append((timestamps, steps, lows[:, sources], highs[:, sources], targets))
    count = sum(len(part[0]) for part in parts)
    lows = np.full((count, len(names)), np.nan, dtype=np.float32)
    highs = lows if width == 0 else lows.copy()
    at = 0
    for _, _, low, high, targets in parts:
        rows = slice(at, at + len(low))
        lows[rows, targets] = low
        if width:
            highs[rows, targets] = high
        at += len(low)
    timestamps = np.concatenate([part[0] for part in parts]) if parts else np.empty(0)
    steps = np.concatenate([part[1] for part in parts]) if parts else np.empty(0, np.int64)
    order = np.argsort(timestamps, kind="stable")  # layouts interleave in time
    return _Rows(timestamps[order], steps[order], lows[order], highs[order])


def _rollups(
    session: Session, layout_id: int, width: int, start: float | None, end: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    query = select(SystemRollup.first_timestamp, SystemRollup.last_step, SystemRollup.stats).where(
        SystemRollup.layout_id == layout_id, SystemRollup.width == width
    )
    if start is not None:
        query = query.where(SystemRollup.bucket >= math.floor(start / width))
    if end is not None:
        query = query.where(SystemRollup.bucket <= math.floor(end / width))
    found = session.execute(query.order_by(SystemRollup.bucket)).all()
    count = len(found)
    timestamps = np.fromiter((row[0] for row in found), dtype=np.float64, count=count)
    steps = np.fromiter((-1 if row[1] is None else row[1] for row in found), np.int64, count)
    stats = np.frombuffer(b"".join(row[2] for row in found), dtype=FLOAT32).reshape(count, -1)
    half = stats.shape[1] // 2
    return timestamps, steps, stats[:, :half], stats[:, half:]
