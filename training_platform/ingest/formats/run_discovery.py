"""Other tools' runs under the metrics directory, found without a call (DESIGN.md §7).

A TensorBoard run is a directory holding `events.out.tfevents.*` files, as
TensorBoard itself sees one (`--logdir` of many runs); a W&B offline run a
directory holding a `run-<id>.wandb` transaction log (`wandb/offline-run-*`,
so a W&B `wandb/` directory shows each of its runs). A run is named by its path relative
to the metrics directory (`grpo/seed1`), its job id is that path with `/` as
`.` (job ids are one path component), and its project is its parent's path.
A run directory's own subdirectories are part of it (torch's `add_hparams`
writes one per call), not runs of their own.

The walk is bounded (depth, directories visited), skips hidden directories
and the platform's own job folders, and never follows a symlink: a metrics
directory may be large, and a link may lead anywhere. It uses `scandir`
alone (no `stat`): the server walks at each background round.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from training_platform.callbacks.wire.schema import JOB_ID_PATTERN
from training_platform.ingest.formats.tensorboard_files import is_event_file
from training_platform.ingest.formats.wandb_log import is_run_file

MAX_DEPTH: Final = 4  # runs at most this many directories below the metrics directory
MAX_DIRECTORIES: Final = 5000  # visited per walk
PLATFORM_FOLDERS: Final = ("_rollouts", "_profiles")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class FoundRun:
    job_id: str
    directory: Path
    name: str  # its path relative to the metrics directory
    project: str | None  # its parent's relative path (None: at the top)
    format: str = "tensorboard"  # or "wandb"


def find_tool_runs(root: Path) -> list[FoundRun]:
    """Every TensorBoard or W&B offline run below `root` (not `root` itself), in path
    order."""
    found: list[FoundRun] = []
    visited = 0
    pending = [(root, 0)]
    while pending and visited < MAX_DIRECTORIES:
        directory, depth = pending.pop()
        visited += 1
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            continue
        if depth > 0 and any(is_event_file(entry.name) for entry in listed):
            found.append(_run(root, directory, "tensorboard"))
            continue  # its subdirectories are its own (hparams)
        if depth > 0 and any(is_run_file(entry.name) for entry in listed):
            found.append(_run(root, directory, "wandb"))
            continue  # its files/, logs/: W&B's own
        if depth >= MAX_DEPTH:
            continue
        for entry in listed:
            if _may_hold_runs(entry.name) and entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), depth + 1))
    return sorted(found, key=lambda run: run.name)


def _may_hold_runs(name: str) -> bool:
    """Not hidden, and not one of the platform's own folders of a job (its rollouts and
    profiles, which a walk every round would list again and again for nothing)."""
    return not name.startswith(".") and not name.endswith(PLATFORM_FOLDERS)


def run_job_id(name: str) -> str:
    """The job id of the run at relative path `name`: `grpo/seed1` -> `grpo.seed1`."""
    job_id = _UNSAFE.sub("_", name.replace("/", ".")).lstrip("._-") or "run"
    if job_id != name.replace("/", ".") or not JOB_ID_PATTERN.fullmatch(job_id):
        # Changed or too long: a digest of the path keeps two such runs apart.
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        job_id = f"{job_id[:119]}-{digest}"
    return job_id


def _run(root: Path, directory: Path, format: str) -> FoundRun:
    name = directory.relative_to(root).as_posix()
    parent = Path(name).parent.as_posix()
    project = None if parent == "." else parent
    return FoundRun(run_job_id(name), directory, name, project, format)
