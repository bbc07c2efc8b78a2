"""`run_demo`: a real GRPO run on CPU, reported through `platform_run`, with faults on demand.

Faults are injected into the training itself, so detectors and dashboards are
shown real consequences rather than doctored numbers:

- ``nan_at=k``: the loss of step k is NaN; its gradients are NaN and the
  update is skipped (as AMP's GradScaler does), so the run goes on;
- ``lr_spike_at=k``: the learning rate is multiplied by `lr_spike_factor` for
  `lr_spike_steps` steps; the policy jumps away from the reference and the KL
  blows up (entropy usually collapses with it);
- ``stall_at=k``: the writer stalls for `stall_seconds` before step k is
  written (a hung filesystem or process): the files stop growing while the
  status still says running;
- ``step_delay``: seconds slept per step, so a dashboard can watch live.

Every step also logs what the policy generated (`PlatformRun.log_samples`):
the prompts and completions as text (`demo.samples`), both reward functions,
one group per prompt, lengths and finish reasons; under a fault they show
what the faulty policy really wrote.

Importing this module does not import torch; `run_demo` does.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.callbacks.base import Callback, Metrics, StopTraining
from training_platform.callbacks.run import platform_run

if TYPE_CHECKING:
    from training_platform.callbacks.profiling.step_profiler import StepProfiler


@dataclass
class DemoConfig:
    """What `run_demo` injects; the GRPO hyper-parameters are `grpo.GRPOConfig`."""

    steps: int = 300
    seed: int = 0
    nan_at: int | None = None
    lr_spike_at: int | None = None
    lr_spike_factor: float = 500.0
    lr_spike_steps: int = 3
    stall_at: int | None = None
    stall_seconds: float = 10.0
    step_delay: float = 0.0
    profile: bool = False
    """Time the stages through the profiling kit (rollout, reward, ref, advantage,
    update_actor with its backward and optimizer), with memory (baseline after the
    model is built), throughput, and one torch.profiler trace window under
    {job_id}_profiles/ (`trace_wait`, `trace_warmup`, `trace_active`)."""
    trace_wait: int = 10
    """Steps before the trace window's warm-up (counted from the first step)."""
    trace_warmup: int = 1
    trace_active: int = 2
    """Steps recorded in the trace (`step_N/trace.json`, N the first of them)."""
    epochs: int | None = None
    """With `steps_per_epoch`: run `epochs * steps_per_epoch` steps (instead of
    `steps`), calling the epoch hooks at each boundary (the record's ``epoch``)."""
    steps_per_epoch: int | None = None
    samples: bool = True
    """Log each step's generated samples to {job_id}_samples.jsonl."""
    torch_threads: int | None = 1
    """Threads for torch (tiny tensors run fastest on one); None leaves it alone."""
    grpo: dict[str, Any] = field(default_factory=dict)
    """Overrides for `grpo.GRPOConfig` (e.g. ``{"lr": 1e-3}``)."""


@dataclass
class DemoResult:
    job_id: str
    status: str
    """The run's final status: completed, stopped or failed."""
    steps_run: int
    metrics_path: Path
    status_path: Path
    samples_path: Path
    stop_reason: str | None = None


class StallWriter(Callback):
    """Blocks `on_step_end` of one step, before the platform callback writes it."""

    def __init__(self, at_step: int, seconds: float, cancel: threading.Event | None) -> None:
        self.at_step = at_step
        self.seconds = seconds
        self.cancel = cancel or threading.Event()

    def on_step_end(self, step: int, metrics: Metrics | None = None) -> None:
        if step == self.at_step:
            self.cancel.wait(self.seconds)  # returns early when the run is cancelled


