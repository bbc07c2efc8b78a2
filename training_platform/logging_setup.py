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
"""

from __future__ import annotations

import json
import logging
import logging.config
import time
from typing import Any, Final, Literal

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


def logging_config(level: str, log_format: LogFormat) -> dict[str, Any]:
    """A `logging.config.dictConfig` dict: one stderr handler on the root logger."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    return {
        "version": 1,
        # Loggers created at import time (every module's `logger`) keep working.
        "disable_existing_loggers": False,
        "formatters": {"platform": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "platform",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {
            # uvicorn's default config gives these handlers of their own (and
            # stops propagation): here they go through the root's handler.
            name: {"handlers": [], "propagate": True}
            for name in UVICORN_LOGGERS
        },
    }


def configure_logging(level: str, log_format: LogFormat) -> None:
    """Apply `logging_config`; call once, before the server starts."""
    logging.config.dictConfig(logging_config(level, log_format))
