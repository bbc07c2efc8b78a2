"""The command line: `training-platform serve | migrate | sync | ...` (typer)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from training_platform.settings import Settings

app = typer.Typer(
    name="training-platform",
    help="Monitoring for LLM reinforcement-learning training runs.",
    no_args_is_help=True,
    add_completion=False,
)


HostOption = Annotated[str | None, typer.Option(help="Bind address (env PLATFORM_HOST).")]
PortOption = Annotated[int | None, typer.Option(help="Bind port (env PLATFORM_PORT).")]
MetricsDirOption = Annotated[
    Path | None, typer.Option(help="Metrics directory (env PLATFORM_METRICS_DIR).")
]
DatabaseUrlOption = Annotated[str | None, typer.Option(help="Database URL (env DATABASE_URL).")]


def _run_server(settings: Settings, log_level: str) -> None:
    import uvicorn

    from training_platform.api.main import create_app
    from training_platform.api.websocket import uvicorn_ws_options

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # watchfiles logs every batch of changes at INFO: noise for a long-running server.
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        **uvicorn_ws_options(settings),  # heartbeats, client message cap, no deflate
    )


def _settings(**overrides: Any) -> Settings:
    values = {key: value for key, value in overrides.items() if value is not None}
    return Settings(**values)


@app.command()
def serve(
    host: HostOption = None,
    port: PortOption = None,
    metrics_dir: MetricsDirOption = None,
    database_url: DatabaseUrlOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Start the API server, dashboard and live pipeline in this process."""
    settings = _settings(
        PLATFORM_HOST=host,
        PLATFORM_PORT=port,
        PLATFORM_METRICS_DIR=metrics_dir,
        DATABASE_URL=database_url,
    )
    _run_server(settings, log_level)


@app.command()
def migrate(
    database_url: DatabaseUrlOption = None,
) -> None:
    """Upgrade the database schema to the newest revision (a no-op when current)."""
    from training_platform.core.database import current_revision, make_engine, migrate_to_head

    settings = _settings(DATABASE_URL=database_url)
    engine = make_engine(settings.database_url)
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
    from training_platform.core.database import make_engine, make_session_factory, prepare_schema
    from training_platform.core.live_hub import LiveHub

    settings = _settings(PLATFORM_METRICS_DIR=metrics_dir, DATABASE_URL=database_url)
    engine = make_engine(settings.database_url)
    # The hub's service runs the platform's diagnosis after each commit, as the
    # server does; no event loop is needed for that.
    service = LiveHub.create(make_session_factory(engine), settings).service
    try:
        prepare_schema(engine, auto_migrate=settings.auto_migrate)
        outcomes = {job_id: service.sync_job(job_id)} if job_id is not None else service.poll_once()
        for name, outcome in sorted(outcomes.items()):
            result = outcome.result
            typer.echo(
                f"{name}: {result.new_metrics} new records, {result.lines_malformed} malformed "
                f"and {result.lines_oversized} oversized lines skipped, offset {result.offset}"
            )
    finally:
        service.close()
        engine.dispose()


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
        typer.Option(help="Inject a learning-rate spike (KL blow-up) at this step; 0: none."),
    ] = 400,
) -> None:
    """Serve the platform (embedded SQLite by default) with a live demo GRPO run."""
    import signal
    import subprocess
    import sys
    import time

    settings = _settings(
        PLATFORM_HOST=host,
        PLATFORM_PORT=port,
        PLATFORM_METRICS_DIR=metrics_dir,
        DATABASE_URL=database_url,
    )
    settings.metrics_dir.mkdir(parents=True, exist_ok=True)
    job_id = time.strftime("demo-grpo-%Y%m%d-%H%M%S")
    command = [
        sys.executable, "-m", "training_platform", "demo-train",
        "--job-id", job_id, "--output-dir", str(settings.metrics_dir),
        "--steps", str(steps), "--step-delay", str(step_delay), "--profile",
    ]  # fmt: skip
    if lr_spike_at:
        command += ["--lr-spike-at", str(lr_spike_at)]
    # A separate process, as a real trainer would be: its CPU work never
    # competes with the server's event loop for the GIL.
    trainer = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url = f"http://{settings.host}:{settings.port}"
    typer.echo(f"\n  training_platform demo: {url}/   (API docs: {url}/docs)")
    typer.echo(f"  demo run {job_id!r} writes to {settings.metrics_dir}; Ctrl-C stops both.\n")
    try:
        _run_server(settings, "info")
    finally:
        # SIGINT, not SIGTERM: the trainer sees KeyboardInterrupt, so its status
        # file says "stopped" instead of staying "running" forever.
        trainer.send_signal(signal.SIGINT)
        try:
            trainer.wait(timeout=10)
        except subprocess.TimeoutExpired:
            trainer.kill()


def _register_tools() -> None:
    # These modules import only typer at the top; torch and matplotlib load when run.
    from training_platform.demo.cli import demo_train
    from training_platform.tools.cli import gpu_check, profile_inference

    app.command("demo-train")(demo_train)
    app.command("gpu-check")(gpu_check)
    app.command("profile-inference")(profile_inference)


_register_tools()


def main() -> None:
    app()
