"""`run_profiled(command, ...)`: run a user's training command with the profiling kit switched on.

The kit's stages, memory and torch traces are measured inside the training
process, by `PlatformCallback`'s step contributors; no parent process can see
a step. So the parent only sets the switch the callback reads
(``PLATFORM_PROFILE=1``, ``PLATFORM_PROFILE_TRACE``: callbacks/profiling/
env_switch.py) and where it writes (``PLATFORM_METRICS_DIR``), then runs the
command as it is and watches it from outside:

- wall time, the exit status (passed on as the command's own), and the CPU time
  of the command and everything it started (`os.wait4`, once it has ended);
- peak resident memory of the command's process tree, sampled by psutil every
  `sample_interval` seconds (a peak shorter than that can be missed).

A script without our callback gets those figures and nothing else: no
``{job_id}_profiles`` appears, and the result says so. A script that passes
its own ``output_dir`` writes its profile there instead of `output_dir`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from training_platform.callbacks.profiling.env_switch import PROFILE_VAR, TRACE_VAR
from training_platform.callbacks.wire.locations import ENV_VAR as METRICS_DIR_VAR

SUMMARY_FILE = "stage_times.json"
RESULT_FILE = "profile_run.json"
# torch's C++ profiler layers print a line per profiler start and stop (the demo
# launcher's QUIET_ENVIRONMENT); the user's own settings win.
QUIET_ENVIRONMENT = {"TORCH_CPP_LOG_LEVEL": "ERROR", "KINETO_LOG_LEVEL": "5"}


@dataclass
class ProcessFigures:
    """What the parent measured of the command, whatever the command is."""

    exit_code: int
    wall_seconds: float
    cpu_seconds: float | None
    peak_rss_gib: float | None
    rss_samples: int


@dataclass
class ProfileRun:
    command: list[str]
    output_dir: str
    process: ProcessFigures
    profiles: list[str] = field(default_factory=list)
    """``*_profiles`` folders the command wrote (or rewrote) in `output_dir`."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def child_environment(
    output_dir: Path, trace: str | None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The command's environment: ours plus the switch, the directory and quiet profiler logs.
    `trace`: ``wait,warmup,active`` or ``off``; None keeps the kit's default window."""
    environment = dict(os.environ if base is None else base)
    for name, value in QUIET_ENVIRONMENT.items():
        environment.setdefault(name, value)
    environment[PROFILE_VAR] = "1"
    environment[METRICS_DIR_VAR] = str(output_dir)
    if trace is not None:
        environment[TRACE_VAR] = trace
    return environment


def _profile_stamps(directory: Path) -> dict[Path, float]:
    """Each ``*_profiles`` folder's summary and its modification time."""
    stamps = {}
    for folder in directory.glob("*_profiles"):
        summary = folder / SUMMARY_FILE
        if folder.is_dir() and not folder.is_symlink() and summary.is_file():
            stamps[folder] = summary.stat().st_mtime
    return stamps


class _TreeMemory:
    """Peak RSS of a process and its descendants, sampled on a thread of its own."""

    def __init__(self, pid: int, interval: float) -> None:
        self.peak_bytes: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, args=(pid,), daemon=True)
        self._thread.start()

    def _run(self, pid: int) -> None:
        try:
            root = psutil.Process(pid)
        except psutil.Error:
            return
        while True:
            total = 0
            try:
                processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                return  # the command has ended
            for process in processes:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    continue  # a child that ended between the listing and the read
            self.samples += 1
            self.peak_bytes = max(self.peak_bytes or 0, total)
            if self._stop.wait(self._interval):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_profiled(
    command: Sequence[str],
    output_dir: Path,
    *,
    trace: str | None = None,
    sample_interval: float = 0.2,
    environ: Mapping[str, str] | None = None,
) -> ProfileRun:
    """Run `command` with profiling switched on; returns once it has ended.

    Raises `FileNotFoundError` / `PermissionError` when the command cannot be started.
    Ctrl-C reaches the command too (same process group): the command winds down
    (our callback marks the run stopped) and its exit status is returned.
    SIGTERM to this process is passed on to the command.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    before = _profile_stamps(output_dir)
    started = time.monotonic()
    child = subprocess.Popen(list(command), env=child_environment(output_dir, trace, environ))
    memory = _TreeMemory(child.pid, sample_interval)
    previous = _forward_sigterm(child)
    try:
        status, usage = _wait(child)
    finally:
        memory.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    wall = time.monotonic() - started
    after = _profile_stamps(output_dir)
    written = sorted(str(p) for p, mtime in after.items() if before.get(p) != mtime)
    peak = memory.peak_bytes
    figures = ProcessFigures(
        exit_code=status,
        wall_seconds=wall,
        cpu_seconds=usage.ru_utime + usage.ru_stime if usage is not None else None,
        peak_rss_gib=peak / 2**30 if peak is not None else None,
        rss_samples=memory.samples,
    )
    return ProfileRun(list(command), str(output_dir), figures, written)


def _wait(child: subprocess.Popen[bytes]) -> tuple[int, Any]:
    """The command's exit status (128 + N when a signal N ended it, as a shell says)
    and its resource usage, children included; waits through Ctrl-C."""
    while True:
        try:
            if hasattr(os, "wait4"):
                _, raw, usage = os.wait4(child.pid, 0)
                child.returncode = os.waitstatus_to_exitcode(raw)
            else:  # pragma: no cover - Windows has no wait4
                child.wait()
                usage = None
            break
        except KeyboardInterrupt:
            continue  # the command got the same Ctrl-C: wait for it to wind down
    code = child.returncode
    return (128 - code if code < 0 else code), usage


def _forward_sigterm(child: subprocess.Popen[bytes]) -> Any:
    """Pass a SIGTERM (a job scheduler, `timeout`) on to the command: killed alone,
    this process would leave it running unwatched. Only from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    return signal.signal(signal.SIGTERM, forward)
