"""PlatformCallback: one JSON line per step plus an atomic status file (docs/contract.md §1),
generated samples on demand (`log_samples`: docs/trainer.md, Samples), and the host's
system metrics from a thread of their own (callbacks/system/).

The training thread only snapshots the step's metrics (numbers, not tensors a
trainer may later mutate in place) and hands them to a `RecordWriter`, by
default on a background thread: building the record, the detectors and
encoding (docs/benchmarks.md, Callback) are not paid by the training thread.
The queue is drained on `on_train_end`, on `on_exception` and at interpreter
exit. With ``stop_on_anomaly=True`` the writer runs inline instead, so
training stops at the very step that tripped a detector.

The status file never lags a hook: transitions are written by the hook, and a
step holding a NaN/Inf (or an explicit anomaly) waits for the writer; only
progress is left to the writer, every `status_interval` seconds (docs/trainer.md).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from training_platform.callbacks.base import (
    Callback,
    Metrics,
    StepContributor,
    StopTraining,
    describe_exception,
    report_failure,
)
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.callbacks.profiling.env_switch import with_env_profiler
from training_platform.callbacks.system import callback_sampler
from training_platform.callbacks.wire.locations import default_output_dir, ensure_metrics_dir
from training_platform.callbacks.wire.run_file import (
    RUN_SUFFIX,
    RunInfo,
    clean_tags,
    write_run_file,
)
from training_platform.callbacks.wire.schema import validate_job_id
from training_platform.callbacks.writer.exit_drain import live_callbacks
from training_platform.callbacks.writer.record_writer import (
    FsyncPolicy,
    InlineSink,
    RecordWriter,
    ThreadSink,
)
from training_platform.callbacks.writer.sample_backlog import SampleBacklog
from training_platform.callbacks.writer.samples import DEFAULT_MAX_PER_STEP, Column, SampleLog
from training_platform.callbacks.writer.step_metrics import OpenStep, StepBuffer

Severity = Literal["info", "warning", "critical"]


class PlatformCallback(Callback):
    """Writes `{job_id}_metrics.jsonl` and `{job_id}_status.json` for the platform.

    Args:
        job_id: the run's id (docs/contract.md §3; `InvalidJobIdError` otherwise).
        output_dir: default ``$PLATFORM_METRICS_DIR``, else the user's data directory, which
            the server watches too (wire/locations.py); created (or `MetricsDirError`).
        enable_anomaly_detection: run `AnomalyMonitor` on every record.
        kl_threshold, loss_patience: the two most-tuned detector settings; they
            override `anomaly_config` when changed from their defaults.
        stop_on_anomaly: raise `StopTraining` from the step hook when an anomaly
            of at least `stop_severity` is found (adapters turn it into a clean stop).
        anomaly_config: every other detector threshold.
        contributors: `StepContributor`s (the profiling kit) merged into each step's record;
            ``$PLATFORM_PROFILE=1`` adds a `StepProfiler` (profiling/env_switch.py).
        fsync: ``"end"`` (default: at checkpoints and when the run ends), ``"always"``,
            ``"never"``, or seconds between fsyncs. Every line reaches the OS either
            way; fsync only matters if the machine dies.
        status_interval: seconds between progress rewrites of the status file.
        background: write on a thread; default: unless `stop_on_anomaly` (checked inline).
        queue_size: steps the background writer may lag before the training thread waits
            (no step is dropped; `log_samples` calls past 8 waiting are: sample_backlog.py).
        max_samples_per_step: `log_samples` keeps at most this many per step (whole groups).
        enabled: default: only on global rank 0 (``$RANK`` unset or ``0``).
        project, name, tags, config: the run file, written at train begin (run_file.py).
        system_metrics_interval: seconds between samples of this host into
            ``{job_id}_system.jsonl`` (a thread of their own, tagged with the newest
            step read from `_steps`: free for the training thread); 0: none.
        clock: time source for timestamps (tests inject one).
    """

    def __init__(
        self,
        job_id: str,
        output_dir: str | os.PathLike[str] | None = None,
        enable_anomaly_detection: bool = True,
        kl_threshold: float = 1.0,
        loss_patience: int = 50,
        stop_on_anomaly: bool = False,
        *,
        anomaly_config: AnomalyConfig | None = None,
        stop_severity: Severity = "warning",
        contributors: Sequence[StepContributor] = (),
        fsync: FsyncPolicy = "end",
        status_interval: float = 1.0,
        background: bool | None = None,
        queue_size: int = 10_000,
        max_samples_per_step: int = DEFAULT_MAX_PER_STEP,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.time,
        project: str | None = None,
        name: str | None = None,
        tags: Sequence[str] | str | None = None,
        config: Any = None,
        system_metrics_interval: float = 10.0,
    ) -> None:
        self.job_id = validate_job_id(job_id)
        self.output_dir = Path(output_dir) if output_dir is not None else default_output_dir()
        self.metrics_path = self.output_dir / f"{job_id}_metrics.jsonl"
        self.status_path = self.output_dir / f"{job_id}_status.json"
        self.samples_path = self.output_dir / f"{job_id}_samples.jsonl"
        self.run_path = self.output_dir / f"{job_id}{RUN_SUFFIX}"
        self.run_info = RunInfo(project, name, clean_tags(tags), config)  # adapters may fill it
        self._samples = SampleLog(max_samples_per_step)
        self._sample_backlog = SampleBacklog()  # samples never make training wait
        self.stop_on_anomaly = stop_on_anomaly
        self.contributors = with_env_profiler(self.job_id, self.output_dir, contributors)
        self.enabled = os.environ.get("RANK", "0") == "0" if enabled is None else enabled
        self.background = (not stop_on_anomaly) if background is None else background
        self.queue_size = queue_size
        self._clock = clock
        self._reported: set[tuple[int, str]] = set()
        self._steps = StepBuffer(self.job_id, clock)
        self._stop_raised = False
        # The lifecycle as the training thread knows it (the hooks write its changes).
        self.state = "pending"
        monitor = AnomalyMonitor.with_shorthands(anomaly_config, kl_threshold, loss_patience)
        self.monitor: AnomalyMonitor | None = monitor if enable_anomaly_detection else None
        self.writer = RecordWriter(
            job_id=self.job_id, metrics_path=self.metrics_path, status_path=self.status_path,
            monitor=self.monitor, stop_severity=stop_severity if stop_on_anomaly else None,
            fsync=fsync, status_interval=status_interval, clock=clock,
            samples_path=self.samples_path,
        )  # fmt: skip
        self._sink: InlineSink | ThreadSink | None = None
        self._system = callback_sampler(self, system_metrics_interval, self._steps.newest_step)
        if self.enabled:
            ensure_metrics_dir(self.output_dir)
            self.writer.set_status(status="pending")  # the job is visible before it starts

    # -- lifecycle ---------------------------------------------------------

    def on_train_begin(self, total_steps: int | None = None) -> None:
        if not self.enabled:
            return
        self._start()
        if self.state == "pending":  # the run file once, before "running" shows
            write_run_file(self.run_path, self.job_id, self.run_info, self._clock)
        self.state = "running"
        changes: dict[str, Any] = {"status": "running", "started_at": self._clock()}
        if total_steps is not None:
            changes["total_steps"] = int(total_steps)
        # Written here, not by the writer: "running" is on disk when the hook returns.
        self.writer.set_status(**changes)

    def on_train_end(self) -> None:
        if not self.enabled or self._sink is None:
            return
        self._close_contributors()
        self._commit()
        if self.state == "running":
            self._finish("stopped" if self._stop_raised else "completed")
        self._close()

    def on_exception(self, exc: BaseException) -> None:
        if not self.enabled:
            return
        self._start()
        self._commit()
        self._close_contributors()
        stopped = isinstance(exc, (StopTraining, KeyboardInterrupt))
        self._finish("stopped" if stopped else "failed", describe_exception(exc))

    def on_epoch_begin(self, epoch: int) -> None:
        self._steps.epoch = epoch

    def on_save(self, step: int, path: str | None = None) -> None:
        # A checkpoint is a resume point: make the lines up to it durable, so a
        # resumed run never lacks steps that precede its checkpoint.
        if self.enabled and self._sink is not None:
            self._submit(("fsync",))

    # -- steps -------------------------------------------------------------

    def on_step_begin(self, step: int) -> None:
        if not self.enabled:
            return
        if self._sink is None:
            self._reopen()
        open_step = self._steps.open
        if open_step is None:
            self._steps.open = OpenStep(step)
        elif open_step.step != step:
            self._commit()
            self._steps.open = OpenStep(step)
        for contributor in self.contributors:
            try:
                contributor.on_step_begin(step)
            except StopTraining:
                raise
            except Exception:
                report_failure(self._reported, contributor, "on_step_begin")
        if self.writer.stop_request is not None:
            self._raise_if_stop_requested()

    def on_step_end(
        self, step: int, metrics: Metrics | None = None, *, commit: bool = True
    ) -> None:
        """Finish step `step` and write its record.

        ``commit=False`` keeps the step open for metrics that arrive later
        (`on_log`, `on_evaluate`); `commit_step()` or the next step writes it.
        """
        if not self.enabled:
            return
        if self._sink is None:
            self._reopen()
        open_step = self._steps.open
        if open_step is None or open_step.step != step:
            if open_step is not None:
                self._commit()
            open_step = self._steps.open = OpenStep(step)
        if metrics:
            self._steps.merge(open_step, metrics)
        open_step.ended_at = self._clock()
        for contributor in self.contributors:
            try:
                extra = contributor.on_step_end(step)
            except StopTraining:
                raise
            except Exception:
                report_failure(self._reported, contributor, "on_step_end")
                continue
            if extra:
                self._steps.merge(open_step, extra)
        if commit:
            self._commit()
            if self.writer.stop_request is not None:
                self._raise_if_stop_requested()

    def on_log(self, step: int, metrics: Metrics) -> None:
        self._add(step, metrics)

    def on_rollout_end(self, step: int, metrics: Metrics | None = None) -> None:
        if metrics:
            self._add(step, metrics)

    def on_evaluate(self, step: int, metrics: Metrics) -> None:
        self._add(step, metrics)

    def log(self, step: int, metrics: Metrics) -> None:
        """Write one step's record now (the whole API for a hand-written loop)."""
        self.on_step_end(step, metrics)

    def log_samples(
        self,
        step: int,
        prompts: Column,
        completions: Column,
        rewards: Column | None = None,
        reward_components: Any = None,
        groups: Column | None = None,
        response_lengths: Column | None = None,
        finish_reasons: Column | None = None,
        extra: Column | None = None,
    ) -> None:
        """Append `step`'s generated samples to ``{job_id}_samples.jsonl``, one line each.

        Columns hold one item per sample (lists, arrays, tensors); `reward_components`
        is name -> column or one mapping per sample, `extra` one mapping per sample.
        Unequal lengths raise `ValueError`. Written by the metrics' writer.
        """
        found = self._samples.command(
            step, prompts, completions, rewards, reward_components, groups,
            response_lengths, finish_reasons, extra, enabled=self.enabled,
        )  # fmt: skip
        if found is not None and self._sample_backlog.reserve(step):
            done = self._sample_backlog.release
            self._submit(("samples", found[0], found[1], self._clock(), found[2], done))

    def commit_step(self) -> None:
        """Write the open step, if any, then stop training if an anomaly asked to."""
        if self.enabled:
            self._commit()
            self._raise_if_stop_requested()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every committed step is written; False on timeout. A step
        still open (awaiting `on_log`) stays open: see `commit_step`."""
        if not self.enabled or self._sink is None:
            return True
        return self._sink.drain(timeout)

    @property
    def stop_request(self) -> StopTraining | None:
        """The `StopTraining` an anomaly raised (with `stop_on_anomaly`), if any."""
        return self.writer.stop_request

    # -- internals ---------------------------------------------------------

    def _add(self, step: int, metrics: Metrics) -> None:
        if not self.enabled or not metrics:
            return
        if self._sink is None:
            self._reopen()
        steps = self._steps
        open_step = steps.open
        if open_step is not None and open_step.step == step:
            steps.merge(open_step, metrics)
        elif steps.last is not None and steps.last.step == step:
            # Late metrics for a step already written: rewrite it with the union.
            self._submit(("amend", steps.amend(metrics)))
        else:
            self._commit()
            open_step = steps.open = OpenStep(step)
            steps.merge(open_step, metrics)

    def _commit(self) -> None:
        done = self._steps.take()
        if done is None:
            return
        # The step itself: the writer reads its metrics and flags (`OpenStep.finite`).
        self._submit(("step", done))
        if done.alarming:
            # NaN/Inf or an explicit anomaly (rare): wait until the writer has
            # checked and written this step, so that the status file says
            # anomaly_detected before the hook returns (a process killed right
            # after must not leave "no anomaly" behind).
            self._sink.drain()  # type: ignore[union-attr]  # _submit started it

    def _close_contributors(self) -> None:
        # The profiler writes its run-wide summary (stage_times.json) and ends a
        # trace cycle cut short by the end of the run only when closed.
        for contributor in self.contributors:
            close = getattr(contributor, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception:
                report_failure(self._reported, contributor, "close")

    def _reopen(self) -> None:
        # A hook before on_train_begin starts the run; one after the run ended
        # (a final trainer.evaluate()) is still written, leaving the status be.
        if self.state == "pending":
            self.on_train_begin()
        else:
            self._start()

    def _raise_if_stop_requested(self) -> None:
        request = self.writer.stop_request
        if request is not None and not self._stop_raised:
            self._stop_raised = True  # once: the loop was told; it may still wind down
            raise request

    def _submit(self, command: tuple[Any, ...]) -> None:
        sink = self._sink
        if sink is None:
            sink = self._start()
        sink.submit(command)

    def _start(self) -> InlineSink | ThreadSink:
        if self._sink is None:
            name = f"platform-writer-{self.job_id}"
            self._sink = (
                ThreadSink(self.writer, name, self.queue_size)
                if self.background
                else InlineSink(self.writer)
            )
            live_callbacks.add(self)
            self._system.start()
        return self._sink

    def _finish(self, state: str, error: str | None = None) -> None:
        """Write the last lines, make them durable, then the final status: a
        reader that sees "completed" finds every line already in the file."""
        self.state = state
        sink = self._sink if self._sink is not None else self._start()
        self._system.stop()  # the run is over: no sample after its final status
        sink.submit(("fsync",))
        sink.drain()
        changes: dict[str, Any] = {"status": state}
        if error is not None:
            changes["error"] = error
        self.writer.set_status(final=True, **changes)

    def _close(self) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.close()
        self._system.stop()
        live_callbacks.discard(self)

    def close_at_exit(self) -> None:
        """Drain and close at interpreter exit; a run still marked running is
        marked failed (an uncaught exception killed it) or stopped."""
        if self._sink is None:
            return
        self._commit()
        if self.state == "running":
            exc = getattr(sys, "last_value", None)  # set when an exception went uncaught
            if exc is not None:
                self.on_exception(exc)
            else:
                self._finish("stopped", "the process exited before on_train_end")
        self._close()
