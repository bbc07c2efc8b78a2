"""Which hosts' system files a job has: `{job_id}_system.{host}.jsonl`, one per sysmon.

Unlike the job's other files their names are not known in advance, so they
are listed: from the listing a background round already makes of a local
directory (`note_listing`, no extra system call, trusted for `RESCAN`
seconds), else by the job's reader: a local directory at each sync (one
`scandir`), an SSH host at most every `RESCAN` seconds (an SFTP round trip).
A host file that appears is read from its first line at the next sync after
it is seen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Final

from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.system_file import (
    HOST_FILE_PREFIX,
    host_file_kind,
    host_word_of,
    job_of_host_file,
)

RESCAN: Final = 15.0  # seconds between listings of a job's directory for new host files
MAX_HOSTS: Final = 256  # host files per job: more is not a cluster, it is a flood


class HostFiles:
    """Per job, the kinds of its host files and when they were last listed."""

    def __init__(self) -> None:
        self._kinds: dict[str, tuple[LineFileKind, ...]] = {}
        # job id -> time.monotonic() of a listing worth trusting for RESCAN seconds
        self._listed: dict[str, float] = {}
        self._guard = threading.Lock()

    def kinds(self, job_id: str, reader: MetricsReader) -> tuple[LineFileKind, ...]:
        """The job's host-file kinds, listed again through `reader` when stale."""
        with self._guard:
            listed = self._listed.get(job_id)
            if listed is not None and time.monotonic() - listed < RESCAN:
                return self._kinds.get(job_id, ())
        try:
            names = reader.list_names(job_id + HOST_FILE_PREFIX)
        except MetricsSourceError:
            with self._guard:  # the sync itself reports an unreadable directory
                return self._kinds.get(job_id, ())
        return self.note(job_id, names, trusted=not reader.cheap_listing)

    def note(
        self, job_id: str, names: Iterable[str], *, trusted: bool = True
    ) -> tuple[LineFileKind, ...]:
        """The job's host files are `names` (of its directory), as listed just now;
        `trusted`: spare the next syncs a listing for RESCAN seconds."""
        words = sorted({word for name in names if (word := host_word_of(name, job_id))})
        with self._guard:
            current = self._kinds.get(job_id, ())
            if [kind.suffix for kind in current] != [_suffix(word) for word in words]:
                current = tuple(host_file_kind(word) for word in words[:MAX_HOSTS])
                self._kinds[job_id] = current
            if trusted:
                self._listed[job_id] = time.monotonic()
            return current

    def note_listing(self, job_ids: Iterable[str], listing: Mapping[str, object]) -> None:
        """One directory's listing: the host files of each of `job_ids` in it."""
        found: dict[str, list[str]] = {}
        for name in listing:
            if HOST_FILE_PREFIX in name and (job_id := job_of_host_file(name)) is not None:
                found.setdefault(job_id, []).append(name)
        for job_id in job_ids:
            self.note(job_id, found.get(job_id, ()))

    def suffixes(self, job_id: str) -> tuple[str, ...]:
        with self._guard:
            return tuple(kind.suffix for kind in self._kinds.get(job_id, ()))

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._kinds.pop(job_id, None)
            self._listed.pop(job_id, None)


def _suffix(word: str) -> str:
    return f"{HOST_FILE_PREFIX}{word}.jsonl"
