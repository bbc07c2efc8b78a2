"""The `training-platform` command's first step: is what this command needs installed?

The base install is the trainer side's (orjson, psutil, the NVML bindings): a
training environment (verl, TRL, an image with pinned versions) must not get
the server's FastAPI, SQLAlchemy, paramiko, ... nor typer and the pydantic it
brings. The command line is typer, so it comes with the extras: `server` for
`serve`, `migrate`, `sync`, `demo`; `tools` for `gpu-check`, `profile-report`,
`profile-inference`. The console script still exists on a trainer-only
install (a wheel's scripts cannot depend on an extra), so it starts here,
with the standard library only, and a command whose packages are missing is
one line naming the install, never an ImportError's traceback. `sysmon` (a
node's system metrics, for the hosts of a run that run no callback) is the
trainer side's own command: it is handed its arguments here, with argparse,
and never imports typer.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence

PROG = "training-platform"
# Commands of the trainer-side install: argparse, dispatched here before typer.
TRAINER_COMMANDS = ("sysmon",)

# What a command needs, as the extras that bring it (pyproject.toml).
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("server",),
    "migrate": ("server",),
    "sync": ("server",),
    "export": ("server",),  # parquet also needs the export extra: the command says so
    "demo": ("server", "torch"),
    "demo-train": ("tools", "torch"),  # typer and torch; `demo` runs it with the server's typer
    "gpu-check": ("tools",),  # without torch it reports the host and says so
    "profile-report": ("tools",),
    "profile-inference": ("tools", "torch"),
    "profile": ("tools", "torch"),  # a profiled demo run
    "profile-run": ("tools",),  # the user's command brings its own torch
    "verify-determinism": ("tools", "torch"),
    "verify-profile": ("tools",),
    "verify-dashboard": ("server",),  # ingests and serves the log with the platform's app
}

# The modules that tell an extra is installed. Only what a command cannot run
# without: matplotlib draws the PNGs alone, and without it the commands say so.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "server": (
        "fastapi",  # first: the one a user recognises as "the server" in the hint
        "uvicorn",
        "sqlalchemy",
        "alembic",
        "pydantic_settings",
        "paramiko",
        "psycopg",
        "watchfiles",
        "prometheus_client",  # GET /metrics
        "numpy",  # the system history's buckets
        "websockets",
        "typer",
    ),
    "tools": ("typer",),
    "torch": ("torch",),
}


def is_installed(module: str) -> bool:
    # find_spec locates the top-level package without importing it: this runs
    # before every command, and must not cost an import of FastAPI.
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand: the first word that is not an option (the app's own
    options are only `--help`; none takes a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def missing_install(
    argv: Sequence[str], installed: Callable[[str], bool] = is_installed
) -> str | None:
    """The one line to print when `argv`'s command cannot run here; None when it can."""
    command = command_of(argv)
    if command not in COMMAND_EXTRAS:
        # No command, --help, or a misspelt one: typer answers those, if it is here.
        if installed("typer"):
            return None
        return (
            f"{PROG}'s commands need the server or tools install: "
            f"pip install '{PROG}[server]' (serve, migrate, sync, demo) "
            f"or '{PROG}[tools]' (gpu-check, profile-report, profile-inference); "
            f"this install runs `{PROG} sysmon`"
        )
    lacking = [
        (extra, module)
        for extra in COMMAND_EXTRAS[command]
        for module in EXTRA_MODULES[extra]
        if not installed(module)
    ]
    if not lacking:
        return None
    extras = list(dict.fromkeys(extra for extra, _ in lacking))
    plural = "s" if len(extras) > 1 else ""
    return (
        f"{PROG} {command} needs the {' and '.join(extras)} install{plural}: "
        f"pip install '{PROG}[{','.join(extras)}]' ({lacking[0][1]} is not installed)"
    )


def main() -> None:
    argv = sys.argv[1:]
    if command_of(argv) in TRAINER_COMMANDS:
        from training_platform.callbacks.system.sysmon import main as sysmon

        raise SystemExit(sysmon(argv[argv.index("sysmon") + 1 :]))
    message = missing_install(argv)
    if message is not None:
        print(message, file=sys.stderr)
        raise SystemExit(1)
    from training_platform.cli import main as run_cli

    run_cli()
