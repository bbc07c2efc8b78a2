"""What background rounds need to stay cheap and quiet with many idle jobs.

- A job's file signature: one `os.stat` of its metrics file and its status
  file's inode, compared with what was seen at the last sync to the end, so an
  unchanged job is skipped without touching the database.
- `FailureLog`: a job whose sync fails the same way every round logs its error
  once per change, not once (with a traceback) per round.
"""

from __future__ import annotations

import logging
import os
import threading

from training_platform.errors import MetricsSourceError
from training_platform.ingest.readers import METRICS_SUFFIX, STATUS_SUFFIX

# Each line file's size, mtime and inode (None when it is missing), then the
# status file's inode. The status file is replaced atomically (a new file
# renamed over the old one), so a new status means a new inode, which a
# directory listing gives without a stat.
FileSignature = tuple[int | None, ...]


def file_signature(
    directory: str,
    job_id: str,
    status_inode: int | None,
    suffixes: tuple[str, ...] = (METRICS_SUFFIX,),
) -> FileSignature:
    """One `os.stat` per line file (`suffixes`: the job's kinds); the status
    file's inode comes from the caller."""
    signature: list[int | None] = []
    for suffix in suffixes:
        try:
            stat = os.stat(os.path.join(directory, job_id + suffix))
        except OSError:
            signature += (None, None, None)
        else:
            signature += (stat.st_size, stat.st_mtime_ns, stat.st_ino)
    signature.append(status_inode)
    return tuple(signature)


def status_inode(directory: str, job_id: str) -> int | None:
    """The inode of one job's status file (an `lstat`, as a directory listing sees it)."""
    try:
        return os.lstat(os.path.join(directory, job_id + STATUS_SUFFIX)).st_ino
    except OSError:
        return None


def status_inodes(directory: str) -> dict[str, int]:
    """Status file name -> inode for a whole directory, from one listing (no stat)."""
    try:
        with os.scandir(directory) as entries:
            return {e.name: e.inode() for e in entries if e.name.endswith(STATUS_SUFFIX)}
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
