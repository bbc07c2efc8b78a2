"""The writing half of `PlatformCallback`: records, detectors, samples, the files.

`RecordWriter` turns commands into file writes. Its commands are handled by
one thread at a time: inline (`InlineSink`) or by a background thread
(`ThreadSink`). Commands are plain tuples:

- ``("step", open_step)``: build, check, write a line for a closed
  `step_metrics.OpenStep` (the training thread no longer touches it; when it
  saw every value a finite float or int, `finite`, the record is built
  without a type scan and the detectors skip their NaN/Inf scan);
- ``("amend", open_step)``: rewrite a written step with late metrics (no
  detector pass: its anomalies are carried over);
- ``("samples", step, first_index, timestamp, columns, done)``: one line per
  generated sample into the samples file (`samples.sample_lines`);
- ``("fsync",)`` and ``("close",)``.

The status file is the one thing two threads write: lifecycle transitions
come straight from the training thread (`set_status`, so they are on disk
before the hook returns), progress and anomalies from whichever thread runs
the commands. Every status write happens under one lock and serialises the
one shared status dict, so a write always carries every change made before
it: a late progress write can never put back an older state.

Lines are gathered while commands keep coming and written with one `os.write`
when the queue runs dry (or every `_BATCH_LINES` lines): a busy writer makes
one system call per batch, not per step, and a hook that waits for the writer
(`drain`) finds every line it submitted already in the file.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from training_platform.callbacks.base import StopTraining, report_failure
from training_platform.callbacks.detectors.findings import SEVERITY_RANK
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.callbacks.wire.line_file import LineFile, write_json_atomic
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_step_record
from training_platform.callbacks.writer.samples import SampleColumns, sample_lines
from training_platform.callbacks.writer.step_metrics import OpenStep

logger = logging.getLogger(__name__)

FsyncPolicy = Literal["never", "end", "always"] | float

_ALERT: Final = SEVERITY_RANK["warning"]
# Lines gathered before one os.write: bounds the memory and the delay of a batch.
_BATCH_LINES: Final = 256
_LINE: Final = orjson.OPT_APPEND_NEWLINE


class RecordWriter:
    """Owns `{job_id}_metrics.jsonl` and `{job_id}_samples.jsonl` (append-only)
    and `{job_id}_status.json`."""

    def __init__(
        self,
        *,
        job_id: str,
        metrics_path: Path,
        status_path: Path,
        monitor: AnomalyMonitor | None,
        stop_severity: str | None,
        fsync: FsyncPolicy,
        status_interval: float,
        clock: Callable[[], float],
        samples_path: Path | None = None,
    ) -> None:
        if not (fsync in ("never", "end", "always") or isinstance(fsync, (int, float))):
            raise ValueError(f"fsync must be 'never', 'end', 'always' or seconds, got {fsync!r}")
        self.metrics_path = metrics_path
        self.samples_path = samples_path or metrics_path.with_name(f"{job_id}_samples.jsonl")
        self.status_path = status_path
        self.monitor = monitor
        self.stop_rank = None if stop_severity is None else SEVERITY_RANK[stop_severity]
        self.fsync = fsync
        self.status_interval = status_interval
        self.clock = clock
        self.status: dict[str, Any] = {
            "job_id": job_id,
            "status": "pending",
            "current_step": 0,
            "total_steps": None,
            "anomaly_detected": False,
            "anomaly_reason": None,
            "started_at": None,
            "updated_at": None,
            "error": None,
        }
        # Set by the writer, read by the training thread: a single attribute
        # store, so the GIL makes the hand-over safe without a lock.
        self.stop_request: StopTraining | None = None
        self.lines_written = 0
        self.samples_written = 0
        self.last_step: int | None = None
        self._lowest_step: int | None = None
        self._status_lock = threading.Lock()
        self._metrics = LineFile(metrics_path)
        self._samples = LineFile(self.samples_path)
        self._found: tuple[int, list[dict[str, str]]] = (-1, [])
        self._status_written_at = -math.inf
        self._synced_at = clock()
        self._reported: set[tuple[int, str]] = set()

    def handle(self, command: tuple[Any, ...]) -> None:
        """Carry out one command; failures are logged once and never raised."""
        kind = command[0]
        try:
            if kind == "step":
                self._write_step(command[1], True)
            elif kind == "amend":
                self._write_step(command[1], False)
            elif kind == "samples":
                try:
                    self._write_samples(*command[1:5])
                finally:
                    command[5]()  # frees the call's slot (callbacks/writer/sample_backlog.py)
            elif kind == "fsync":
                self.write_gathered()  # a failure to write lines is the steps' failure
                self._fsync()
            elif kind == "close":
                self.write_gathered()
                self._close()
        except Exception:
            report_failure(self._reported, self, kind)

    def write_gathered(self) -> None:
        """Hand both files' gathered lines to the OS; a failure is logged once
        (as a step's or a samples') and never raised."""
        try:
            self.flush_lines()
        except Exception:
            report_failure(self._reported, self, "step")
        try:
            self._samples.flush()
        except Exception:
            report_failure(self._reported, self, "samples")

    # -- metrics file ------------------------------------------------------

    def _write_step(self, done: OpenStep, detect: bool) -> None:
        step, finite = done.step, done.finite
        # A step the training thread saw all finite floats and ints: no type scan.
        ints = done.ints if finite else None
        record = build_step_record(step, done.metrics, done.ended_at, done.anomalies, ints)
        if detect:
            found = self.monitor.check(record, finite=finite) if self.monitor is not None else []
            self._found = (step, found)
        else:
            found = self._found[1] if self._found[0] == step else []
        if found:
            record.setdefault("anomalies", []).extend(found)
        try:  # known finite: no NaN/Inf for `encode_record` to look for
            line = orjson.dumps(record, option=_LINE) if finite else encode_record(record)
        except orjson.JSONEncodeError:  # e.g. a lone surrogate in an anomaly's message
            line = encode_record(record)
        self._append(line)
        step = record["step"]
        self.last_step = step
        if self._lowest_step is None or step < self._lowest_step:
            self._lowest_step = step
        listed = record.get("anomalies")
        alerts = [a for a in listed if SEVERITY_RANK[a["severity"]] >= _ALERT] if listed else None
        if alerts and detect:
            self._on_alerts(alerts)
        elif self.clock() - self._status_written_at >= self.status_interval:
            self.flush_lines()  # the status never runs ahead of the file
            self.set_status()

    def _on_alerts(self, alerts: list[dict[str, str]]) -> None:
        worst = max(alerts, key=lambda a: SEVERITY_RANK[a["severity"]])
        reason = f"{worst['type']}: {worst['message']}"
        self.flush_lines()  # the anomaly's line first, then the status that points at it
        self.set_status(anomaly_detected=True, anomaly_reason=reason)
        rank = SEVERITY_RANK[worst["severity"]]
        if self.stop_rank is not None and self.stop_request is None and rank >= self.stop_rank:
            self.stop_request = StopTraining(reason, alerts)

    def _append(self, line: bytes) -> None:
        lines = self._metrics.lines
        lines.append(line)
        self.lines_written += 1
        policy = self.fsync
        if policy == "always" or (
            type(policy) in (int, float) and self.clock() - self._synced_at >= policy  # type: ignore[operator]
        ):
            self._fsync()
        elif len(lines) >= _BATCH_LINES:
            self.flush_lines()

    def flush_lines(self) -> None:
        """Hand every gathered metrics line to the OS (one `os.write`; no fsync)."""
        self._metrics.flush()

    # -- samples file ------------------------------------------------------

    def _write_samples(
        self, step: int, first: int, timestamp: float, columns: SampleColumns
    ) -> None:
        samples = self._samples
        lines = sample_lines(step, first, timestamp, columns, self._reported, self)
        samples.lines.extend(lines)
        self.samples_written += len(lines)
        policy = self.fsync
        # "always" means after each call's lines here: one fsync per call, not per sample.
        if policy == "always" or (
            type(policy) in (int, float) and self.clock() - self._synced_at >= policy  # type: ignore[operator]
        ):
            self._fsync()
        elif len(samples.lines) >= _BATCH_LINES:
            samples.flush()

    def _fsync(self) -> None:
        never = self.fsync == "never"
        for file in (self._metrics, self._samples):
            if never:
                file.flush()
            else:
                file.fsync()
        self._synced_at = self.clock()

    def _close(self) -> None:
        try:
            self._samples.close(fsync=self.fsync != "never")
        finally:  # the metrics file is closed even if the samples file fails
            self._metrics.close(fsync=self.fsync != "never")

    # -- status file -------------------------------------------------------

    def set_status(self, final: bool = False, **changes: Any) -> None:
        """Apply `changes` and rewrite the status file atomically (temp + rename).

        Safe from any thread: the update and the write happen under one lock,
        so the file on disk is always the newest state, never an older one
        written late. `current_step` is the last written step, and once the
        run is ``completed``, the number of steps done (see `steps_done`).
        """
        if changes.get("status") == "running":
            changes.setdefault("error", None)
        with self._status_lock:
            status = self.status
            status.update(changes)
            if status["status"] == "completed":
                status["current_step"] = self.steps_done()
            elif self.last_step is not None:
                status["current_step"] = self.last_step
            now = self.clock()
            status["updated_at"] = now
            self._status_written_at = now
            write_json_atomic(self.status_path, status, fsync=final and self.fsync != "never")

    def steps_done(self) -> int:
        """How many steps a finished run did, whichever base its loop counts from.

        A 0-based loop (its last step is ``total_steps - 1``, or, with no total
        to tell, its lowest step was 0) did ``last + 1`` steps; a 1-based one (the
        HF Trainer's and verl's global step) did ``last``. So a completed run of
        700 steps shows 700 / 700, also when verl logged a validation at step 0
        before its steps 1..700.
        """
        last = self.last_step
        if last is None:
            return 0
        total = self.status.get("total_steps")
        if isinstance(total, int) and last in (total, total - 1):
            return total
        return last + 1 if self._lowest_step == 0 else last


class InlineSink:
    """Runs each command on the calling (training) thread."""

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer

    def submit(self, command: tuple[Any, ...]) -> None:
        self.writer.handle(command)
        self.writer.write_gathered()  # inline: the line is in the file when the hook returns

    def drain(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = None) -> None:
        self.writer.handle(("close",))


_STOP: Final = ("stop",)


class ThreadSink:
    """Hands commands to one background thread through a queue, in order.

    The queue is a `SimpleQueue` (a C-level put, much cheaper than a `Queue`'s:
    docs/benchmarks.md, Callback) bounded by hand: past `max_pending` the
    training thread waits for the writer rather than dropping records or
    growing without limit.
    """

    def __init__(self, writer: RecordWriter, name: str, max_pending: int = 10_000) -> None:
        self.writer = writer
        self.max_pending = max_pending
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, command: tuple[Any, ...]) -> None:
        if self._queue.qsize() >= self.max_pending:
            self._wait_for_room()
        self._queue.put(command)

    def _wait_for_room(self) -> None:
        while self._queue.qsize() >= self.max_pending and self._thread.is_alive():
            time.sleep(0.001)

    def _run(self) -> None:
        writer, commands = self.writer, self._queue
        while True:
            command = commands.get()
            if command is _STOP:
                return
            if command[0] == "sync":
                writer.write_gathered()
                command[1].set()
                continue
            writer.handle(command)
            if commands.empty():  # caught up: write the batch before sleeping
                writer.write_gathered()

    def drain(self, timeout: float | None = 30.0) -> bool:
        """Wait until every command submitted so far is done; False on timeout."""
        if not self._thread.is_alive():
            return True
        done = threading.Event()
        self._queue.put(("sync", done))
        return done.wait(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        self._queue.put(("close",))
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("the metrics writer did not finish within %ss", timeout)
