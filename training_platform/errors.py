"""Domain errors, shared by the trainer side and the platform.

Nothing here knows about HTTP: `training_platform.api.errors` maps these classes
onto status codes and WebSocket close codes in one table.
"""

from __future__ import annotations


class PlatformError(Exception):
    """Base of every error the platform raises on purpose."""


class InvalidJobIdError(PlatformError, ValueError):
    """A job id that breaks the pattern of docs/contract.md §3 (it becomes part of file paths)."""


class RecordError(PlatformError, ValueError):
    """A metrics line that is valid JSON but not a valid record (e.g. no `step`)."""


class InvalidParameterError(PlatformError, ValueError):
    """A request parameter that is well-typed but makes no sense (e.g. start after end)."""


class JobNotFoundError(PlatformError, LookupError):
    """No job with that id is known (neither discovered nor registered)."""


class ArtifactNotFoundError(PlatformError, LookupError):
    """No such artifact file for the job (or one we refuse to serve, like a symlink)."""


class JobConflictError(PlatformError):
    """A job with that id exists already with a different source."""


class MetricsDirError(PlatformError, OSError):
    """The metrics directory (docs/contract.md §1) does not exist and cannot be created:
    no permission, a file in its place, a read-only file system, ..."""


class LogFileError(PlatformError, OSError):
    """`PLATFORM_LOG_FILE` cannot be written: its directory cannot be created, no
    permission, a directory in its place, ..."""


class InvalidSourceError(PlatformError, ValueError):
    """A job source that cannot be used: directory missing, key outside the key dir, ..."""


class MetricsSourceError(PlatformError):
    """The job's files cannot be read right now (missing file, SSH host down, ...)."""


class SourceRefusedError(MetricsSourceError):
    """A job's file that the platform refuses to read, by policy: a symlink while
    PLATFORM_FOLLOW_SYMLINKS is off, a FIFO or a device. Permanent until the file
    or the setting changes, so trying again does not help (HTTP: 409, not 503)."""


class HostKeyError(MetricsSourceError):
    """The SSH host presented an unknown or changed host key; we refuse to talk to it."""


class StorageError(PlatformError):
    """The database cannot store (or answer) right now: its disk is full, it cannot be
    reached, ... Nothing committed is lost and trying again later may work (HTTP: 503)."""


class MissingExtraError(PlatformError):
    """What was asked needs an optional package that is not installed (pyarrow for
    Parquet, ...); the message names the extra to install (HTTP: 501)."""


class LeaseLostError(PlatformError):
    """This process no longer holds the job's ingest lease (another process took it
    over, or it expired while this one was paused): it must stop writing the job."""
