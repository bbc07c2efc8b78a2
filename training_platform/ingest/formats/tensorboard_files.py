"""A TensorBoard run directory as a job: each `events.out.tfevents.*` file one kind.

A run's scalars may be spread over several event files (one per writer
session: a restarted run, a second `SummaryWriter`), each appended to while
the run goes on. Each file is its own kind of the job, named
``metrics.<file name>``: its own `sync_state` row (offset and fingerprint),
read by the same exactly-once persister as the platform's own files, its
batches announced as the job's metrics. The files are read in name order
(TensorBoard names them by creation time), so for a step logged twice the
newer file's value wins.

A step's tags arrive as separate events, often split across reads (the
writer flushes when its queue fills, not at step ends), so they are stored
merged into the step's stored record (`merged_steps.py`).
"""

from __future__ import annotations

from typing import Any, Final

from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import store_merged
from training_platform.ingest.formats.tensorboard import decode_events, records_of
from training_platform.ingest.formats.tfrecord import read_records
from training_platform.ingest.line_scanner import (
    FINGERPRINT_BYTES,
    MAX_ERRORS,
    ReadAt,
    ReadBatch,
    ReadPosition,
    fingerprint,
    same_file,
)
from training_platform.ingest.metrics_file import METRICS

EVENT_FILE_MARK: Final = ".tfevents."
"""In every event file's name: `events.out.tfevents.<time>.<host>[.<pid>.<n>][suffix]`."""
KIND_PREFIX: Final = "metrics."


def is_event_file(name: str) -> bool:
    return name.startswith("events.out") and EVENT_FILE_MARK in name


def scan_events(read_at: ReadAt, size: int, position: ReadPosition, max_bytes: int) -> ReadBatch:
    """The scalars of the whole event records after `position`, one record per step.

    A file shorter than the position or whose first bytes changed (replaced)
    is read again from byte 0 (``reset``); a half-written last record is held
    back; a record with a bad checksum or that is not an event is skipped and
    counted as malformed, with its reason.
    """
    head = read_at(0, min(size, FINGERPRINT_BYTES)) if size else b""
    offset, reset = position.offset, False
    stale = position.fingerprint is not None and not same_file(position.fingerprint, head)
    if stale or offset > size:
        offset, reset = 0, True
    framed = read_records(read_at, size, offset, max_bytes)
    decoded = decode_events(framed.records)
    problems = [*framed.corrupt, *decoded.errors]
    return ReadBatch(
        records=records_of(decoded.scalars),
        position=ReadPosition(framed.offset, fingerprint(head)),
        malformed=len(problems),
        reset=reset,
        at_eof=framed.at_eof,
        file_size=size,
        errors=problems[:MAX_ERRORS],
        about=None if decoded.config is None else {"config": decoded.config},
    )


def event_file_kind(name: str) -> LineFileKind:
    """The kind of the event file `name` (a path relative to the run directory)."""
    return LineFileKind(
        name=KIND_PREFIX + name,
        suffix="",
        decode=_not_lines,
        store=store_merged,
        key=METRICS.key,
        file=name,
        scan=scan_events,
    )


def _not_lines(line: bytes) -> dict[str, Any]:
    raise TypeError("event files are read by scan_events, not by lines")
