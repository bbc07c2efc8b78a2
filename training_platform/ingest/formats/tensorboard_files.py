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

from typing import Final

from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import merged_metrics_kind
from training_platform.ingest.line_scanner import (
    MAX_ERRORS,
    ReadAt,
    ReadBatch,
    ReadPosition,
    fingerprint,
    start_of,
)

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
    try:  # the `formats` extra: the server runs without it, TensorBoard runs need it
        from training_platform.ingest.formats.tensorboard import decode_events, records_of
        from training_platform.ingest.formats.tfrecord import read_records
    except ImportError as exc:
        raise MetricsSourceError(
            f"reading TensorBoard runs needs the 'formats' extra ({exc}): "
            "pip install 'training-platform[server,formats]'"
        ) from None
    head, offset, reset = start_of(read_at, size, position)
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
    return merged_metrics_kind(file=name, scan=scan_events)
