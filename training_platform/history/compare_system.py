"""A run's system samples summed up for Compare (`GET /api/compare?fields=system...`).

Runs differ in hosts and GPUs, so Compare gets run-level series, each one
aggregation over every matching series of every host (docs/contract.md):

- `system.gpu_utilization`: mean over every GPU of every host (%);
- `system.gpu_memory_used_gib`: max over GPUs (the fullest GPU: the one to OOM);
- `system.gpu_power_w`: sum over GPUs (the run's draw);
- `system.gpu_temperature_c`: max over GPUs (the hottest);
- `system.cpu_percent`, `system.memory_used_gib`: sum over hosts;
- `system.disk_used_percent`: max over hosts;
- `system.network_recv_mib_s`, `system.network_sent_mib_s`: sum over hosts.

Read through `system_history` (its tiers: a month is read from the hourly
rollups), one host's points then put on a common time grid of at most
`max_points` buckets. A bucket's `min`/`max` apply the aggregation to each
part's own min and max, so a spike of one GPU stays in the run's envelope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from training_platform.errors import InvalidParameterError
from training_platform.history.series.plan import first_timestamp
from training_platform.history.system_query import system_history
from training_platform.store.models import SystemLayout

Aggregate = Literal["mean", "sum", "max"]
PREFIX: Final = "system"
# Run-level series -> (the raw series it sums up, per host, as a pattern; aggregation).
SYSTEM_SERIES: Final[dict[str, tuple[str, Aggregate]]] = {
    "system.gpu_utilization": (r"gpus\.\d+\.utilization", "mean"),
    "system.gpu_memory_used_gib": (r"gpus\.\d+\.memory_used_gib", "max"),
    "system.gpu_power_w": (r"gpus\.\d+\.power_w", "sum"),
    "system.gpu_temperature_c": (r"gpus\.\d+\.temperature_c", "max"),
    "system.cpu_percent": (r"cpu\.percent", "sum"),
    "system.memory_used_gib": (r"memory\.used_gib", "sum"),
    "system.disk_used_percent": (r"disk\.used_percent", "max"),
    "system.network_recv_mib_s": (r"network\.recv_mib_s", "sum"),
    "system.network_sent_mib_s": (r"network\.sent_mib_s", "sum"),
}
_PATTERNS: Final = {name: re.compile(raw) for name, (raw, _) in SYSTEM_SERIES.items()}


def split_system_fields(fields: frozenset[str] | None) -> tuple[frozenset[str] | None, list[str]]:
    """`fields=` as (the metric fields, the system series asked): `system` is every
    one, `system.<name>` one of SYSTEM_SERIES (else 422, naming them)."""
    if fields is None:
        return None, []
    asked: set[str] = set()
    for name in fields:
        if name == PREFIX:
            asked.update(SYSTEM_SERIES)
        elif name.startswith(PREFIX + "."):
            if name not in SYSTEM_SERIES:
                known = ", ".join(SYSTEM_SERIES)
                raise InvalidParameterError(f"fields: unknown system series {name!r} ({known})")
            asked.add(name)
    metrics = frozenset(n for n in fields if n != PREFIX and not n.startswith(PREFIX + "."))
    return metrics, sorted(asked)


def system_series_of(session: Session, job_id: str) -> list[str]:
    """The run-level series a job's system samples can give (none without samples)."""
    raw = _raw_names(session, job_id)
    return [name for name, pattern in _PATTERNS.items() if any(map(pattern.fullmatch, raw))]


def _raw_names(session: Session, job_id: str) -> set[str]:
    query = select(SystemLayout.series).where(SystemLayout.job_id == job_id)
    return {name for names in session.scalars(query) for name in names}


def compare_system(
    session: Session,
    job_id: str,
    names: Iterable[str],
    *,
    max_points: int,
    x: str,
    start_step: int | None,
    end_step: int | None,
) -> dict[str, Any] | None:
    """The run's `names` as a compare entry (`x_values`, `timestamps`, `steps`,
    `series`), or None when the run has no system samples of them."""
    raw = _raw_names(session, job_id)
    wanted = {name: sorted(filter(_PATTERNS[name].fullmatch, raw)) for name in names}
    wanted = {name: parts for name, parts in wanted.items() if parts}
    if not wanted:
        return None
    needed = sorted({part for parts in wanted.values() for part in parts})
    answer = system_history(session, job_id=job_id, max_points=max_points, series=needed)
    hosts = [host for host in answer["hosts"].values() if host["count"]]
    if not hosts:
        return None
    body = _on_one_grid(hosts, wanted, max_points)
    steps: list[int | None] = body["steps"]
    keep = [
        step is not None
        and (start_step is None or step >= start_step)
        and (end_step is None or step <= end_step)
        if x == "step" or start_step is not None or end_step is not None
        else True
        for step in steps
    ]
    if not all(keep):
        body = _kept(body, np.array(keep, dtype=bool))
    if x == "step":
        body["x_values"] = list(body["steps"])
    elif x == "time":
        start = first_timestamp(session, job_id)
        origin = start if start is not None else float(min(h["timestamps"][0] for h in hosts))
        body["x_values"] = [t - origin for t in body["timestamps"]]
    else:  # tokens: a sample knows no token count
        body["x_values"] = [None] * len(body["steps"])
    body["hosts"] = len(hosts)
    body["source"] = sorted({host["source"] for host in hosts})
    return body