def run_demo(
    job_id: str = "demo",
    output_dir: str | os.PathLike[str] | None = None,
    config: DemoConfig | None = None,
    *,
    stop_event: threading.Event | None = None,
    callbacks: Iterable[Callback] = (),
    **platform_options: Any,
) -> DemoResult:
    """Train the demo policy for `config.steps` steps, writing the job's files.

    `platform_options` go to `PlatformCallback` (``stop_on_anomaly=True``,
    ``kl_threshold=...``). Setting `stop_event` from another thread ends the
    run early with status ``stopped``. Safe to call from a thread or a
    subprocess; returns once the files are complete.
    """
    import torch

    from training_platform.demo.grpo import GRPOConfig, GRPOTrainer
    from training_platform.demo.samples import Vocabulary, rollout_samples

    config = config or DemoConfig()
    total_steps = config.steps
    if config.epochs is not None and config.steps_per_epoch is not None:
        total_steps = config.epochs * config.steps_per_epoch
    epochs_on = config.epochs is not None or config.steps_per_epoch is not None
    per_epoch = config.steps_per_epoch or max(1, -(-total_steps // (config.epochs or 1)))
    grpo = GRPOConfig(**config.grpo)
    # What the run file says (compared in the dashboard); a caller's choice wins.
    platform_options.setdefault("project", "demo")
    platform_options.setdefault("name", f"GRPO lr {grpo.lr:g}")
    platform_options.setdefault("tags", ["demo", "grpo"])
    platform_options.setdefault("config", {"grpo": grpo, "demo": replace(config, grpo={})})
    # This host's samples every 2 s (the callback's default is 10 s): the dashboard's
    # System tab fills while one watches a demo run of a few minutes.
    platform_options.setdefault("system_metrics_interval", 2.0)
    extra_callbacks = list(callbacks)
    profiler: StepProfiler | None = None
    if config.stall_at is not None:
        extra_callbacks.append(StallWriter(config.stall_at, config.stall_seconds, stop_event))
    if config.profile:
        from training_platform.callbacks.profiling.memory import MemoryMonitor
        from training_platform.callbacks.profiling.step_profiler import StepProfiler
        from training_platform.callbacks.profiling.torch_trace import TraceSchedule

        schedule = TraceSchedule(
            wait=config.trace_wait, warmup=config.trace_warmup, active=config.trace_active, repeat=1
        )
        # Memory after every step: the demo's steps take ~3 ms on a quiet CPU,
        # under the kit's 50 ms default interval, which left a 24-step run two
        # samples, no trend and a leak verdict of "unknown" (a flaky view test).
        memory = MemoryMonitor(min_interval_s=0.0)
        profiler = StepProfiler(job_id, output_dir, trace=schedule, memory=memory)
        contributors = list(platform_options.pop("contributors", ()))
        platform_options["contributors"] = [*contributors, profiler]
    steps_run = 0
    with _torch_threads(torch, config.torch_threads):
        trainer = GRPOTrainer(grpo, config.seed)
        vocabulary = Vocabulary(grpo)
        if profiler is not None:
            profiler.mark_baseline()  # memory once the policy and its reference exist
        stage = profiler.stage if profiler is not None else None
        with platform_run(
            job_id,
            output_dir,
            total_steps=total_steps,
            callbacks=extra_callbacks,
            **platform_options,
        ) as run:
            for step in range(total_steps):
                if stop_event is not None and stop_event.is_set():
                    raise StopTraining("stopped by the caller")
                if epochs_on and step % per_epoch == 0:
                    run.callbacks.on_epoch_begin(step // per_epoch)
                lr = grpo.lr * _lr_factor(config, step)
                with run.step(step):
                    metrics = trainer.step(lr, inject_nan=step == config.nan_at, stage=stage)
                    if profiler is not None:
                        profiler.add_batch(
                            samples=grpo.batch_prompts * grpo.group_size,
                            tokens=trainer.tokens_last_step,
                        )
                    steps_run = step + 1
                    run.log(step, metrics)
                    if config.samples:
                        run.log_samples(step, **rollout_samples(trainer, vocabulary))
                if epochs_on and (step + 1) % per_epoch == 0:
                    run.callbacks.on_epoch_end(step // per_epoch)
                if config.step_delay > 0 and stop_event is not None:
                    stop_event.wait(config.step_delay)
                elif config.step_delay > 0:
                    time.sleep(config.step_delay)
    platform = run.platform
    return DemoResult(
        job_id=platform.job_id,
        status=platform.state,
        steps_run=steps_run,
        metrics_path=platform.metrics_path,
        status_path=platform.status_path,
        samples_path=platform.samples_path,
        stop_reason=run.stop_reason,
    )


def _lr_factor(config: DemoConfig, step: int) -> float:
    start = config.lr_spike_at
    if start is not None and start <= step < start + config.lr_spike_steps:
        return config.lr_spike_factor
    return 1.0


@contextmanager
def _torch_threads(torch: Any, threads: int | None) -> Iterator[None]:
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
