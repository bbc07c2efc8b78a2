"""`training-platform import PATH`: finished runs into the database, once, without a server.

PATH is a run's file, a TensorBoard run directory, or a directory of runs.
Each run is registered as a job where it lies (as `POST /api/jobs` would) and
ingested to its end by the sync service the server uses, so an import is
exactly once like any sync: importing again stores nothing new, and a run
that grew since is read on from where the last import stopped. `--format
auto` tells the formats apart by name and first line:

- `{job_id}_metrics.jsonl`: the platform's own (the callback's files);
- `*.jsonl` whose first line is `{"step": N, "data": {...}}`: verl's file
  logger (`verl_file`), its job id the file's name unless `--job-id`;
- a directory holding `events.out.tfevents.*` files: a TensorBoard run
  (`tensorboard`), its job id the directory's name (below PATH: its relative
  path, `grpo/seed1` -> `grpo.seed1`) unless `--job-id`;
- `{project}.db` holding Trackio's tables: each of its runs (`trackio`),
  its job id `{project}.{run}` unless `--job-id`, its project the Trackio
  project;
- a W&B offline run directory (`offline-run-*`, holding `run-<id>.wandb`),
  or a `wandb/` directory of them (`wandb`), named like TensorBoard runs;
- a SQLite file holding MLflow's tables (`mlflow.db`): each of its runs
  (`mlflow`), its job id `{experiment}.{run name}`, its project the
  experiment; an MLflow file store's directory (`mlruns/`) the same way;
- anything else is named and skipped.

`--project` sets the project of every run imported.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from training_platform.cli_support import DatabaseUrlOption, QuietOption, fail, known_errors
from training_platform.errors import PlatformError

FORMATS = ("auto", "platform", "verl_file", "tensorboard", "trackio", "mlflow", "wandb")
_PLATFORM_SUFFIX = "_metrics.jsonl"
_OTHER_PLATFORM_FILES = ("_samples.jsonl", "_system.jsonl")


@dataclass(frozen=True)
class Run:
    path: Path  # its file, or its directory (TensorBoard)
    job_id: str
    format: str
    project: str | None = None  # a TensorBoard run's parent below PATH; Trackio's project
    name: str | None = None  # a TensorBoard run's path below PATH
    run: str | None = None  # a Trackio run's name in its project's database

    @property
    def directory(self) -> Path:
        return self.path if self.path.is_dir() else self.path.parent

    @property
    def file(self) -> str | None:
        """verl's file when its name is not `{job_id}.jsonl` (Trackio's is its project's)."""
        named = self.format == "verl_file" and self.path.name != f"{self.job_id}.jsonl"
        return self.path.name if named else None


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


def find_runs(path: Path, format: str) -> list[Run]:
    """Every run to import under `path` (a file, a run directory or a directory of runs)."""
    from training_platform.ingest.formats.run_discovery import find_tool_runs, run_job_id
    from training_platform.ingest.formats.tensorboard_files import is_event_file
    from training_platform.ingest.formats.wandb_log import is_run_file

    DIRECTORY_FORMATS = {"tensorboard": is_event_file, "wandb": is_run_file}

    if path.is_dir() and format in ("auto", "mlflow") and (file_runs := mlflow_file_runs(path)):
        return file_runs  # PATH is an MLflow file store (`mlruns/`)
    if path.is_dir() and format in ("auto", *DIRECTORY_FORMATS):
        names = [entry.name for entry in path.iterdir()]
        for kind, holds in DIRECTORY_FORMATS.items():
            if format in ("auto", kind) and any(map(holds, names)):
                return [Run(path, run_job_id(path.name), kind)]  # PATH is one run
        runs = [
            Run(found.directory, found.job_id, found.format, found.project, found.name)
            for found in find_tool_runs(path)
            if format in ("auto", found.format)
        ]
        if format in DIRECTORY_FORMATS:
            return runs
    else:
        runs = []
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    for file in files:
        if format in ("auto", "trackio", "mlflow") and file.suffix == ".db":
            found_runs = [] if format == "mlflow" else trackio_runs(file)
            runs += found_runs or ([] if format == "trackio" else mlflow_runs(file))
            continue
        found = sniff(file)
        if found is None:
            if path.is_file():
                fail(f"{file}: not a run's file this version reads (see --help)")
            continue
        name, sniffed = found
        if format != "auto":
            sniffed = format
            name = file.name.removesuffix(_PLATFORM_SUFFIX if format == "platform" else ".jsonl")
        runs.append(Run(file, name, sniffed))
    return runs


def trackio_runs(database: Path) -> list[Run]:
    """Each run of a Trackio project database (none when it is not one)."""
    import sqlite3

    from training_platform.ingest.formats.run_discovery import run_job_id

    project = database.stem
    try:
        with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as connection:
            names = connection.execute(
                "SELECT run_name FROM metrics GROUP BY run_name ORDER BY MIN(id)"
            ).fetchall()
    except sqlite3.Error:
        return []  # not Trackio's
    return [
        Run(database, run_job_id(f"{project}/{name}"), "trackio", project, name, name)
        for (name,) in names
    ]


def mlflow_runs(database: Path) -> list[Run]:
    """Each active run of an MLflow SQLite tracking database (none when it is not one)."""
    import sqlite3

    from training_platform.ingest.formats.run_discovery import run_job_id

    try:
        with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as connection:
            found = connection.execute(
                "SELECT runs.run_uuid, runs.name, experiments.name FROM runs"
                " JOIN experiments ON experiments.experiment_id = runs.experiment_id"
                " WHERE runs.lifecycle_stage = 'active' ORDER BY runs.start_time"
            ).fetchall()
    except sqlite3.Error:
        return []  # not MLflow's
    return [
        Run(database, run_job_id(f"{experiment}/{name or run_id}"), "mlflow", experiment,
            name or run_id, run_id)
        for run_id, name, experiment in found
    ]  # fmt: skip


