"""The profiling documents' commands: ``profile``, ``profile-run``, ``verify-determinism``,
``verify-profile`` and ``verify-dashboard`` (the Makefile's targets of the same names).

Each prints a short verdict and exits 1 on failure with a one-line reason
(stderr); ``profile-run`` exits with the command's own status. Imports only
typer at the top: torch, the report and the server load when a command runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

import typer


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"FAILED: {message}", err=True)
    raise typer.Exit(code)


def _quiet_torch() -> None:
    # Before torch loads: its C++ profiler layers read these once (chatter off).
    from training_platform.tools.profile_run import QUIET_ENVIRONMENT

    for variable, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(variable, value)


def profile(
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Where the run's files and profile go.")
    ] = Path("profile_output"),
    job_id: Annotated[str, typer.Option("--job-id", help="The run's job id.")] = "demo",
    steps: Annotated[int, typer.Option(min=5, help="Training steps (CPU: ~3 ms each).")] = 12,
    seed: Annotated[int, typer.Option(help="Seed of the policy and sampling.")] = 0,
) -> None:
    """A profiled demo GRPO run on the CPU: stage times, memory and one torch trace.

    Writes {job_id}_metrics.jsonl and {job_id}_profiles/ (stage_times.json,
    step_N/trace.json, op_stats.csv) into --output-dir; then check them with
    `verify-profile` and read them with `profile-report` (docs/profiling.md).
    """
    _quiet_torch()
    from training_platform.demo.trainer import DemoConfig, run_demo

    # The trace window ends two steps before the run does: warm-up 1, active 2.
    config = DemoConfig(
        steps=steps, seed=seed, profile=True, samples=False,
        trace_wait=max(steps - 5, 0), trace_warmup=1, trace_active=2,
    )  # fmt: skip
    result = run_demo(job_id, output_dir, config, system_metrics_interval=0)
    profiles = output_dir / f"{job_id}_profiles"
    if result.status != "completed":
        _fail(f"the run ended {result.status}: {result.stop_reason or 'see its status file'}")
    typer.echo(f"profiled {result.steps_run} steps: {result.metrics_path}")
    typer.echo(f"profile: {profiles} (training-platform verify-profile {profiles})")


def verify_determinism(
    logs: Annotated[
        list[Path] | None,
        typer.Argument(help="Two metrics JSONL files to compare; none: run the demo twice."),
    ] = None,
    steps: Annotated[int, typer.Option(min=1, help="Steps of each demo run.")] = 8,
    seed: Annotated[int, typer.Option(help="The seed both demo runs use.")] = 0,
    ignore: Annotated[
        list[str] | None,
        typer.Option(help="Also ignore this field and all under it (repeat): 'extra.my/clock'."),
    ] = None,
) -> None:
    """Two runs with one seed log identical metrics, step by step and field by field.

    Wall-clock fields are left out: timestamp, timing.*, performance.*,
    extra.profiling/*. Without LOGS, runs the demo twice, each in a process of
    its own (--steps, --seed), and compares their logs.
    """
    from training_platform.tools.determinism import (
        WALL_CLOCK_FIELDS,
        LogError,
        compare_metric_logs,
    )

    ignored = (*WALL_CLOCK_FIELDS, *(ignore or ()))
    if logs and len(logs) != 2:
        raise typer.BadParameter(f"give two metrics files, not {len(logs)}", param_hint="LOGS")
    with tempfile.TemporaryDirectory(prefix="verify-determinism-") as scratch:
        if logs:
            first, second = logs
        else:
            first, second = (_demo_log(Path(scratch), name, steps, seed) for name in ("a", "b"))
        try:
            comparison = compare_metric_logs(first, second, ignored)
        except LogError as exc:
            _fail(str(exc))
    if not comparison.identical:
        _fail(f"not deterministic: {comparison.verdict()}")
    typer.echo(f"deterministic: {comparison.verdict()}")


def _demo_log(directory: Path, name: str, steps: int, seed: int) -> Path:
    command = [
        sys.executable, "-m", "training_platform", "demo-train", "--job-id", f"seed{seed}-{name}",
        "--output-dir", str(directory), "--steps", str(steps), "--seed", str(seed),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        _fail(f"demo run {name} exited {done.returncode}: {last}")
    return directory / f"seed{seed}-{name}_metrics.jsonl"


def verify_profile(
    path: Annotated[
        Path,
        typer.Argument(
            help="A {job_id}_profiles folder, or the folder holding one (`profile`'s output)."
        ),
    ] = Path("profile_output"),
    job_id: Annotated[
        str | None, typer.Option("--job-id", help="PATH holds {job_id}_profiles.")
    ] = None,
    allow_no_trace: Annotated[
        bool, typer.Option("--allow-no-trace", help="A profile without a torch trace passes.")
    ] = False,
) -> None:
    """A profile is complete and well-formed: `profile-report --check`, plus at least
    one step and one torch.profiler trace (step_N/trace.json and op_stats.csv)."""
    from training_platform.errors import InvalidJobIdError
    from training_platform.tools.profile_check import check_profile, find_profile_dir

    try:
        directory = find_profile_dir(path, job_id)
    except InvalidJobIdError as exc:
        _fail(str(exc))
    result = check_profile(directory, require_trace=not allow_no_trace)
    if not result.ok:
        for line in result.problems[1:]:
            typer.echo(line, err=True)
        more = len(result.problems) - 1
        _fail(result.problems[0] + (f" (and {more} more problems above)" if more else ""))
    typer.echo(f"profile OK: {directory}: {result.summary}")


def verify_dashboard(
    log: Annotated[
        Path,
        typer.Argument(help="A metrics JSONL ({job_id}_metrics.jsonl)."),
    ] = Path("profile_output/demo_metrics.jsonl"),
    job_id: Annotated[
        str | None, typer.Option("--job-id", help="Default: from the file's name.")
    ] = None,
) -> None:
    """A training log has the series the dashboard's default charts draw, and the
    platform serves them (ingested by the app in this process, a temporary SQLite database)."""
    from training_platform.tools.dashboard_check import ServeError, check_dashboard
    from training_platform.tools.determinism import LogError

    try:
        result = check_dashboard(log, job_id)
    except (LogError, ServeError) as exc:
        _fail(str(exc))
    if not result.ok:
        _fail(result.verdict())
    for title, keys in result.served.items():
        typer.echo(f"  {title}: {', '.join(keys)}")
    if result.optional_absent:
        typer.echo(f"  not in this log (drawn when present): {', '.join(result.optional_absent)}")
    typer.echo(f"dashboard OK: {result.verdict()}")


def profile_run(
    command: Annotated[
        list[str], typer.Argument(help="The training command, after `--`: -- python train.py ...")
    ],
    output_dir: Annotated[
        Path,
        typer.Option(
            "--output-dir", "-o", help="$PLATFORM_METRICS_DIR of the command: its files go here."
        ),
    ] = Path("profile_output"),
    trace: Annotated[
        str | None,
        typer.Option(help="torch.profiler window 'wait,warmup,active' (default 5,1,2), or 'off'."),
    ] = None,
    sample_interval: Annotated[
        float, typer.Option(min=0.01, help="Seconds between RSS samples of the command.")
    ] = 0.2,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Exit 1 when a profile written has problems (they are always shown)."
        ),
    ] = False,
    require_profile: Annotated[
        bool, typer.Option("--require-profile", help="Exit 1 when the command wrote no profile.")
    ] = False,
) -> None:
    """Run a training command with the profiling kit switched on ($PLATFORM_PROFILE=1).

    A script that uses PlatformCallback gets step times, memory and a torch
    trace in OUTPUT_DIR/{job_id}_profiles (stage times where it names stages);
    any command gets wall time, CPU time, peak RSS of its process tree and its
    exit status, which is this command's too. Each profile written is checked
    as verify-profile does. The figures go to OUTPUT_DIR/profile_run.json.
    """
    from training_platform.callbacks.profiling.env_switch import TRACE_OFF
    from training_platform.tools.profile_check import check_profile
    from training_platform.tools.profile_run import RESULT_FILE, run_profiled

    trace_off = trace is not None and trace.strip().lower() in TRACE_OFF
    if trace is not None and not trace_off and not re.fullmatch(r"\d+,\d+,0*[1-9]\d*", trace):
        raise typer.BadParameter("'wait,warmup,active' counts, active >= 1", param_hint="--trace")
    try:
        result = run_profiled(command, output_dir, trace=trace, sample_interval=sample_interval)
    except OSError as exc:  # not found, not executable: as a shell says it
        _fail(f"cannot run {command[0]!r}: {exc.strerror or exc}", 127)
    figures = result.process
    cpu = f"{figures.cpu_seconds:.1f} s" if figures.cpu_seconds is not None else "unknown"
    peak = f"{figures.peak_rss_gib:.3f} GiB" if figures.peak_rss_gib is not None else "unknown"
    typer.echo(
        f"command exited {figures.exit_code} after {figures.wall_seconds:.1f} s; "
        f"CPU {cpu}; peak RSS {peak} ({figures.rss_samples} samples)"
    )
    (output_dir / RESULT_FILE).write_text(json.dumps(result.to_json(), indent=2) + "\n")
    failed = False
    for profile_dir in map(Path, result.profiles):
        verdict = check_profile(profile_dir, require_trace=not trace_off)
        typer.echo(f"profile: {profile_dir} ({verdict.summary})")
        typer.echo(f"  check: {'OK' if verdict.ok else f'{len(verdict.problems)} problem(s)'}")
        for line in verdict.problems:
            typer.echo(f"    {line}")
        failed = failed or not verdict.ok
    if not result.profiles:
        typer.echo(
            f"no profile written in {output_dir}: the command runs no PlatformCallback (or gives "
            "it an output_dir of its own), so only the process figures above were measured; "
            "docs/profiling.md, 'Profiling your own script'",
            err=True,
        )
    if figures.exit_code != 0:
        raise typer.Exit(figures.exit_code)
    if (check and failed) or (require_profile and not result.profiles):
        raise typer.Exit(1)
