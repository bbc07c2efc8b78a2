"""The server's log lines: text or JSON, each with the process id (`PLATFORM_LOG_FORMAT`).

Several server processes may share one database (docs/platform.md,
"Operations"), and their logs usually end up in one place: every line says
which process wrote it.

- ``text`` (the default): ``INFO training_platform.api.main [pid 1234]: message``,
  a traceback after the line when there is one.
- ``json``: one object per line, ``{"time", "level", "logger", "message",
  "pid"}`` and ``"exception"`` (the traceback's text) when there is one, for
  log shippers (Loki, Elasticsearch, CloudWatch) that index fields.

Plain stdlib `logging` (a `Formatter` subclass): the records come from the
stdlib loggers of this package, uvicorn, SQLAlchemy and Alembic alike, and a
formatter is all that changes; a structured-logging library would add a
dependency to produce the same lines. Uvicorn's own loggers (its start-up lines
and the access log) lose their handlers and propagate to the root's one
handler, so they follow the same format.

`PLATFORM_LOG_FILE` adds a second handler on the root, the stdlib's
`RotatingFileHandler`, with the same formatter: every line goes to stderr and
to the file. It rotates by size (`PLATFORM_LOG_FILE_MAX_BYTES`, keeping
`PLATFORM_LOG_FILE_BACKUPS` old files), so a long-running server never fills
its disk. The handler is not safe for several processes on one file (each
would rotate it under the others): give each process a file of its own.
"""

from __future__ import annotations

import json
import logging
import logging.config
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from training_platform.errors import LogFileError

LogFormat = Literal["text", "json"]
TEXT_FORMAT: Final = "%(levelname)s %(name)s [pid %(process)d]: %(message)s"
UVICORN_LOGGERS: Final = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback's newlines are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info and not record.exc_text:
            # Cached on the record as logging.Formatter does, for other handlers.
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _iso_utc(created: float) -> str:
    """`2026-11-28T12:00:00.123Z`: UTC, milliseconds."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


@dataclass(frozen=True)
class LogFile:
    """Where the log lines also go (`PLATFORM_LOG_FILE` and its rotation)."""

    path: Path
    max_bytes: int = 10 << 20
    backups: int = 5


def logging_config(
    level: str, log_format: LogFormat, log_file: LogFile | None = None
) -> dict[str, Any]:
    """A `logging.config.dictConfig` dict: a stderr handler on the root logger, and
    a rotating file handler with the same formatter when `log_file` is given."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    handlers: dict[str, dict[str, Any]] = {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "platform",
            "stream": "ext://sys.stderr",
        }
    }
    if log_file is not None:
        handlers["file"] = {
            "class": "logging.handlers.RotatingFileHandler",
            "formatter": "platform",
            "filename": str(log_file.path),
            "maxBytes": log_file.max_bytes,
            "backupCount": log_file.backups,
            "encoding": "utf-8",
        }
    return {
        "version": 1,
        # Loggers created at import time (every module's `logger`) keep working.
        "disable_existing_loggers": False,
        "formatters": {"platform": formatter},
        "handlers": handlers,
        "root": {"level": level.upper(), "handlers": list(handlers)},
        "loggers": {
            # uvicorn's default config gives these handlers of their own (and
            # stops propagation): here they go through the root's handler.
            name: {"handlers": [], "propagate": True}
            for name in UVICORN_LOGGERS
        },
    }


def prepare_log_file(path: Path) -> Path:
    """Create the log file's directory and check that the file can be appended to,
    so that a bad `PLATFORM_LOG_FILE` stops the server at start with one clear line
    (`LogFileError`) rather than a traceback from inside `dictConfig`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except FileExistsError:  # mkdir's word for "a file is in the directory's place"
        reason = f"{path.parent} is not a directory"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        return path
    raise LogFileError(f"cannot write the log file {path} (PLATFORM_LOG_FILE): {reason}")


def configure_logging(level: str, log_format: LogFormat, log_file: LogFile | None = None) -> None:
    """Apply `logging_config`; call once, before the server starts."""
    if log_file is not None:
        prepare_log_file(log_file.path)
    logging.config.dictConfig(logging_config(level, log_format, log_file))
