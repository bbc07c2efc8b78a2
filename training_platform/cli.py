"""The command line: `training-platform serve | migrate | sync | ...` (typer).

A known error (unknown job, bad database URL, unreachable database, missing
directory) is one line on stderr and exit status 1, never a traceback:
`_known_errors` turns them into that. Anything else is a bug and keeps its
traceback.

The console script starts in `entry.py`, which checks that the command's
install (the `server` or `tools` extra) is there before this module is
imported: the base install is the trainer side's and has no typer.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from training_platform.errors import PlatformError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from training_platform.settings import Settings

app = typer.Typer(
    name="training-platform",
    help="Monitoring for LLM reinforcement-learning training runs.",
    no_args_is_help=True,
    add_completion=False,
)


def _default_of(name: str) -> str | bool:
    """A setting's default as `--help` shows it (the option's own default is None:
    unset means "the environment variable, else the setting's default")."""
    try:
        from training_platform.settings import Settings
    except ImportError:
        # The tools install has typer but not pydantic-settings: this module must
        # still import for gpu-check and profile-report (entry.py stops the
        # server's commands before they run).
        return True
    field = Settings.model_fields[name]
    value = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
    return str(value)


HostOption = Annotated[
    str | None,
    typer.Option(help="Bind address (env PLATFORM_HOST).", show_default=_default_of("host")),
]
PortOption = Annotated[
    int | None,
    typer.Option(help="Bind port (env PLATFORM_PORT).", show_default=_default_of("port")),
]
MetricsDirOption = Annotated[
    Path | None,
    typer.Option(
        help="Metrics directory, where PlatformCallback writes by default too "
        "(env PLATFORM_METRICS_DIR; default: the user's data directory).",
        show_default=_default_of("metrics_dir"),
    ),
]
DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(help="Database URL (env DATABASE_URL).", show_default=_default_of("database_url")),
]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


@contextlib.contextmanager
def _known_errors(database_url: str | None = None) -> Iterator[None]:
    """Known errors as one line on stderr and exit status 1."""
    from alembic.util.exc import CommandError
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    where = ""
    if database_url is not None:
        with contextlib.suppress(Exception):
            where = f" at {make_url(database_url).render_as_string(hide_password=True)}"
    try:
        yield
    except PlatformError as exc:
        _fail(str(exc))
    except ArgumentError as exc:  # NoSuchModuleError too: an unknown dialect
        _fail(f"bad database URL {database_url!r}: {_first_line(exc)}")
    except DBAPIError as exc:  # unreachable server, refused login, unwritable file, ...
        _fail(f"cannot use the database{where}: {_first_line(exc)}")
    except CommandError as exc:
        _fail(f"migration failed: {_first_line(exc)}")


def _ensure_metrics_dir(directory: Path) -> Path:
    """The watched directory, created when missing (no trainer may have run yet), as
    an absolute path; one line and exit 1 when it cannot be created."""
    from training_platform.callbacks.wire.locations import ensure_metrics_dir
    from training_platform.errors import MetricsDirError

    try:
        return ensure_metrics_dir(directory).resolve()
    except MetricsDirError as exc:
        _fail(str(exc))


def _open_engine(url: str) -> Engine:
    from training_platform.store.database import make_engine

    try:
        return make_engine(url)
    except ModuleNotFoundError as exc:  # e.g. mysql:// without its driver
        _fail(f"bad database URL {url!r}: its driver is not installed ({exc})")


def _settings(**overrides: Any) -> Settings:
    from pydantic import ValidationError

    from training_platform.settings import Settings

    values = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'settings'}: {error['msg']}"
            for error in exc.errors()
        )
        _fail(f"invalid settings: {problems}")


@app.command()
def serve(
    host: HostOption = None,
    port: PortOption = None,
    metrics_dir: MetricsDirOption = None,
    database_url: DatabaseUrlOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.", show_default=True)] = "info",
) -> None:
    """Start the API server, dashboard and live pipeline in this process."""
    from training_platform.serving import run_server

    settings = _settings(
        PLATFORM_HOST=host,
        PLATFORM_PORT=port,
        PLATFORM_METRICS_DIR=metrics_dir,
        DATABASE_URL=database_url,
    )
    _check_log_file(settings)
    _check_database(settings.database_url)
    watched = _ensure_metrics_dir(settings.metrics_dir)

    def banner(url: str) -> None:
        typer.echo(f"\n  training_platform: {url}/   (API docs: {url}/docs)")
        typer.echo(f"  watching {watched} for runs; Ctrl-C stops the server.\n")

    from training_platform.store.sqlite_guard import sole_server

    with contextlib.ExitStack() as held:
        with _known_errors(settings.database_url):  # a second server on one SQLite file
            held.enter_context(sole_server(settings.database_url))
        run_server(settings, log_level, announce=banner)


def _check_log_file(settings: Settings) -> None:
    """`PLATFORM_LOG_FILE` writable (its directory created), else one line and exit 1."""
    if settings.log_file is not None:
        from training_platform.logging_setup import prepare_log_file

        with _known_errors():
            prepare_log_file(settings.log_file)


def _check_database(url: str) -> None:
    """Connect once before starting: a bad URL or a database that is down is one
    line here, rather than a traceback from inside the server's startup."""
    with _known_errors(url):
        engine = _open_engine(url)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()


