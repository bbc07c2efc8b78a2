"""`demo_train`: the ``training-platform demo-train`` command (registered by the main CLI)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from training_platform.callbacks.wire.locations import default_output_dir, ensure_metrics_dir
from training_platform.demo.launcher import QUIET_ENVIRONMENT
from training_platform.demo.trainer import DemoConfig, run_demo
from training_platform.errors import MetricsDirError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_like_ctrl_c(signum: int, _frame: FrameType | None) -> None:
    """End the run as Ctrl-C would: `platform_run` writes "stopped" on the way out.

    Once only: a second signal (Ctrl-C reaching the whole process group, then
    the demo's own SIGTERM to its child) would interrupt that very write. A
    trainer that does not end is killed by whoever sent the first.
    """
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def demo_train(
    job_id: Annotated[str, typer.Option("--job-id", help="Job id of the run (its file names).")] = (
        "demo"
    ),
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            help="Where to write the job's files (default: $PLATFORM_METRICS_DIR, else the "
            "user's data directory, ~/.local/share/training-platform/metrics on Linux, which "
            "`training-platform serve` watches by default).",
        ),
    ] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="GRPO steps to run.")] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the policy and sampling.")] = 0,
    nan_at: Annotated[
        int | None,
        typer.Option("--nan-at", min=0, help="Make the loss of this step NaN (update skipped)."),
    ] = None,
    lr_spike_at: Annotated[
        int | None,
        typer.Option(
            "--lr-spike-at",
            min=0,
            help="From this step, multiply the learning rate by --lr-spike-factor for "
            "--lr-spike-steps steps: the KL to the reference blows up.",
        ),
    ] = None,
    lr_spike_factor: Annotated[
        float, typer.Option("--lr-spike-factor", min=1.0, help="Learning-rate multiplier.")
    ] = 500.0,
    lr_spike_steps: Annotated[
        int, typer.Option("--lr-spike-steps", min=1, help="Steps the spike lasts.")
    ] = 3,
    stall_at: Annotated[
        int | None,
        typer.Option("--stall-at", min=0, help="Stall the metrics writer before this step."),
    ] = None,
    stall_seconds: Annotated[
        float, typer.Option("--stall-seconds", min=0.0, help="How long the writer stalls.")
    ] = 10.0,
    step_delay: Annotated[
        float,
        typer.Option(
            "--step-delay", min=0.0, help="Seconds to sleep after each step (to watch it live)."
        ),
    ] = 0.0,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile/--no-profile",
            help="Time the stages through the profiling kit, with memory, throughput and one "
            "torch.profiler trace window; then `training-platform profile-report` reads it.",
        ),
    ] = False,
    epochs: Annotated[
        int | None,
        typer.Option(
            "--epochs", min=1, help="Epochs to run (with --steps-per-epoch: replaces --steps)."
        ),
    ] = None,
    steps_per_epoch: Annotated[
        int | None, typer.Option("--steps-per-epoch", min=1, help="Steps in each epoch.")
    ] = None,
    trace_wait: Annotated[
        int, typer.Option("--trace-wait", min=0, help="Steps before the trace window (--profile).")
    ] = 10,
    trace_warmup: Annotated[
        int, typer.Option("--trace-warmup", min=0, help="Profiler warm-up steps, not recorded.")
    ] = 1,
    trace_active: Annotated[
        int, typer.Option("--trace-active", min=1, help="Steps recorded in the trace window.")
    ] = 2,
    stop_on_anomaly: Annotated[
        bool,
        typer.Option("--stop-on-anomaly", help="Stop the run at the first anomaly."),
    ] = False,
    lr: Annotated[
        float | None,
        typer.Option("--lr", min=0.0, help="The policy's learning rate (default 2e-3)."),
    ] = None,
    project: Annotated[
        str, typer.Option("--project", help="The run file's project (compare runs by it).")
    ] = "demo",
    name: Annotated[
        str | None,
        typer.Option("--name", help="The run's name in the dashboard (default: its lr)."),
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="A tag of the run; repeat for several.")
    ] = None,
) -> None:
    """Run a small but real GRPO training on CPU and report it to the platform.

    A policy learns a synthetic sequence task against a frozen reference
    policy; loss, reward, KL, entropy, grad norms, throughput and per-stage
    timings go to {job_id}_metrics.jsonl and {job_id}_status.json through
    PlatformCallback. The fault flags make the detectors fire on real data.
    """
    # Before torch loads: its C++ layers read these once (profiler chatter off).
    for variable, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(variable, value)
    directory = output_dir if output_dir is not None else default_output_dir()
    try:
        ensure_metrics_dir(Path(directory))
    except MetricsDirError as exc:  # one line, as `serve` says it, not a traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    config = DemoConfig(
        steps=steps,
        seed=seed,
        nan_at=nan_at,
        lr_spike_at=lr_spike_at,
        lr_spike_factor=lr_spike_factor,
        lr_spike_steps=lr_spike_steps,
        stall_at=stall_at,
        stall_seconds=stall_seconds,
        step_delay=step_delay,
        profile=profile,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        trace_wait=trace_wait,
        trace_warmup=trace_warmup,
        trace_active=trace_active,
        grpo={} if lr is None else {"lr": lr},
    )
    described: dict[str, Any] = {"project": project, "tags": tag or ["demo", "grpo"]}
    if name is not None:
        described["name"] = name
    # `kill` or a process-group SIGTERM (timeout, a job scheduler) would end
    # the process before the run could say so: stop it like Ctrl-C instead, so
    # the status file ends "stopped" rather than "running" forever. SIGINT is
    # set too: started with it ignored (a script's background job), Python
    # installs no handler for it and Ctrl-C or `kill -INT` would do nothing.
    previous = {stop: signal.signal(stop, _stop_like_ctrl_c) for stop in STOP_SIGNALS}
    typer.echo(f"demo-train: job {job_id!r} -> {directory}")
    try:
        result = run_demo(job_id, directory, config, stop_on_anomaly=stop_on_anomaly, **described)
    finally:
        # Called in-process (tests, CliRunner), the caller gets its own handlers back.
        for stop, handler in previous.items():
            if handler is not None:
                signal.signal(stop, handler)
    typer.echo(f"{result.status} after {result.steps_run} steps: {result.metrics_path}")
    if profile:
        profiles = result.metrics_path.parent / f"{job_id}_profiles"
        typer.echo(f"profile: {profiles} (read it: training-platform profile-report {profiles})")
    if result.stop_reason:
        typer.echo(f"stopped: {result.stop_reason}")