def mlflow_file_runs(root: Path) -> list[Run]:
    """Each active run of an MLflow file store, `<root>/<experiment>/<run id>/meta.yaml`
    (none when `root` is not one), named as a SQLite store's runs are."""
    from training_platform.ingest.formats.mlflow_files import run_meta
    from training_platform.ingest.formats.run_discovery import run_job_id

    runs = []
    for experiment in sorted(p for p in root.iterdir() if (p / "meta.yaml").is_file()):
        title = run_meta(experiment).get("name") or experiment.name
        for directory in sorted(p for p in experiment.iterdir() if (p / "meta.yaml").is_file()):
            meta = run_meta(directory)
            if meta.get("lifecycle_stage", "active") == "active":
                name = meta.get("run_name") or directory.name
                runs.append(Run(root, run_job_id(f"{title}/{name}"), "mlflow", title, name,
                                directory.name))  # fmt: skip
    return runs


def import_runs(
    path: Annotated[
        Path,
        typer.Argument(help="A run's file, a TensorBoard run directory, or a directory of runs."),
    ],
    format: Annotated[
        str,
        typer.Option("--format", "-f", help="auto, " + ", ".join(FORMATS[1:]) + "."),
    ] = "auto",
    job_id: Annotated[
        str | None,
        typer.Option("--job-id", help="The job id of the one run found (default: from its name)."),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="The project of every run imported.")
    ] = None,
    database_url: DatabaseUrlOption = None,
    quiet: QuietOption = False,
) -> None:
    """Import finished runs (the platform's files, verl's file logger, TensorBoard), serverless."""
    if format not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if not path.exists():
        fail(f"{path} does not exist")
    runs = find_runs(path.resolve(), format)
    if not runs:
        fail(f"no run found in {path} (platform `*_metrics.jsonl`, verl `*.jsonl`, TensorBoard)")
    if job_id is not None:
        if len(runs) != 1:
            fail(f"--job-id names one run; {path} holds {len(runs)}")
        if runs[0].format == "platform":
            fail("--job-id: the platform's files are named by their job id (`{job_id}_*`)")
        only = runs[0]
        runs = [Run(only.path, job_id, only.format, only.project, only.name, only.run)]
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
                    for run in runs:
                        failed += not _import_one(services, settings, run, project, progress)
            finally:
                services.close()
        finally:
            engine.dispose()
    if failed:
        raise typer.Exit(1)


def _import_one(services: Any, settings: Any, run: Run, project: str | None, progress: Any) -> bool:
    from training_platform.ingest.registry import register_job
    from training_platform.ingest.run_file import store_run_about

    try:
        with services.sync.session_factory.begin() as session:
            trackio, mlflow = run.format == "trackio", run.format == "mlflow"
            register_job(
                session, settings, job_id=run.job_id,
                metrics_dir=None if mlflow else str(run.directory),
                format=run.format, file=None if trackio or mlflow else run.file,
                project=run.project if trackio else None, run=run.run,
                tracking_uri=None if not mlflow else run.path.as_uri() if run.path.is_dir()
                else f"sqlite:///{run.path}",  # a file store, or a SQLite store
            )  # fmt: skip
            if project is not None or run.project is not None or run.name is not None:
                store_run_about(session, run.job_id, project=project or run.project, name=run.name)
    except PlatformError as exc:
        typer.echo(f"{run.job_id}: not imported: {exc}", err=True)
        return False
    size = _size(run.path)
    task = progress.add_task(f"{run.job_id} ({run.format})", total=size) if progress else None
    records = malformed = 0
    while True:  # a batch budget at a time, so the bar moves
        result = services.sync.sync_job(run.job_id, budget=0.5).result
        records += result.new_metrics
        malformed += result.lines_malformed + result.lines_oversized
        if progress:
            done = _read_so_far(services, run.job_id) if run.path.is_dir() else result.offset
            progress.update(task, completed=size if result.at_eof else min(done, size))
        if result.at_eof:
            break
    what = "bad lines" if run.format in ("platform", "verl_file") else "bad records"
    typer.echo(
        f"{run.job_id} ({run.format}, {run.path}): {records} new records, "
        f"{malformed} {what} skipped"
    )
    return True


def _size(path: Path) -> int:
    if path.suffix == ".db":  # Trackio's: a row cursor, not bytes
        return 1
    if path.is_file():
        return path.stat().st_size
    files = [*path.rglob("events.out*"), *path.glob("run-*.wandb")]
    return sum(file.stat().st_size for file in files if file.is_file())


def _read_so_far(services: Any, job_id: str) -> int:
    """Bytes of a TensorBoard or W&B run's files read so far (their committed offsets)."""
    from sqlalchemy import func, select

    from training_platform.ingest.formats.tensorboard_files import KIND_PREFIX
    from training_platform.store.models import SyncState

    with services.sync.session_factory() as session:
        total = session.scalar(
            select(func.sum(SyncState.offset)).where(
                SyncState.job_id == job_id, SyncState.kind.startswith(KIND_PREFIX)
            )
        )
        return int(total or 0)


@contextlib.contextmanager
def _progress(quiet: bool) -> Any:
    if quiet:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn()) as progress:
        yield progress
