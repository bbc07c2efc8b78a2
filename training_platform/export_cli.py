"""`training-platform export JOB_ID`: a run's records, samples or anomalies into a file,
straight from the database (no server), with a progress bar for long runs.

The same writers as the API's export endpoints (`history/export/`): the file
is the one `GET .../metrics/export` would send. It is written next to its
final name and renamed into place once complete, so an interrupted export
never leaves a file that looks whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from training_platform.cli_support import (
    DatabaseUrlOption,
    QuietOption,
    default_database_url,
    fail,
    known_errors,
)

FORMATS = ("csv", "parquet", "jsonl")


def export(
    job_id: Annotated[str, typer.Argument(help="The run's job id.")],
    format: Annotated[
        str, typer.Option("--format", "-f", help="parquet, csv or jsonl.")
    ] = "parquet",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The file (default: JOB_ID.FORMAT here)."),
    ] = None,
    samples: Annotated[
        bool, typer.Option("--samples", help="The generated samples instead of the metrics.")
    ] = False,
    anomalies: Annotated[
        bool, typer.Option("--anomalies", help="The anomaly rows instead of the metrics.")
    ] = False,
    fields: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated columns or groups (`reward.mean,loss`; flat names such as "
            "`kl_divergence_max` name their column so); default all."
        ),
    ] = None,
    start_step: Annotated[int | None, typer.Option(min=0, help="First step (inclusive).")] = None,
    end_step: Annotated[int | None, typer.Option(min=0, help="Last step (inclusive).")] = None,
    database_url: DatabaseUrlOption = None,
    quiet: QuietOption = False,
) -> None:
    """Export a run's stored records (or samples, or anomalies) to Parquet, CSV or JSONL."""
    if format not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if samples and anomalies:
        fail("give --samples or --anomalies, not both")
    kind = "samples" if samples else "anomalies" if anomalies else "metrics"
    names = None
    if fields is not None:
        names = [name.strip() for name in fields.split(",") if name.strip()] or fail(
            "--fields must name at least one column or group"
        )
    url = database_url or default_database_url()
    with known_errors():
        written, path = _run(
            url, job_id, kind, format, output, names, start_step, end_step, quiet=quiet
        )
    typer.echo(f"{written:,} rows of {job_id!r} ({kind}) written to {path}", err=True)


def _run(
    url: str,
    job_id: str,
    kind: Any,
    fmt: Any,
    output: Path | None,
    fields: list[str] | None,
    start_step: int | None,
    end_step: int | None,
    *,
    quiet: bool,
) -> tuple[int, Path]:
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    from training_platform.history.export.files import start_export
    from training_platform.store.database import make_engine, make_session_factory
    from training_platform.store.jobs import get_job

    if start_step is not None and end_step is not None and start_step > end_step:
        fail(f"--start-step {start_step} is after --end-step {end_step}")
    engine = make_engine(url)
    try:
        sessions = make_session_factory(engine)
        with sessions() as session:
            get_job(session, job_id)
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeRemainingColumn(),
            disable=quiet,
            transient=True,
        )
        task = progress.add_task(f"export {job_id} ({kind})", total=None)
        written = 0

        def on_chunk(rows: int, last_step: int) -> None:
            nonlocal written
            written += rows
            if kind != "anomalies":  # anomalies: the bar counts rows, unknown total
                progress.update(task, completed=last_step - (start_step or 0) + 1)

        # The plan (the snapshot's last step, the columns) comes first: the bar's total.
        export = start_export(
            sessions,
            job_id=job_id,
            kind=kind,
            fmt=fmt,
            start_step=start_step,
            end_step=end_step,
            fields=fields,
            on_chunk=on_chunk,
        )
        if export.plan.end is not None and kind != "anomalies":
            progress.update(task, total=export.plan.end - export.plan.start_step + 1)
        path = output if output is not None else Path(export.filename)
        partial = path.with_name(f".{path.name}.partial")
        try:
            with progress, partial.open("wb") as handle:
                for piece in export.body:
                    handle.write(piece)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return written, path
    finally:
        engine.dispose()
