"""The demo trainer as a child process of ``training-platform demo``.

The demo command serves the platform and runs `demo-train` beside it. This
module owns that child: it keeps the profiler's chatter out of the demo's
terminal (torch's C++ layers print a line per profiler start and stop, and a
warning about allocations made before it, none of which a demo user can act
on), forwards everything else the trainer says, and reaps the child the
moment it ends, so that a finished demo run leaves no zombie process behind
while the server keeps running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Final, TextIO

# Lines torch's C++ profiler layers (Kineto, c10) write to stderr by themselves.
PROFILER_NOISE: Final = re.compile(
    r"^(USDT|STAGE|INFO|VERBOSE):\S* .*(Profiler|profiler)"
    r"|^\[W\d+ .*(CPUAllocator|profiler|kineto)"
    r"|profiler_(start|stop)\b"
)
# Ask the same layers to keep quiet (the filter catches what they print anyway).
QUIET_ENVIRONMENT: Final = {"TORCH_CPP_LOG_LEVEL": "ERROR", "KINETO_LOG_LEVEL": "5"}


class DemoTrainer:
    """Starts `command` (a `demo-train` invocation) and watches it until it ends.

    Args:
        command: the child's argv.
        output: where the child's stderr goes, minus the profiler noise
            (default: this process's stderr).
    """

    def __init__(self, command: Sequence[str], output: TextIO | None = None) -> None:
        self.output = output if output is not None else sys.stderr
        self.returncode: int | None = None
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **QUIET_ENVIRONMENT},
            text=True,
            errors="replace",
        )
        self._watcher = threading.Thread(
            target=self._watch, name="demo-trainer-watcher", daemon=True
        )
        self._watcher.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _watch(self) -> None:
        stream = self.process.stderr
        assert stream is not None  # stderr=PIPE
        for line in stream:
            if not PROFILER_NOISE.search(line):
                self.output.write(line)
                self.output.flush()
        stream.close()
        # The child closed its stderr: it is exiting. wait() reaps it now,
        # not when the server stops (a zombie until then, otherwise).
        self.returncode = self.process.wait()
        if self.returncode != 0:
            self.output.write(f"demo trainer exited with code {self.returncode}\n")
            self.output.flush()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait until the trainer has ended and been reaped; its exit code, or
        None if it is still running after `timeout` seconds."""
        self._watcher.join(timeout)
        return self.returncode

    def stop(self, timeout: float = 10.0) -> None:
        """End the run (its status file says "stopped", not "running" forever),
        then kill it if it has not ended within `timeout`.

        SIGTERM, not SIGINT: a demo started with SIGINT ignored (a background
        job of a script) passes that on to its child, where an ignored signal
        stays ignored across exec. `demo-train` handles SIGTERM itself.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.wait(timeout)
