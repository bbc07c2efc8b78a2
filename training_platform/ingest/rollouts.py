"""verl's rollout directory into `samples`, one step file at a time, exactly once.

A step file (`{step}.jsonl`, `ingest/rollout_lines.py`) is written whole, so
it is ingested whole: its samples *replace* the step's, in one transaction
with the file's own `sync_state` row (kind ``rollout:<step>``: `offset` holds
the file's size, `fingerprint` ``<mtime_ns>:<sha256 of the content>``, or
``<mtime_ns>:skipped`` for a file that was not read). The same three rules
as the persister's (`ingest/persister.py`) make it exactly once:

1. the file is read outside any transaction;
2. the transaction's first statement is a compare-and-swap on that row
   (UPDATE ... WHERE it still holds what this sync saw; a file never seen
   has an empty row made first): a concurrent sync that committed first
   makes it touch no row, and this sync drops its read;
3. then the step's samples are deleted and the file's inserted, and both
   commit with the row, or neither does (a crash in between loses nothing
   and duplicates nothing: the next sync reads the file again).

A file whose size and modification time are those stored costs its listing
entry, nothing more. One whose content hash is unchanged (touched, copied)
only has its row updated. One still being written (`rollout_files.py`) is
left for the next sync, never half-ingested. One over the size limit, or a
symlink, FIFO or directory in place of a step file, is skipped: its row
records the skip, so it is reported once (`jobs.last_sync_error`), not at
every sync, and read again only when it changes. Malformed lines are counted
in the row (`lines_malformed`, `lines_oversized`) and skipped, keeping the
indexes of the others. A sample the database refuses is isolated as the
persister does (`ingest/line_isolation.py`) and counted as malformed.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from training_platform.ingest.line_isolation import (
    describe,
    find_unstorable,
    is_data_error,
    probe_error,
)
from training_platform.ingest.persister import (
    CommittedBatch,
    _sync_error_after,
    ensure_sync_state,
)
from training_platform.ingest.rollout_files import RolloutEntry, RolloutSource
from training_platform.ingest.rollout_lines import (
    ROLLOUT_KIND_PREFIX,
    decode_rollout_file,
    state_kind,
)
from training_platform.ingest.samples_file import SAMPLES, store_samples
from training_platform.store.leases import fence_clause
from training_platform.store.models import Job, Sample, SyncState

_MAX_ERRORS: Final = 20
# A step file is read whole: one over this many sync batches
# (PLATFORM_SYNC_BATCH_BYTES, 64 MiB by default) is skipped, never read.
FILE_BATCHES: Final = 8
_SKIPPED: Final = "skipped"


@dataclass
class RolloutResult:
    """What one `sync_rollouts` call did."""

    files: int = 0  # step files whose row was committed (ingested, replaced, skipped, touched)
    samples: int = 0  # samples stored
    malformed: int = 0
    oversized: int = 0
    pending: list[int] = field(default_factory=list)  # steps left: still being written
    newest: int | None = None  # the highest step listed
    done: bool = True  # False: `stop` said stop before every changed file was seen to
    errors: list[str] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """Whether the directory's quiet-round signature (which looks at the newest
        step file only) would notice whatever this sync left to do."""
        return self.done and all(step == self.newest for step in self.pending)

    def note(self, errors: list[str]) -> None:
        self.errors.extend(errors[: max(0, _MAX_ERRORS - len(self.errors))])


@dataclass(frozen=True)
class _State:
    size: int
    fingerprint: str | None

    def matches(self, size: int, mtime_ns: int) -> bool:
        return self.size == size and (self.fingerprint or "").partition(":")[0] == str(mtime_ns)


@dataclass(frozen=True)
class _Version:
    """The file as this sync read it: what its row will hold."""

    step: int
    size: int
    fingerprint: str
    malformed: int = 0
    oversized: int = 0


def sync_rollouts(
    factory: sessionmaker[Session],
    job_id: str,
    source: RolloutSource,
    *,
    max_file_bytes: int,
    max_line_bytes: int,
    on_commit: Callable[[CommittedBatch], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> RolloutResult:
    """Ingest every new or changed step file of `source`, in step order.

    `on_commit` receives each committed file's samples as a ``samples``
    batch (what the live side and the sample detectors hear). `stop`, asked
    between files once one was handled, ends the sync early (``done``
    False). Raises `MetricsSourceError` when the directory cannot be read.
    """
    result = RolloutResult()
    with source:
        entries = source.list()
        if not entries:
            return result
        result.newest = entries[-1].step
        states = _load_states(factory, job_id)
        handled = False
        for entry in entries:
            state = states.get(entry.step)
            if state is not None and state.matches(entry.size, entry.mtime_ns):
                continue
            if handled and stop is not None and stop():
                result.done = False
                break
            handled = True
            _sync_file(factory, job_id, source, entry, state, result, max_file_bytes,
                       max_line_bytes, on_commit)  # fmt: skip
    return result


def _digest_of(state: _State) -> str:
    return (state.fingerprint or "").partition(":")[2]


def _load_states(factory: sessionmaker[Session], job_id: str) -> dict[int, _State]:
    """Every step file's row of the job, in one statement (autocommit: the CAS checks)."""
    with factory() as session:
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        rows = session.execute(
            select(SyncState.kind, SyncState.offset, SyncState.fingerprint).where(
                SyncState.job_id == job_id, SyncState.kind.startswith(ROLLOUT_KIND_PREFIX)
            )
        )
        states = {}
        for kind, offset, fingerprint in rows:
            step = kind.removeprefix(ROLLOUT_KIND_PREFIX)
            if step.isdigit():
                states[int(step)] = _State(offset, fingerprint)
        return states