@app.command()
def migrate(
    database_url: DatabaseUrlOption = None,
) -> None:
    """Upgrade the database schema to the newest revision (a no-op when current)."""
    from training_platform.store.database import current_revision, migrate_to_head

    settings = _settings(DATABASE_URL=database_url)
    with _known_errors(settings.database_url):
        engine = _open_engine(settings.database_url)
        try:
            before = current_revision(engine)
            migrate_to_head(engine)
            after = current_revision(engine)
        finally:
            engine.dispose()
    if before == after:
        typer.echo(f"database already at revision {after}")
    else:
        typer.echo(f"database migrated from {before or 'empty'} to {after}")


@app.command()
def sync(
    job_id: Annotated[
        str | None, typer.Argument(help="Only this job (default: every known job).")
    ] = None,
    metrics_dir: MetricsDirOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Discover jobs and ingest new lines once, without starting the server."""
    from training_platform.ingest.polling import poll_once
    from training_platform.services import build_services
    from training_platform.store.database import make_session_factory, prepare_schema

    settings = _settings(PLATFORM_METRICS_DIR=metrics_dir, DATABASE_URL=database_url)
    directory = settings.metrics_dir
    if not directory.is_dir():
        # Named on purpose: a typo must not pass as "nothing new".
        if metrics_dir is not None:
            _fail(f"metrics directory {str(directory)!r} does not exist")
        typer.echo(
            f"note: metrics directory {str(directory)!r} does not exist; "
            "only registered jobs are synced",
            err=True,
        )
    with _known_errors(settings.database_url):
        engine = _open_engine(settings.database_url)
        # Built as the server builds them: the platform's diagnosis runs after
        # each commit, stalls are marked; no event loop is needed for that.
        services = build_services(make_session_factory(engine), settings)
        try:
            prepare_schema(engine, auto_migrate=settings.auto_migrate)
            if job_id is not None:
                outcomes = {job_id: services.sync.sync_job(job_id)}
            else:
                outcomes = poll_once(services.sync, services.poll_rule)
        finally:
            services.close()
            engine.dispose()
    if not outcomes:
        typer.echo(f"no jobs: none registered and none in {str(directory)!r}")
    for name, outcome in sorted(outcomes.items()):
        result = outcome.result
        typer.echo(
            f"{name}: {result.new_metrics} new records, {result.lines_malformed} malformed "
            f"and {result.lines_oversized} oversized lines skipped, offset {result.offset}"
        )


@app.command()
def demo(
    host: HostOption = None,
    port: PortOption = None,
    metrics_dir: MetricsDirOption = None,
    database_url: DatabaseUrlOption = None,
    steps: Annotated[int, typer.Option(min=1, help="GRPO steps of the demo run.")] = 3000,
    step_delay: Annotated[
        float, typer.Option(min=0.0, help="Seconds between steps, so charts move visibly.")
    ] = 0.1,
    lr_spike_at: Annotated[
        int | None,
        typer.Option(
            help="Inject a learning-rate spike (KL blow-up) at this step of the first run; 0: none."
        ),
    ] = 400,
    lr: Annotated[
        list[float] | None,
        typer.Option(
            "--lr",
            min=0.0,
            help="One demo run per learning rate (repeat to compare runs: --lr 2e-3 --lr 5e-4); "
            "default: one run at 2e-3.",
        ),
    ] = None,
) -> None:
    """Serve the platform (embedded SQLite by default) with live demo GRPO runs."""
    import sys
    import time

    from training_platform.demo.launcher import DemoTrainer
    from training_platform.serving import run_server

    settings = _settings(
        PLATFORM_HOST=host,
        PLATFORM_PORT=port,
        PLATFORM_METRICS_DIR=metrics_dir,
        DATABASE_URL=database_url,
    )
    _check_log_file(settings)
    # Absolute, so the demo trainers (child processes) write exactly where the server reads.
    watched = _ensure_metrics_dir(settings.metrics_dir)
    stamp = time.strftime("demo-grpo-%Y%m%d-%H%M%S")
    rates: list[float | None] = list(lr) if lr else [None]
    trainers = []
    for number, rate in enumerate(rates):
        job_id = stamp if len(rates) == 1 else f"{stamp}-lr{rate:g}"
        command = [
            sys.executable, "-m", "training_platform", "demo-train",
            "--job-id", job_id, "--output-dir", str(watched),
            "--steps", str(steps), "--step-delay", str(step_delay), "--profile",
            "--seed", "0",
        ]  # fmt: skip
        if rate is not None:
            command += ["--lr", repr(rate)]
        if lr_spike_at and number == 0:  # one faulty run beside the healthy ones
            command += ["--lr-spike-at", str(lr_spike_at)]
        # A separate process, as a real trainer would be: its CPU work never
        # competes with the server's event loop for the GIL. DemoTrainer filters
        # the profiler's chatter from its output and reaps it when the run ends.
        trainers.append((job_id, DemoTrainer(command)))
    # uvicorn re-raises a SIGTERM it handled once the server is down: with the
    # default disposition this process would die there, before `finally`
    # stops the trainer, which would run on orphaned.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    names = ", ".join(repr(job_id) for job_id, _ in trainers)

    def banner(url: str) -> None:
        typer.echo(f"\n  training_platform demo: {url}/   (API docs: {url}/docs)")
        typer.echo(f"  demo runs {names} write to {watched}, which the server watches;")
        typer.echo("  Ctrl-C stops all.")
        if len(trainers) > 1:
            jobs = ",".join(job_id for job_id, _ in trainers)
            typer.echo(f"  compare them: {url}/#/compare?jobs={jobs}")
        typer.echo("")

    try:
        # No access log: the dashboard polls, and a line per request buries the rest.
        run_server(settings, "info", announce=banner, access_log=False)
    finally:
        for _, trainer in trainers:  # SIGINT: a run ends "stopped", not "running" forever
            trainer.stop()


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _register_tools() -> None:
    # These modules import only typer at the top; torch and matplotlib load when run.
    from training_platform.demo.cli import demo_train
    from training_platform.export_cli import export
    from training_platform.import_cli import import_runs
    from training_platform.profile_report.cli import profile_report
    from training_platform.tools.cli import gpu_check, profile_inference
    from training_platform.tools.verify_cli import (
        profile,
        profile_run,
        verify_dashboard,
        verify_determinism,
        verify_profile,
    )

    app.command("demo-train")(demo_train)
    app.command("export")(export)
    app.command("import")(import_runs)
    app.command("gpu-check")(gpu_check)
    app.command("profile-inference")(profile_inference)
    app.command("profile-report")(profile_report)
    # The profiling documents' commands (docs/profiling.md; the Makefile's targets).
    app.command("profile")(profile)
    app.command("profile-run")(profile_run)
    app.command("verify-determinism")(verify_determinism)
    app.command("verify-profile")(verify_profile)
    app.command("verify-dashboard")(verify_dashboard)


_register_tools()


def main() -> None:
    app()
