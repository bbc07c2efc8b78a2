"""One run of an MLflow file store (`file:///.../mlruns`) as a job's metrics.

MLflow's file store keeps a run in ``<root>/<experiment id>/<run id>/``:
``meta.yaml`` (its name and status), ``params/<key>`` and ``tags/<key>`` (one
small file each, the value as text) and ``metrics/<key>`` (a key with ``/`` is
nested directories), one line ``<timestamp ms> <value> <step>`` appended per
logged value. Those metric files ARE line files, appended in place, so each is
read like a TensorBoard event file (`tensorboard_files.py`): its own kind,
``metrics.<key>``, with its own byte offset and fingerprint in `sync_state`
(`mlflow_metric_lines.py`). The kinds are listed afresh at each sync, so a key
logged for the first time is read from then on; records of one step from
several keys are merged into the stored step (`merged_steps.py`).

Why the job is polled (like a tracking database) rather than watched: the files
that change lie in subdirectories of the run directory, which the file watcher
and the quiet-round signatures (one `stat` per top-level name) do not see.
Polling costs one `stat`-sized read per metric file per poll while the run runs
and stops when it has finished.

The layout is read here once, through `StoreFiles`: this machine's file system
(`LocalFiles`, a job of source "tracking") or an SSH host's, over SFTP
(`mlflow_sftp.py`, a job of source "ssh"). Symlinks are never followed inside the
store (MLflow writes none), listings are bounded (`MAX_EXPERIMENTS`, `MAX_FILES`,
`MAX_DEPTH`), and the run id is checked before it becomes part of a path.
Params, tags and the run name are read once per sync that stored records (the
run's `about`); the status comes from ``meta.yaml``.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
import threading
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol
from urllib.parse import unquote, urlsplit

from training_platform.errors import InvalidSourceError, MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.mlflow_metric_lines import failing_kind as failing_kind
from training_platform.ingest.formats.mlflow_metric_lines import key_kind as key_kind
from training_platform.ingest.formats.mlflow_metric_lines import metric_kinds, scan_metric_file
from training_platform.ingest.formats.mlflow_metric_lines import records_of as records_of
from training_platform.ingest.formats.mlflow_store import STATUSES, SYSTEM_TAGS
from training_platform.ingest.line_scanner import ReadBatch, ReadPosition

# `failing_kind`, `key_kind` and `records_of` ("as": exported) are still imported from
# here by the tracking server's reader (`mlflow_rest.py`).

# MLflow's own rule for a run id (`_validate_run_id`): no path can hide in one.
RUN_ID: Final = re.compile(r"[A-Za-z0-9][\w\-]{0,255}")
META: Final = "meta.yaml"
MAX_EXPERIMENTS: Final = 10_000  # directories of the store root looked at to find a run
MAX_FILES: Final = 256  # metric files per run (as TensorBoard's event files), params, tags
MAX_DEPTH: Final = 8  # of a key's nested directories
SMALL_FILE_BYTES: Final = 64 * 1024  # a param, a tag, meta.yaml: read whole up to this
# meta.yaml's `status`: MLflow's RunStatus numbers.
RUN_STATUSES: Final = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}

_runs: dict[tuple[str, str], str] = {}  # (store root as `where` says it, run id) -> its directory
_runs_guard = threading.Lock()


class Entry(NamedTuple):
    name: str
    is_dir: bool  # a directory itself, not a symlink to one
    is_file: bool  # a regular file itself, not a symlink to one


class StoreFiles(Protocol):
    """How a store's files are reached (paths are "/"-joined strings). Never through
    a symlink at the last component; a listing shows a symlink as neither."""

    def entries(self, directory: str) -> list[Entry] | None:
        """What `directory` holds; None when it does not exist (or is not a directory).
        `MetricsSourceError` when it cannot be listed."""

    def is_file(self, path: str) -> bool:
        """Whether `path` is a regular file (False: missing, unreadable, anything else)."""

    def read_small(self, path: str, limit: int) -> bytes | None:
        """Up to `limit` bytes of the regular file `path` (None: missing, not one)."""

    def where(self, path: str) -> str:
        """`path` as messages name it."""


class LocalFiles:
    """The file system of the server's machine."""

    def entries(self, directory: str) -> list[Entry] | None:
        try:
            with os.scandir(directory) as found:
                return [Entry(entry.name, entry.is_dir(follow_symlinks=False),
                              entry.is_file(follow_symlinks=False)) for entry in found]  # fmt: skip
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise MetricsSourceError(f"cannot list {directory}: {exc.strerror or exc}") from None

    def is_file(self, path: str) -> bool:
        try:
            return stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            return False

    def read_small(self, path: str, limit: int) -> bytes | None:
        try:  # O_NONBLOCK: a FIFO swapped in is not waited on (and not read: fstat)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except OSError:
            return None
        finally:
            os.close(fd)

    def where(self, path: str) -> str:
        return path


