"""`training-platform profile-report PATH`: check a profile, report on it, recommend.

Imports only typer at the top: the CLI registers it cheaply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

FIGURE_NAME = "stage_breakdown.png"


def profile_report(
    path: Annotated[
        Path,
        typer.Argument(
            help="A job's profiles folder ({job_id}_profiles), or a metrics folder with --job-id."
        ),
    ],
    job_id: Annotated[
        str | None,
        typer.Option("--job-id", help="PATH is the metrics folder; read {job_id}_profiles in it."),
    ] = None,
    check: Annotated[
        bool,
        typer.Option("--check", help="Only check the files: exit status 1 on any problem (CI)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    write: Annotated[
        bool,
        typer.Option(
            "--write/--no-write",
            help="Write report.json, report.txt, summary.csv and stage_breakdown.png "
            "into the profile folder.",
        ),
    ] = True,
    max_trace_mb: Annotated[
        int,
        typer.Option(
            "--max-trace-mb", min=1, help="Traces larger than this are skipped (said so)."
        ),
    ] = 1024,
) -> None:
    """Check a profile's files, summarise stages, throughput, memory and operators, and recommend.

    The profile is what the profiling kit writes (docs/profiling.md):
    stage_times.json and step_N/{trace.json,op_stats.csv}.
    """
    from training_platform.callbacks.profiling.stats import finite_or_none
    from training_platform.errors import InvalidJobIdError
    from training_platform.profile_report.render import render_text, write_report_files
    from training_platform.profile_report.report import build_report
    from training_platform.profile_report.source import LocalProfileSource, resolve_profile_dir

    try:
        directory = resolve_profile_dir(path, job_id)
    except InvalidJobIdError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    directory = _single_profile_in(directory) or directory
    if not directory.is_dir():
        typer.echo(
            f"error: {directory} is not a folder (give a {{job_id}}_profiles folder)", err=True
        )
        raise typer.Exit(2)
    report = build_report(LocalProfileSource(directory), max_trace_bytes=max_trace_mb << 20)
    if check:
        for item in report["problems"]:
            typer.echo(f"{item['path'] or directory}: {item['problem']}", err=True)
        typer.echo(f"{directory}: {'OK' if report['ok'] else 'problems found'}")
        raise typer.Exit(0 if report["ok"] else 1)
    if write:
        written = write_report_files(report, directory)
        figure = _draw_figure(report, directory)
        report["files"] = [p.name for p in written] + ([figure.name] if figure else [])
    if as_json:
        typer.echo(json.dumps(finite_or_none(report), indent=2))
    else:
        typer.echo(render_text(report), nl=False)
        if write:
            typer.echo(f"\nWritten in {directory}: {', '.join(report['files'])}")


def _single_profile_in(directory: Path) -> Path | None:
    """A metrics folder holding exactly one ``*_profiles`` folder (and no profile of its own)."""
    if not directory.is_dir() or (directory / "stage_times.json").exists():
        return None
    found = [p for p in directory.glob("*_profiles") if p.is_dir() and not p.is_symlink()]
    return found[0] if len(found) == 1 else None


def _draw_figure(report: dict[str, object], directory: Path) -> Path | None:
    from training_platform.profile_report.figure import draw_stage_figure
    from training_platform.profile_report.step_records import metrics_file_of, read_step_timings

    metrics = metrics_file_of(directory)
    steps = read_step_timings(metrics) if metrics is not None else []
    try:
        return draw_stage_figure(report, steps, directory / FIGURE_NAME)
    except ImportError:
        typer.echo(
            "(no figure: matplotlib is not installed; pip install 'training-platform[tools]')",
            err=True,
        )
        return None