def _on_one_grid(
    hosts: list[Mapping[str, Any]], wanted: Mapping[str, list[str]], max_points: int
) -> dict[str, Any]:
    """Every host's points in one time bucket each, then each series aggregated
    over its parts (a part: one raw series of one host) per bucket."""
    times = [np.asarray(host["timestamps"], dtype=np.float64) for host in hosts]
    if len(hosts) == 1:
        slots = [np.arange(len(times[0]))]
        count = len(times[0])
    else:
        first = min(float(t[0]) for t in times)
        span = max(float(t[-1]) for t in times) - first
        spacing = max((float(np.median(np.diff(t))) for t in times if len(t) > 1), default=0.0)
        width = max(span / max(1, max_points - 1), spacing, 1e-9)
        # A bucket per `width` around each grid time (floor(.. + 0.5): a host
        # sampling half a period after another still maps one sample a bucket).
        slots = [np.floor((t - first) / width + 0.5).astype(np.int64) for t in times]
        count = int(max(int(s[-1]) for s in slots)) + 1
    exact = not any(host["downsampled"] for host in hosts)
    exact = exact and all(len(np.unique(s)) == len(s) for s in slots)
    stamps = np.full(count, np.inf)
    last_steps = np.full(count, -1, dtype=np.int64)
    for slot, t, host in zip(slots, times, hosts, strict=True):
        np.minimum.at(stamps, slot, t)
        step = np.array([-1 if s is None else s for s in host["steps"]], dtype=np.int64)
        np.maximum.at(last_steps, slot, step)
    used = np.isfinite(stamps)
    series: dict[str, Any] = {}
    for name, parts in wanted.items():
        how = SYSTEM_SERIES[name][1]
        lows, highs = [], []
        for slot, host in zip(slots, hosts, strict=True):
            for part in parts:
                column = host["series"].get(part)
                if column is None:
                    continue
                low = np.asarray(column.get("values", column.get("min")), dtype=np.float64)
                high = np.asarray(column.get("values", column.get("max")), dtype=np.float64)
                low_at, high_at = np.full(count, np.nan), np.full(count, np.nan)
                np.fmin.at(low_at, slot, low)
                np.fmax.at(high_at, slot, high)
                if len(hosts) > 1:  # a host's sample that fell in the next bucket
                    _fill_single_holes(low_at)
                    _fill_single_holes(high_at)
                lows.append(low_at)
                highs.append(high_at)
        # float32 as the samples are stored: JSON writes 97.3, not 97.30000305.
        low_line = _aggregate(np.array(lows), how)[used].astype(np.float32)
        high_line = _aggregate(np.array(highs), how)[used].astype(np.float32)
        if exact:
            series[name] = {"values": low_line}
        else:
            series[name] = {"min": low_line, "max": high_line}
    return {
        "downsampled": not exact,
        "count": int(used.sum()),
        "timestamps": stamps[used].tolist(),
        "steps": [None if s < 0 else s for s in last_steps[used].tolist()],
        "series": series,
    }


def _fill_single_holes(column: np.ndarray) -> None:
    """A one-bucket gap between two values takes the value before it (in place), so
    a host whose clock drifts against the grid does not dip out of a sum."""
    if len(column) < 3:
        return
    missing = np.isnan(column)
    holes = np.flatnonzero(missing[1:-1] & ~missing[:-2] & ~missing[2:]) + 1
    column[holes] = column[holes - 1]


def _aggregate(parts: np.ndarray, how: Aggregate) -> np.ndarray:
    """Per bucket (column) over the parts (rows) that have a value; NaN when none has."""
    present = np.isfinite(parts)
    counts = present.sum(axis=0)
    filled = np.where(present, parts, 0.0)
    if how == "max":
        filled = np.where(present, parts, -np.inf)
        out = filled.max(axis=0)
    elif how == "sum":
        out = filled.sum(axis=0)
    else:
        out = filled.sum(axis=0) / np.maximum(counts, 1)
    return np.where(counts > 0, out, np.nan)


def _kept(body: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
    """The body with only the points `keep` marks."""
    series = {
        name: {key: np.asarray(column)[keep] for key, column in columns.items()}
        for name, columns in body["series"].items()
    }
    at = np.flatnonzero(keep).tolist()
    return {
        **body,
        "count": len(at),
        "timestamps": [body["timestamps"][i] for i in at],
        "steps": [body["steps"][i] for i in at],
        "series": series,
    }