LOCAL: Final = LocalFiles()


def is_file_store(uri: str) -> bool:
    return uri.startswith(("file:", "/"))


def store_root(uri: str) -> str:
    """The directory of a file store URI (`file:///abs/path` or an absolute path)."""
    if not uri.startswith("file:"):
        return uri
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise InvalidSourceError(
            f"tracking_uri {uri!r}: a file store is file:///<absolute path> on this machine"
        )
    return unquote(parts.path)


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        raise InvalidSourceError(f"run_id {run_id!r} is not an MLflow run id")
    return run_id


def run_directory(files: StoreFiles, root: str, run_id: str) -> str:
    """`<root>/<experiment>/<run_id>`, the one holding a meta.yaml (found once, kept
    while it is there); `MetricsSourceError` when no experiment holds the run."""
    key = (files.where(root), run_id)
    with _runs_guard:
        found = _runs.get(key)
    if found is not None and files.is_file(posixpath.join(found, META)):
        return found
    check_run_id(run_id)
    listed = files.entries(root)
    if listed is None:
        raise MetricsSourceError(f"cannot read MLflow file store {key[0]}: no such directory")
    experiments = sorted(entry.name for entry in listed[:MAX_EXPERIMENTS] if entry.is_dir)
    # `.trash` holds deleted experiments, whose runs MLflow still reads.
    for experiment in experiments:
        candidate = posixpath.join(root, experiment, run_id)
        if files.is_file(posixpath.join(candidate, META)):
            with _runs_guard:
                _runs[key] = candidate
            return candidate
    message = f"MLflow run {run_id} is not in the file store {key[0]}"
    if not any(files.is_file(posixpath.join(root, name, META)) for name in experiments[:16]):
        message += " (no experiment directory with a meta.yaml: is it MLflow's mlruns?)"
    raise MetricsSourceError(message)


def listed_files(files: StoreFiles, directory: str) -> list[str]:
    """The regular files under `directory` as MLflow keys (``a/b`` for a nested one),
    sorted; symlinks skipped, at most `MAX_FILES` and `MAX_DEPTH` levels."""
    found: list[str] = []
    pending: list[tuple[str, str, int]] = [(directory, "", 0)]
    while pending and len(found) < MAX_FILES:
        path, prefix, depth = pending.pop()
        listed = files.entries(path)
        for name, is_dir, is_file in sorted(listed or ()):  # None: not logged yet
            if is_file:
                found.append(prefix + name)
            elif is_dir and depth < MAX_DEPTH:
                pending.append((posixpath.join(path, name), f"{prefix}{name}/", depth + 1))
    return sorted(found[:MAX_FILES])


def read_text(files: StoreFiles, path: str) -> str | None:
    """A param, a tag or meta.yaml, whole (None: gone, too big, a symlink, not text)."""
    data = files.read_small(path, SMALL_FILE_BYTES + 1)
    if data is None or len(data) > SMALL_FILE_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def about_of(params: dict[str, str], tags: dict[str, str], name: str | None) -> dict[str, Any]:
    """A run's params (as the config), tags (MLflow's own `mlflow.*` aside) and name, as
    `ReadBatch.about` holds them; shared with the tracking server's reader."""
    about: dict[str, Any] = {
        "config": {key: param_value(value) for key, value in params.items()},
        "tags": [f"{key}:{value}" if value else key for key, value in tags.items()
                 if not key.startswith(SYSTEM_TAGS)],
    }  # fmt: skip
    name = name or tags.get("mlflow.runName")
    if name:
        about["name"] = name
    return about


