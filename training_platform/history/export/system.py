"""A job's system samples as a file: every stored sample, in time order, an hour at a time.

Columns: `timestamp`, `host`, `step`, then every series the chosen hosts
reported (`cpu.percent`, `gpus.0.utilization`, ...), empty where a sample
lacks it. Samples are stored as float32 (store/system_values.py): each value
is written with the 7 significant digits float32 holds (97.3, not
97.30000305). Read a block-hour of every layout at a time, a session per
chunk, so memory is one hour of samples whatever the run's length; a run
still sampling is exported up to the newest minute stored when the export
began.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from sqlalchemy import func, select

from training_platform.errors import InvalidParameterError
from training_platform.history.export.columns import ColumnChunk, Columns
from training_platform.history.export.metrics import SessionFactory
from training_platform.history.export.writers import Format, encode, jsonl_bytes, require_pyarrow
from training_platform.store.jobs import get_job
from training_platform.store.models import SystemBlock, SystemLayout
from training_platform.store.system_blocks import BLOCK_SECONDS, minute_of, read_range

CHUNK_MINUTES: Final = 60  # an hour of blocks a query: 3,600 samples a host at 1 s
LEADING: Final[Columns] = {"timestamp": "float", "host": "str", "step": "int"}


@dataclass(frozen=True)
class SystemExport:
    """The file's bytes, lazily, and its name."""

    body: Iterator[bytes]
    filename: str


@dataclass(frozen=True)
class _Layout:
    id: int
    host: str
    series: list[str]


def start_system_export(
    session_factory: SessionFactory,
    *,
    job_id: str,
    fmt: Format,
    host: str | None = None,
    start: float | None = None,
    end: float | None = None,
    fields: Iterable[str] | None = None,
) -> SystemExport:
    """Plan the export (404 for the job, 422 for a host or field it has not, pyarrow
    missing), then its bytes lazily."""
    if fmt == "parquet":
        require_pyarrow()
    if start is not None and end is not None and start > end:
        raise InvalidParameterError(f"start ({start}) is after end ({end})")
    with session_factory() as session:
        get_job(session, job_id)
        layouts = [
            _Layout(layout_id, name, list(series))
            for layout_id, name, series in session.execute(
                select(SystemLayout.id, SystemLayout.host, SystemLayout.series)
                .where(SystemLayout.job_id == job_id)
                .order_by(SystemLayout.id)
            )
        ]
        hosts = sorted({layout.host for layout in layouts})
        if host is not None:
            if host not in hosts:
                known = ", ".join(hosts[:20]) or "none yet"
                raise InvalidParameterError(f"host {host!r} has no system samples (hosts: {known})")
            layouts = [layout for layout in layouts if layout.host == host]
        newest = session.execute(
            select(func.max(SystemBlock.minute)).where(
                SystemBlock.layout_id.in_([layout.id for layout in layouts])
            )
        ).scalar_one_or_none()
    names = sorted({name for layout in layouts for name in layout.series})
    if fields is not None:
        wanted = frozenset(fields)
        unknown = sorted(
            name
            for name in wanted
            if name not in LEADING and not any(_matches(series, name) for series in names)
        )
        if unknown:
            raise InvalidParameterError(f"fields: no system series {', '.join(unknown)}")
        names = [name for name in names if any(_matches(name, field) for field in wanted)]
    columns: Columns = {**LEADING, **dict.fromkeys(names, "float")}
    # The snapshot: up to the end of the newest minute stored now.
    bound: float | None = None if newest is None else float((newest + 1) * BLOCK_SECONDS)
    if bound is not None and end is not None:
        bound = min(bound, end + 1e-6)
    chunks = _chunks(session_factory, layouts, names, start, bound)
    filename = f"{job_id}_system.{fmt}"
    if fmt == "jsonl":
        return SystemExport(jsonl_bytes(_records(chunk, names) for chunk in chunks), filename)
    return SystemExport(encode(fmt, columns, chunks), filename)


def _matches(name: str, field: str) -> bool:
    return name == field or name.startswith(field + ".")


def _chunks(
    session_factory: SessionFactory,
    layouts: list[_Layout],
    names: list[str],
    start: float | None,
    bound: float | None,
) -> Iterator[ColumnChunk]:
    """An hour of every layout's samples at a time, in (time, host) order."""
    if bound is None or not layouts:
        return
    with session_factory() as session:
        first = session.execute(
            select(func.min(SystemBlock.minute)).where(
                SystemBlock.layout_id.in_([layout.id for layout in layouts])
            )
        ).scalar_one()
    minute = first if start is None else max(first, minute_of(start))
    position = {name: index for index, name in enumerate(names)}
    while minute * BLOCK_SECONDS < bound:
        low = minute * BLOCK_SECONDS if start is None else max(start, minute * BLOCK_SECONDS)
        high = (minute + CHUNK_MINUTES) * BLOCK_SECONDS
        chunk = _read(session_factory, layouts, position, low, min(high, bound))
        if chunk.size:
            yield chunk
        minute += CHUNK_MINUTES


def _read(
    session_factory: SessionFactory,
    layouts: list[_Layout],
    position: dict[str, int],
    low: float,
    high: float,
) -> ColumnChunk:
    """The samples in [low, high) of every layout, as columns."""
    times, hosts, steps, rows = [], [], [], []
    with session_factory() as session:
        for layout in layouts:
            stamps, found_steps, values = read_range(
                session, layout.id, len(layout.series), low, high
            )
            keep = stamps < high
            if not keep.any():
                continue
            placed = np.full((int(keep.sum()), len(position)), np.nan)
            targets = [position[name] for name in layout.series if name in position]
            sources = [i for i, name in enumerate(layout.series) if name in position]
            placed[:, targets] = _seven_digits(values[keep][:, sources])
            times.append(stamps[keep])
            steps.append(found_steps[keep])
            hosts += [layout.host] * len(placed)
            rows.append(placed)
    if not times:
        return ColumnChunk(0, {})
    all_times = np.concatenate(times)
    order = np.lexsort((np.array(hosts, dtype=object).astype(str), all_times))
    matrix = np.concatenate(rows)[order]
    step_values = np.concatenate(steps)[order].tolist()
    columns: dict[str, list[Any]] = {
        "timestamp": all_times[order].tolist(),
        "host": [hosts[i] for i in order],
        "step": [None if step < 0 else step for step in step_values],
    }
    for name, index in position.items():
        column = matrix[:, index]
        cells = column.astype(object)
        cells[np.isnan(column)] = None  # not reported in that sample: an empty cell
        columns[name] = cells.tolist()
    return ColumnChunk(len(order), columns)


def _seven_digits(values: np.ndarray) -> np.ndarray:
    """float32 values as the doubles of their 7 significant digits (NaN kept)."""
    wide = values.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        magnitude = np.floor(np.log10(np.abs(wide)))
    scale = np.where(np.isfinite(magnitude), 10.0 ** (6 - magnitude), 1.0)
    return np.round(wide * scale) / scale


def _records(chunk: ColumnChunk, names: list[str]) -> list[dict[str, Any]]:
    """JSONL rows: the live message's shape (`timestamp`, `host`, `step`, `values`)."""
    records = []
    for index in range(chunk.size):
        values = {
            name: chunk.columns[name][index]
            for name in names
            if chunk.columns[name][index] is not None
        }
        records.append(
            {
                "timestamp": chunk.columns["timestamp"][index],
                "host": chunk.columns["host"][index],
                "step": chunk.columns["step"][index],
                "values": values,
            }
        )
    return records
