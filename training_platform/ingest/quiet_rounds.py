"""What background rounds need to stay cheap and quiet with many idle jobs.

- A job's file signature: one `os.stat` per line file it has (its metrics
  file, its samples file when it writes one), its status file's inode and,
  when it has a rollout directory, one listing of it (`rollout_signature`),
  compared with what was seen at the last sync to the end, so an unchanged
  job is skipped without touching the database.
- `FailureLog`: a job whose sync fails the same way every round logs its error
  once per change, not once (with a traceback) per round.
"""

from __future__ import annotations

import logging
import os
import threading

from training_platform.errors import MetricsSourceError
from training_platform.ingest.readers import STATUS_SUFFIX
from training_platform.ingest.rollout_lines import step_of_name

# Each line file's size, mtime and inode (None when it is missing), then the
# status file's inode. The status file is replaced atomically (a new file
# renamed over the old one), so a new status means a new inode, which a
# directory listing gives without a stat.
FileSignature = tuple[int | None, ...]
_NO_ROLLOUTS: FileSignature = (None, None, None, None, None)


def file_signature(
    directory: str,
    names: tuple[str, ...],
    listing: dict[str, int] | None,
    rollout_dir: str | None,
    job_id: str,
) -> FileSignature:
    """The job's files as they are now: one `os.stat` per file it is read from
    (`names`, in `directory`) that exists, its status file's inode and
    `rollout_dir`'s `rollout_signature`.

    `listing` (`list_directory`, one per directory and round) spares the stat
    of an optional file the job never wrote and gives the status file's
    inode; without it, that inode costs one `lstat`.
    """
    signature: list[int | None] = []
    for name in names:
        if listing is not None and name not in listing:
            signature += (None, None, None)
            continue
        try:
            stat = os.stat(os.path.join(directory, name))
        except OSError:
            signature += (None, None, None)
        else:
            signature += (stat.st_size, stat.st_mtime_ns, stat.st_ino)
    status = job_id + STATUS_SUFFIX
    signature.append(listing.get(status) if listing is not None else _inode(directory, status))
    signature += _NO_ROLLOUTS if rollout_dir is None else rollout_signature(rollout_dir)
    return tuple(signature)


def rollout_signature(directory: str) -> FileSignature:
    """A rollout directory (`ingest/rollouts.py`) as it is now: one listing, two stats.

    Its modification time and a digest of its (name, inode) entries change
    when a step file appears, goes or is replaced by rename; the newest step
    file's size and mtime change while it is written (or rewritten in place).
    An older step file rewritten in place goes unnoticed here until the next
    change of the job's files: the sync that follows reads it.
    """
    try:
        mtime = os.stat(directory).st_mtime_ns
        with os.scandir(directory) as scan:
            entries = [(entry.name, entry.inode()) for entry in scan]
    except OSError:
        return _NO_ROLLOUTS  # as for no directory at all: the same signature
    steps = [(step, name) for name, _ in entries if (step := step_of_name(name)) is not None]
    size = newest_mtime = None
    if steps:
        try:
            newest = os.stat(os.path.join(directory, max(steps)[1]), follow_symlinks=False)
        except OSError:
            pass
        else:
            size, newest_mtime = newest.st_size, newest.st_mtime_ns
    return (mtime, len(entries), hash(frozenset(entries)), size, newest_mtime)


def _inode(directory: str, name: str) -> int | None:
    """A file's inode as a directory listing sees it (an `lstat`)."""
    try:
        return os.lstat(os.path.join(directory, name)).st_ino
    except OSError:
        return None


def list_directory(directory: str) -> dict[str, int]:
    """Name -> inode of every entry of `directory`, from one listing (no stat)."""
    try:
        with os.scandir(directory) as entries:
            return {entry.name: entry.inode() for entry in entries}
    except OSError:
        return {}  # a vanished directory: each job's sync reports it


class FailureLog:
    """The last error of each job's background sync, to log each error once."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._errors: dict[str, str] = {}
        self._guard = threading.Lock()

    def failed(self, job_id: str, exc: Exception) -> None:
        """Log `exc` unless the job's last sync failed the same way (then debug only).

        An unreadable source is a warning; anything else an error with its
        traceback, once.
        """
        error = f"{type(exc).__name__}: {exc}"
        with self._guard:
            repeated = self._errors.get(job_id) == error
            self._errors[job_id] = error
        if repeated:
            self._logger.debug("sync of %s still failing: %s", job_id, exc)
        elif isinstance(exc, MetricsSourceError):
            self._logger.warning("sync of %s failed: %s", job_id, exc)
        else:
            self._logger.error("sync of %s failed", job_id, exc_info=exc)

    def succeeded(self, job_id: str) -> None:
        with self._guard:
            recovered = self._errors.pop(job_id, None) is not None
        if recovered:
            self._logger.info("sync of %s works again", job_id)

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._errors.pop(job_id, None)
