"""`training-platform import PATH`: finished runs into the database, once, without a server.

PATH is a run's file or a directory of them. Each is registered as a job in
its directory (as `POST /api/jobs` would), its id from its name (the readers
find a job's file by its id: `--job-id` comes with the by-name reads of
issue 27), and ingested to its end by the
sync service the server uses, so an import is exactly once like any sync:
importing again stores nothing new, and a file that grew since is read on
from where the last import stopped. `--format auto` tells the formats apart
by name and first line:

- `{job_id}_metrics.jsonl`: the platform's own (the callback's files);
- `{job_id}.jsonl` whose first line is `{"step": N, "data": {...}}`: verl's
  file logger (`verl_file`);
- anything else is named and skipped. TensorBoard, MLflow, W&B and Trackio
  runs are being built (issue 27).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from training_platform.cli_support import DatabaseUrlOption, QuietOption, fail, known_errors
from training_platform.errors import PlatformError

FORMATS = ("auto", "platform", "verl_file")
_PLATFORM_SUFFIX = "_metrics.jsonl"
_OTHER_PLATFORM_FILES = ("_samples.jsonl", "_system.jsonl")


def sniff(path: Path) -> tuple[str, str] | None:
    """(job id, format) of a run's file, or None when it is not one we read."""
    name = path.name
    if name.endswith(_PLATFORM_SUFFIX):
        return name.removesuffix(_PLATFORM_SUFFIX), "platform"
    if not name.endswith(".jsonl") or name.endswith(_OTHER_PLATFORM_FILES) or "_system." in name:
        return None
    with path.open("rb") as handle:
        first = handle.readline(1 << 20)
    try:
        line = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    if (
        isinstance(line, dict)
        and type(line.get("step")) is int
        and isinstance(line.get("data"), dict)
    ):
        return name.removesuffix(".jsonl"), "verl_file"
    return None


def _runs(path: Path, format: str) -> list[tuple[Path, str, str]]:
    """(file, job id, format) of every run to import under `path`."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    runs = []
    for file in files:
        found = sniff(file)
        if found is None:
            if path.is_file():
                fail(f"{file}: not a run's file this version reads (see --help)")
            continue
        name, sniffed = found
        if format != "auto":
            sniffed = format
            name = file.name.removesuffix(_PLATFORM_SUFFIX if format == "platform" else ".jsonl")
        runs.append((file, name, sniffed))
    return runs


def import_runs(
    path: Annotated[Path, typer.Argument(help="A run's file, or a directory of them.")],
    format: Annotated[
        str, typer.Option("--format", "-f", help="auto, platform or verl_file.")
    ] = "auto",
    database_url: DatabaseUrlOption = None,
    quiet: QuietOption = False,
) -> None:
    """Import finished runs (the platform's files, verl's file logger) without a server."""
    if format not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if not path.exists():
        fail(f"{path} does not exist")
    runs = _runs(path.resolve(), format)
    if not runs:
        fail(f"no run found in {path} (platform `*_metrics.jsonl`, verl `*.jsonl`)")
    from training_platform.services import build_services
    from training_platform.settings import Settings
    from training_platform.store.database import make_engine, make_session_factory, prepare_schema

    settings = Settings() if database_url is None else Settings(database_url=database_url)
    failed = 0
    with known_errors():  # a bad URL, a database that is down: one line, exit 1
        engine = make_engine(settings.database_url)
        try:
            prepare_schema(engine, auto_migrate=settings.auto_migrate)
            services = build_services(make_session_factory(engine), settings)
            try:
                with _progress(quiet) as progress:
                    for file, name, kind in runs:
                        failed += not _import_one(services, settings, file, name, kind, progress)
            finally:
                services.close()
        finally:
            engine.dispose()
    if failed:
        raise typer.Exit(1)


def _import_one(
    services: Any, settings: Any, file: Path, job_id: str, kind: str, progress: Any
) -> bool:
    from training_platform.ingest.registry import register_job

    try:
        with services.sync.session_factory.begin() as session:
            register_job(
                session, settings, job_id=job_id, metrics_dir=str(file.parent), format=kind
            )
    except PlatformError as exc:
        typer.echo(f"{job_id}: not imported: {exc}", err=True)
        return False
    size = file.stat().st_size
    task = progress.add_task(f"{job_id} ({kind})", total=size) if progress else None
    records = malformed = 0
    while True:  # a batch budget at a time, so the bar moves
        result = services.sync.sync_job(job_id, budget=0.5).result
        records += result.new_metrics
        malformed += result.lines_malformed + result.lines_oversized
        if progress:
            progress.update(task, completed=min(result.offset, size))
        if result.at_eof:
            break
    typer.echo(f"{job_id} ({kind}, {file}): {records} new records, {malformed} bad lines skipped")
    return True


@contextlib.contextmanager
def _progress(quiet: bool) -> Any:
    if quiet:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn()) as progress:
        yield progress
