"""What the database commands that run without a server (`export`, `import`) share:
their `--database-url` and `--quiet` options, and known errors as one line on
stderr with exit status 1, never a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, NoReturn

import typer

from training_platform.errors import PlatformError

DatabaseUrlOption = Annotated[
    str | None, typer.Option(help="Database URL (env DATABASE_URL; default the server's).")
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def default_database_url() -> str:
    from pydantic import ValidationError

    from training_platform.settings import Settings

    try:
        return Settings().database_url
    except ValidationError as exc:
        fail(f"invalid settings: {exc.errors()[0]['msg']}")


@contextlib.contextmanager
def known_errors() -> Iterator[None]:
    from sqlalchemy.exc import ArgumentError, DBAPIError

    try:
        yield
    except PlatformError as exc:
        fail(str(exc))
    except ArgumentError as exc:
        fail(f"bad database URL: {exc}")
    except DBAPIError as exc:
        first = str(exc.orig or exc).strip().splitlines()
        fail(f"cannot use the database: {first[0] if first else exc.__class__.__name__}")
    except ModuleNotFoundError as exc:
        fail(f"bad database URL: its driver is not installed ({exc})")
