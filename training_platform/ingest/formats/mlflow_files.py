"""One run of an MLflow file store (`file:///.../mlruns`) as a job's metrics.

MLflow's file store keeps a run in ``<root>/<experiment id>/<run id>/``:
``meta.yaml`` (its name and status), ``params/<key>`` and ``tags/<key>`` (one
small file each, the value as text) and ``metrics/<key>`` (a key with ``/`` is
nested directories), one line ``<timestamp ms> <value> <step>`` appended per
logged value. Those metric files ARE line files, appended in place, so each is
read like a TensorBoard event file (`tensorboard_files.py`): its own kind,
``metrics.<key>``, with its own byte offset and fingerprint in `sync_state`;
only whole lines, a half-written last one held back, a bad line counted and
skipped, a truncated or replaced file read again from byte 0 (`scan_lines`).
The kinds are listed afresh at each sync, so a key logged for the first time
is read from then on; records of one step from several keys are merged into
the stored step (`merged_steps.py`).

Why the job is a "tracking" job (polled like a tracking database) rather than a
watched local directory: the files that change lie in subdirectories of the
run directory, which the file watcher and the quiet-round signatures (one
`stat` per top-level name) do not see. Polling costs one `stat`-sized read per
metric file per poll while the run runs and stops when it has finished.

Read on the server's machine only: a remote run is read through its tracking
server (`mlflow_rest.py`). Symlinks are never followed inside the store (MLflow
writes none), and the run id is checked before it becomes part of a path.
Params, tags and the run name are read once per sync that stored records
(the run's `about`); the status comes from ``meta.yaml``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from training_platform.callbacks.wire.records import build_record
from training_platform.errors import InvalidSourceError, MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import merged_metrics_kind
from training_platform.ingest.formats.mlflow_store import STATUSES, SYSTEM_TAGS
from training_platform.ingest.line_scanner import MAX_ERRORS, ReadBatch, ReadPosition, scan_lines

# MLflow's own rule for a run id (`_validate_run_id`): no path can hide in one.
RUN_ID: Final = re.compile(r"[A-Za-z0-9][\w\-]{0,255}")
META: Final = "meta.yaml"
MAX_EXPERIMENTS: Final = 10_000  # directories of the store root looked at to find a run
MAX_FILES: Final = 256  # metric files per run (as TensorBoard's event files), params, tags
MAX_DEPTH: Final = 8  # of a key's nested directories
SMALL_FILE_BYTES: Final = 64 * 1024  # a param, a tag, meta.yaml: read whole up to this
MAX_LINE_BYTES: Final = 4096  # a metric line is ~40 bytes (~160 with a dataset)
KIND_NAME_LIMIT: Final = 255  # `sync_state.kind`
# meta.yaml's `status`: MLflow's RunStatus numbers.
RUN_STATUSES: Final = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}

_runs: dict[tuple[str, str], Path] = {}  # (store root, run id) -> its directory, as found
_runs_guard = threading.Lock()


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


def run_directory(root: str, run_id: str) -> Path:
    """`<root>/<experiment>/<run_id>/`, the one holding a meta.yaml (found once, kept
    while it is there); `MetricsSourceError` when no experiment holds the run."""
    key = (root, run_id)
    with _runs_guard:
        found = _runs.get(key)
    if found is not None and _is_file(found / META):
        return found
    check_run_id(run_id)
    try:
        with os.scandir(root) as entries:
            experiments = [
                entry.name
                for _, entry in zip(range(MAX_EXPERIMENTS), entries, strict=False)
                if entry.is_dir(follow_symlinks=False)
            ]
    except OSError as exc:
        raise MetricsSourceError(
            f"cannot read MLflow file store {root}: {exc.strerror or exc}"
        ) from None
    # `.trash` holds deleted experiments, whose runs MLflow still reads.
    for experiment in sorted(experiments):
        candidate = Path(root, experiment, run_id)
        if _is_file(candidate / META):
            with _runs_guard:
                _runs[key] = candidate
            return candidate
    raise MetricsSourceError(f"MLflow run {run_id} is not in the file store {root}")


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def listed_files(directory: Path) -> list[str]:
    """The regular files under `directory` as MLflow keys (``a/b`` for a nested one),
    sorted; symlinks skipped, at most `MAX_FILES` and `MAX_DEPTH` levels."""
    found: list[str] = []
    pending: list[tuple[Path, str, int]] = [(directory, "", 0)]
    while pending and len(found) < MAX_FILES:
        path, prefix, depth = pending.pop()
        try:
            with os.scandir(path) as entries:
                listed = [(entry.name, entry.is_dir(follow_symlinks=False),
                           entry.is_file(follow_symlinks=False)) for entry in entries]  # fmt: skip
        except (FileNotFoundError, NotADirectoryError):
            continue  # not logged yet
        except OSError as exc:
            raise MetricsSourceError(f"cannot list {path}: {exc.strerror or exc}") from None
        for name, is_dir, is_file in sorted(listed):
            if is_file:
                found.append(prefix + name)
            elif is_dir and depth < MAX_DEPTH:
                pending.append((path / name, f"{prefix}{name}/", depth + 1))
    return sorted(found[:MAX_FILES])


def read_small(path: Path) -> str | None:
    """A param, a tag or meta.yaml, whole (None: gone, too big, a symlink, not text)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.read(fd, SMALL_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > SMALL_FILE_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_metric_file(
    position: ReadPosition, max_bytes: int, *, path: Path, key: str, about: Callable[[], Any]
) -> ReadBatch:
    """The values of one metric file after `position`, one record per step."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return ReadBatch(records=[], position=position)  # deleted meanwhile: nothing new
    except OSError as exc:
        raise MetricsSourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MetricsSourceError(f"{path} is not a regular file")
        batch = scan_lines(
            lambda offset, size: os.pread(fd, size, offset), info.st_size, position,
            max_line_bytes=MAX_LINE_BYTES, max_bytes=max_bytes, decode=_metric_line,
        )  # fmt: skip
    except OSError as exc:
        raise MetricsSourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    batch.records = records_of(key, batch.records, batch.errors)
    if batch.records:
        batch.about = about()
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


def run_meta(run_dir: Path) -> dict[str, str]:
    """meta.yaml's top-level scalars. MLflow writes it with `yaml.safe_dump`: plain,
    'single' or "double" quoted values, long ones folded onto indented lines. Read
    here by hand: the server does not depend on a YAML library for four fields."""
    text = read_small(run_dir / META) or ""
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


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    return value


def read_about(run_dir: Path) -> dict[str, Any]:
    def values(folder: str) -> dict[str, str]:
        found = {}
        for key in listed_files(run_dir / folder):
            text = read_small(run_dir / folder / key)
            if text is not None:
                found[key] = text
        return found

    return about_of(values("params"), values("tags"), run_meta(run_dir).get("run_name"))


def file_store_status(uri: str, run_id: str) -> str | None:
    """The job status of the run's meta.yaml status (None: not found, or unknown)."""
    try:
        run_dir = run_directory(store_root(uri), run_id)
    except (MetricsSourceError, InvalidSourceError):
        return None  # the metrics read says what is wrong
    number = run_meta(run_dir).get("status", "")
    name = RUN_STATUSES.get(int(number)) if number.isdigit() else number.upper()
    return None if name is None else STATUSES.get(name)


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


def file_store_kinds(uri: str, run_id: str) -> tuple[LineFileKind, ...]:
    """One kind per metric file of the run, in key order."""
    try:
        run_dir = run_directory(store_root(uri), run_id)
        keys = listed_files(run_dir / "metrics")
    except (MetricsSourceError, InvalidSourceError) as exc:
        return (failing_kind(str(exc)),)
    about: dict[str, Any] = {}

    def about_once() -> Any:  # params and tags: read once per sync, when it stores records
        if not about:
            about.update(read_about(run_dir))
        return dict(about)

    metrics = run_dir / "metrics"
    return tuple(
        key_kind(key, partial(read_metric_file, path=metrics / key, key=key, about=about_once))
        for key in keys
    )