def param_value(value: str) -> Any:
    """An MLflow param (always a string) as the value it was: 1e-05 -> 1e-05 (a float)."""
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError):
        return value
    return parsed if isinstance(parsed, int | float | bool | list | dict) else value


def read_meta(files: StoreFiles, directory: str) -> dict[str, str]:
    """meta.yaml's top-level scalars. MLflow writes it with `yaml.safe_dump`: plain,
    'single' or "double" quoted values, long ones folded onto indented lines. Read
    here by hand: the server does not depend on a YAML library for four fields."""
    text = read_text(files, posixpath.join(directory, META)) or ""
    meta: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and last is not None:  # a folded continuation
            meta[last] = f"{meta[last]} {line.strip()}"
            continue
        name, colon, value = line.partition(":")
        if colon and name.isidentifier():
            meta[name], last = value.strip(), name
    return {name: _scalar(value) for name, value in meta.items()}


def run_meta(directory: Path | str) -> dict[str, str]:
    """`read_meta` of a directory on this machine (a run's, or an experiment's)."""
    return read_meta(LOCAL, str(directory))


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    return value


def read_about(files: StoreFiles, run_dir: str) -> dict[str, Any]:
    def values(folder: str) -> dict[str, str]:
        found = {}
        for key in listed_files(files, posixpath.join(run_dir, folder)):
            text = read_text(files, posixpath.join(run_dir, folder, key))
            if text is not None:
                found[key] = text
        return found

    return about_of(values("params"), values("tags"), read_meta(files, run_dir).get("run_name"))


def store_status(files: StoreFiles, root: str, run_id: str) -> str | None:
    """The job status of the run's meta.yaml status (None: not found, or unknown)."""
    try:
        run_dir = run_directory(files, root, run_id)
    except (MetricsSourceError, InvalidSourceError):
        return None  # the metrics read says what is wrong
    number = read_meta(files, run_dir).get("status", "")
    name = RUN_STATUSES.get(int(number)) if number.isdigit() else number.upper()
    return None if name is None else STATUSES.get(name)


def run_and_keys(files: StoreFiles, root: str, run_id: str) -> tuple[str, list[str]]:
    """The run's directory and its metric keys, as listed now."""
    run_dir = run_directory(files, root, run_id)
    return run_dir, listed_files(files, posixpath.join(run_dir, "metrics"))


def file_store_status(uri: str, run_id: str) -> str | None:
    try:
        root = store_root(uri)
    except InvalidSourceError:
        return None
    return store_status(LOCAL, root, run_id)


def file_store_kinds(uri: str, run_id: str) -> tuple[LineFileKind, ...]:
    """One kind per metric file of the run on this machine, in key order."""
    try:
        run_dir, keys = run_and_keys(LOCAL, store_root(uri), run_id)
    except (MetricsSourceError, InvalidSourceError) as exc:
        return (failing_kind(str(exc)),)
    metrics = posixpath.join(run_dir, "metrics")
    return metric_kinds(metrics, keys, read_metric_file, lambda: read_about(LOCAL, run_dir))


def read_metric_file(path: str, key: str, position: ReadPosition, max_bytes: int) -> ReadBatch:
    """The values of the metric file `path` on this machine after `position`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return ReadBatch(records=[], position=position)  # deleted meanwhile: nothing new
    except OSError as exc:
        raise MetricsSourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MetricsSourceError(f"{path} is not a regular file")
        return scan_metric_file(
            lambda offset, size: os.pread(fd, size, offset), info.st_size, position, max_bytes,
            key=key,
        )  # fmt: skip
    except OSError as exc:
        raise MetricsSourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
