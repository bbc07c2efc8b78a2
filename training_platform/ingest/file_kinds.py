"""Kinds of append-only JSONL files a job writes, each ingested exactly once.

A job already writes `{job_id}_metrics.jsonl` and will write more line files
(generated samples, docs/contract.md). Each is one `LineFileKind`: how its
file is named, how a line becomes a record, which record replaces which, and
how records become rows. Everything else is shared, whatever the kind:

- the readers (`ingest/readers.py`) read only the complete lines after a
  committed position, local or over SSH, and notice a truncated or replaced
  file (`ingest/line_scanner.py`);
- the persister (`ingest/persister.py`) commits each batch's rows together
  with the new position in `sync_state`, one row per (job, kind), behind a
  compare-and-swap, so a crash or a concurrent sync never loses or
  duplicates a line, and it isolates the record a database refuses;
- the sync service syncs every kind of a job under the job's lock and hands
  each committed batch to its listener, tagged with the kind.

A new kind of file is one more instance of `LineFileKind` given to the sync
service (`services.py`), with its table and migration.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from training_platform.ingest.line_scanner import Decode, ReadAt, ReadBatch, ReadPosition


@dataclass
class StoredRows:
    """What a kind's `store` wrote in the batch's transaction."""

    written: int
    # Anomaly rows written with the records (as stored), for the live stream.
    anomalies: list[dict[str, Any]] = field(default_factory=list)


# (session, job_id, records, received_at, notes) -> what was written; never
# called without records. Only adds/flushes (the persister owns the
# transaction); `notes` gets "step N: <what was changed to make it storable>"
# for each value stored differently.
StoreRecords = Callable[[Session, str, list[dict[str, Any]], float, list[str]], StoredRows]

# (read_at, size, position, max_bytes) -> what a file that is not lines holds
# after `position` (TensorBoard's framed records, ingest/formats/tensorboard_files.py),
# with the same promises as the line scanner: whole units only, a replaced or
# truncated file read again from byte 0, a bad unit counted and skipped.
ScanFile = Callable[[ReadAt, int, ReadPosition, int], ReadBatch]

# (position, max_bytes) -> what a database holds after `position` (a row cursor
# in `offset`: Trackio's SQLite, an MLflow tracking database), the same promises.
ReadDatabase = Callable[[ReadPosition, int], ReadBatch]


@dataclass(frozen=True)
class LineFileKind:
    name: str  # the `sync_state.kind` of its offset row, and how messages name it
    suffix: str  # `{job_id}{suffix}` is the file, next to the metrics file
    decode: Decode  # one line -> its record; raises on a bad line (counted, skipped)
    store: StoreRecords
    # Within a batch, a later record with the same key replaces an earlier one
    # (e.g. the step for metrics): only the newest is stored and announced.
    key: Callable[[dict[str, Any]], Hashable]
    # A missing file is an error (the metrics file: the job is its file), or
    # only "nothing written yet" (a kind a run may or may not write).
    required: bool = False
    # Its file's name in the job's directory when it is not `{job_id}{suffix}`
    # (another tool's files are named by that tool).
    file: str | None = None
    # How its file is read when it is not lines (None: the line scanner, `decode`).
    scan: ScanFile | None = None
    # How its rows are read when they are in a database, queried where it lies.
    query: ReadDatabase | None = None

    @property
    def family(self) -> str:
        """What its batches are announced and listened to as: the name before a dot
        (``system.<host>``, one host's file of system samples, is ``system``)."""
        return self.name.partition(".")[0]

    def file_name(self, job_id: str) -> str:
        return self.file if self.file is not None else f"{job_id}{self.suffix}"
