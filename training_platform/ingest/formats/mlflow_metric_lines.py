"""An MLflow file store's metric files as kinds, wherever the store lies.

Each ``metrics/<key>`` file of a run holds one line ``<timestamp ms> <value>
<step>`` per logged value, appended in place: a line file, read by the line
scanner's rules (whole lines only, a half-written last one held back, a bad
line counted and skipped, a truncated or replaced file read again from byte 0).
Each key is its own kind, ``metrics.<key>``, with its own `sync_state` row.

Shared by the store on the server's machine (`mlflow_files.py`), the one on an
SSH host (`mlflow_sftp.py`) and the tracking server's reader (`records_of`,
`key_kind`, `failing_kind`): only how a file's bytes are reached differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Final

from training_platform.callbacks.wire.records import build_record
from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import merged_metrics_kind
from training_platform.ingest.line_scanner import (
    MAX_ERRORS,
    ReadAt,
    ReadBatch,
    ReadPosition,
    scan_lines,
)

MAX_LINE_BYTES: Final = 4096  # a metric line is ~40 bytes (~160 with a dataset)
KIND_NAME_LIMIT: Final = 255  # `sync_state.kind`

# (path of a metric file, its key, position, max_bytes) -> its values after `position`.
ReadMetricFile = Callable[[str, str, ReadPosition, int], ReadBatch]


def scan_metric_file(
    read_at: ReadAt, size: int, position: ReadPosition, max_bytes: int, *, key: str
) -> ReadBatch:
    """The values of one metric file after `position`, one record per step."""
    batch = scan_lines(
        read_at, size, position, max_line_bytes=MAX_LINE_BYTES, max_bytes=max_bytes,
        decode=_metric_line,
    )  # fmt: skip
    batch.records = records_of(key, batch.records, batch.errors)
    return batch


def _metric_line(line: bytes) -> dict[str, Any]:
    """``<timestamp ms> <value> <step>`` (older stores: no step; newer: a dataset after)."""
    parts = line.decode("ascii").split()
    if len(parts) not in (2, 3, 5):
        raise ValueError(f"{len(parts)} fields, expected 2, 3 or 5")
    step = int(parts[2]) if len(parts) > 2 else 0
    if step < 0:
        raise ValueError(f"negative step {step}")
    return {"step": step, "timestamp": int(parts[0]) / 1000, "value": float(parts[1])}


def records_of(key: str, values: list[dict[str, Any]], errors: list[str]) -> list[dict[str, Any]]:
    """One record per step (the step's last value of `key`), the trainers' key mapping;
    a step the record rules refuse is noted in `errors` and left out."""
    steps: dict[int, tuple[float, float]] = {}
    for logged in values:
        earlier = steps.get(logged["step"])
        when = logged["timestamp"] if earlier is None else max(earlier[1], logged["timestamp"])
        steps[logged["step"]] = (logged["value"], when)
    records = []
    for step, (number, when) in steps.items():
        try:
            records.append(build_record(step, {key: number}, timestamp=when))
        except ValueError as exc:
            if len(errors) < MAX_ERRORS:
                errors.append(f"{key} step {step}: {exc}"[:200])
    return records


def failing_kind(message: str) -> LineFileKind:
    """The job's metrics kind when its run cannot be reached: its read raises
    `message`, so the sync says it on the job (`last_sync_error`)."""

    def fail(position: ReadPosition, max_bytes: int) -> ReadBatch:
        raise MetricsSourceError(message)

    return merged_metrics_kind(query=fail)


def key_kind(key: str, read: Callable[[ReadPosition, int], ReadBatch]) -> LineFileKind:
    """The kind of one metric key, `metrics.<key>`, with its own `sync_state` row."""
    name = f"metrics.{key}"
    if len(name) > KIND_NAME_LIMIT:  # MLflow allows 250-character keys
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]  # stable across restarts
        name = f"{name[: KIND_NAME_LIMIT - 17]}#{digest}"
    return replace(merged_metrics_kind(file=key, query=read), name=name)


def metric_kinds(
    metrics_dir: str, keys: list[str], read: ReadMetricFile, about: Callable[[], dict[str, Any]]
) -> tuple[LineFileKind, ...]:
    """One kind per metric key, in key order. `about` (params, tags, name: more small
    reads) is read at most once per listing, and only by a read that found records."""
    known: dict[str, Any] = {}

    def about_once() -> dict[str, Any]:
        if not known:
            known.update(about())
        return dict(known)

    def read_key(position: ReadPosition, max_bytes: int, *, key: str) -> ReadBatch:
        # Read after the file's own read, never inside it: an SFTP session serves one
        # call at a time, so `about` must not run while the file's read holds it.
        batch = read(f"{metrics_dir}/{key}", key, position, max_bytes)
        if batch.records:
            batch.about = about_once()
        return batch

    return tuple(key_kind(key, partial(read_key, key=key)) for key in keys)