def _sync_file(
    factory: sessionmaker[Session],
    job_id: str,
    source: RolloutSource,
    entry: RolloutEntry,
    state: _State | None,
    result: RolloutResult,
    max_file_bytes: int,
    max_line_bytes: int,
    on_commit: Callable[[CommittedBatch], None] | None,
) -> None:
    read = source.read(entry, max_file_bytes)
    step = entry.step
    if read.outcome == "changing":
        result.pending.append(step)
        return
    if state is not None and state.matches(read.size, read.mtime_ns):
        return  # the listing was older than the file: it is what the row says
    if read.outcome != "ok":
        version = _Version(step, read.size, f"{read.mtime_ns}:{_SKIPPED}")
        problem = f"rollout step {step}: {source.where}/{entry.name} {read.reason}; skipped"
        # The job's error names every file this sync skipped, not only the last.
        committed = _commit(factory, job_id, state, version, None, [*result.errors, problem])
        if committed is not None:
            result.files += 1
            result.note([problem])
        return
    digest = hashlib.sha256(read.data).hexdigest()
    version = _Version(step, read.size, f"{read.mtime_ns}:{digest}")
    if state is not None and state.size == read.size and _digest_of(state) == digest:
        # Touched or copied, not changed: only the row learns the new time.
        if _commit(factory, job_id, state, version, None, []) is not None:
            result.files += 1
        return
    samples, malformed, oversized, errors = decode_rollout_file(
        read.data, step, max_line_bytes=max_line_bytes, timestamp=read.mtime_ns / 1e9
    )
    version = _Version(step, read.size, version.fingerprint, malformed, oversized)
    problems = [*result.errors, *errors]
    stored = _commit_isolating(factory, job_id, state, version, samples, problems)
    if stored is None:
        return  # another sync committed this file first: it announces it
    kept, refused = stored
    result.files += 1
    result.samples += len(kept)
    result.malformed += malformed + len(refused)
    result.oversized += oversized
    result.note([*errors, *refused])
    if on_commit is not None and kept:
        on_commit(CommittedBatch(SAMPLES.name, kept, []))


def _commit_isolating(
    factory: sessionmaker[Session],
    job_id: str,
    state: _State | None,
    version: _Version,
    samples: list[dict[str, Any]],
    errors: list[str],
) -> tuple[list[dict[str, Any]], list[str]] | None:
    """`_commit` of the samples; a sample the database refuses is left out (and said)."""
    try:
        if _commit(factory, job_id, state, version, samples, errors) is None:
            return None
        return samples, []
    except Exception as error:
        if not is_data_error(error):
            raise

    def fails(subset: Any) -> BaseException | None:
        session = factory()
        try:
            return probe_error(lambda: store_samples(session, job_id, list(subset), 0.0, []))
        finally:
            session.rollback()
            session.close()

    bad = find_unstorable(samples, fails)
    refused = [
        f"rollout step {version.step} line {samples[index]['index']}: "
        f"not stored ({describe(error)}), skipped"
        for index, error in sorted(bad.items())
    ]
    kept = [sample for index, sample in enumerate(samples) if index not in bad]
    if _commit(factory, job_id, state, version, kept, [*errors, *refused], len(refused)) is None:
        return None
    return kept, refused


def _commit(
    factory: sessionmaker[Session],
    job_id: str,
    state: _State | None,
    version: _Version,
    samples: list[dict[str, Any]] | None,
    problems: list[str],
    refused: int = 0,
) -> int | None:
    """One transaction: the file's row (compare-and-swap), then the step's samples
    replaced by `samples` (None: left as they are). The samples stored, or None
    when the compare-and-swap lost (nothing was written)."""
    now = time.time()
    notes: list[str] = []
    values: dict[str, Any] = {
        "offset": version.size,
        "fingerprint": version.fingerprint,
        "discarding": False,
        "lines_malformed": version.malformed + refused,
        "lines_oversized": version.oversized,
        "updated_at": now,
    }
    if samples is not None:
        values["records_ingested"] = len(samples)
    kind = state_kind(version.step)
    if state is None:
        # A file never seen gets its row first (its own transaction, as the
        # persister's do), so the CAS below is always an UPDATE, whose row
        # count every driver reports. A crash right after leaves an empty row:
        # it matches no file, so the file is read again.
        with factory.begin() as session:
            ensure_sync_state(session, job_id, kind)
        state = _State(0, None)
    elif samples is not None:
        values["resets"] = SyncState.resets + 1  # a new version of the file
    seen = (
        SyncState.fingerprint.is_(None)
        if state.fingerprint is None
        else SyncState.fingerprint == state.fingerprint
    )
    session = factory()
    try:
        # The CAS: must stay the first statement of the transaction (persister.py).
        advanced = session.execute(
            update(SyncState)
            .where(SyncState.job_id == job_id, SyncState.kind == kind)
            .where(SyncState.offset == state.size, seen, fence_clause(session, job_id))
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if cast(CursorResult[Any], advanced).rowcount != 1:
            session.rollback()
            return None
        if samples is not None:
            session.execute(
                delete(Sample)
                .where(Sample.job_id == job_id, Sample.step == version.step)
                .execution_options(synchronize_session=False)
            )
            if samples:
                store_samples(session, job_id, samples, now, notes)
        session.execute(
            update(Job)
            .where(Job.job_id == job_id)
            .values(last_synced_at=now, last_sync_error=_sync_error_after([*problems, *notes]))
            .execution_options(synchronize_session=False)
        )
        session.commit()
        return 0 if samples is None else len(samples)
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
