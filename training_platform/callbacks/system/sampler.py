"""`SystemSampler`: a daemon thread that appends one host sample per interval.

The thread reads (psutil, NVML), builds and writes; the training thread
pays nothing per step: the step a sample is tagged with is read from the
callback by `step_source` (an attribute read, no lock). Samples are on a
fixed grid of the monotonic clock (start + k × interval), so a slow read
shifts no later sample; a slot missed (the process was suspended) is
skipped, not caught up. The first sample is taken at once (rates need a
second). Nothing raises out of the thread: a failing read is one log line
and the loop goes on. `stop()` wakes it, lets it finish the line it is
writing, closes the file and joins it.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from training_platform.callbacks.system.sample import Gpus, HostGroups, build_sample, encode_sample
from training_platform.callbacks.wire.line_file import LineFile
from training_platform.callbacks.wire.system_file import host_field

logger = logging.getLogger(__name__)

StepSource = Callable[[], int | None]


def _no_step() -> int | None:
    return None


class SystemSampler:
    """Samples this host every `interval` seconds into `path` (one JSON line each).

    `host`: the lines' ``host`` (default: this machine's name); `host_reader` and
    `gpu_reader`: what reads the groups (default psutil for `path`'s file system,
    and NVML); `clock`: the lines' timestamps.
    """

    def __init__(
        self,
        path: Path,
        interval: float,
        *,
        step_source: StepSource = _no_step,
        host: str | None = None,
        host_reader: HostGroups | None = None,
        gpu_reader: Gpus | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "platform-system-sampler",
    ) -> None:
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(
                f"the sampling interval must be a positive number of seconds, got {interval!r}"
            )
        self.path = path
        self.interval = float(interval)
        self.step_source = step_source
        self.host = host_field(host if host is not None else socket.gethostname())
        self.host_reader = host_reader
        self.gpu_reader = gpu_reader
        self.clock = clock
        self.name = name
        self.samples_written = 0
        self._file = LineFile(path)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    def start(self) -> None:
        """Start the thread (again after a `stop()`); a no-op while it runs."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Wake the thread, let it finish its line, close the file; wait up to `timeout`."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.warning("the system sampler did not stop within %ss", timeout)

    def run(self) -> None:
        """Sample until `stop()` (or `request_stop()`): the thread's body, or the
        caller's own loop (``sysmon`` runs it on its main thread)."""
        try:
            started, slot = time.monotonic(), 0
            while True:
                self.sample_once()
                if self._stop.is_set():
                    break
                # The next slot of the grid still ahead of us.
                slot = max(slot + 1, math.floor((time.monotonic() - started) / self.interval) + 1)
                if self._stop.wait(max(0.0, started + slot * self.interval - time.monotonic())):
                    break
        finally:
            self._close()

    def request_stop(self) -> None:
        """Ask `run()` to return after the line it is writing (safe from a signal handler)."""
        self._stop.set()

    def sample_once(self) -> None:
        """Read, build and append one sample; a failure is logged once, never raised."""
        try:
            host_reader, gpu_reader = self._readers()
            groups = host_reader.read()
            gpus = gpu_reader.read()
            step = self.step_source()
            sample = build_sample(
                timestamp=self.clock(), host=self.host, step=step, groups=groups, gpus=gpus
            )
            self._file.lines.append(encode_sample(sample))
            self._file.flush()
            self.samples_written += 1
        except Exception:
            self._file.lines.clear()  # a line that failed to write is not retried forever
            if not self._failed:
                self._failed = True
                logger.warning(
                    "the system sampler failed; training continues (further failures "
                    "are not logged)",
                    exc_info=True,
                )

    def _readers(self) -> tuple[HostGroups, Gpus]:
        # Imported here, on the sampler's thread: importing the callback does not
        # import psutil (~20 ms) nor NVML's bindings.
        if self.host_reader is None:
            from training_platform.callbacks.system.host import HostReader

            self.host_reader = HostReader(self.path.parent)
        if self.gpu_reader is None:
            from training_platform.callbacks.system.gpus import GpuReader

            self.gpu_reader = GpuReader()
        return self.host_reader, self.gpu_reader

    def _close(self) -> None:
        gpus = self.gpu_reader
        for close in (gpus.close if gpus else None, lambda: self._file.close(fsync=False)):
            if close is None:
                continue
            try:
                close()
            except Exception:
                logger.debug("closing the system sampler", exc_info=True)
