"""`PLATFORM_LOG_FORMAT`: every server log line carries the pid; json is one object a line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from training_platform.logging_setup import JsonFormatter, logging_config
from training_platform.settings import Settings


def format_with(config: dict[str, object], record: logging.LogRecord) -> str:
    """`record` as the configured root handler writes it (built from the config, not
    applied globally: the test process keeps its own logging)."""
    formatters = config["formatters"]
    assert isinstance(formatters, dict)
    spec = formatters["platform"]
    formatter = spec["()"]() if "()" in spec else logging.Formatter(spec["format"])
    return str(formatter.format(record))


def a_record(
    message: str = "synced %s", *args: object, exc_info: object = None
) -> logging.LogRecord:
    return logging.LogRecord("training_platform.ingest", logging.WARNING, __file__, 1, message,
                             args or ("run1",), exc_info)  # type: ignore[arg-type]  # fmt: skip


def test_the_setting_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().log_format == "text"
    monkeypatch.setenv("PLATFORM_LOG_FORMAT", "json")
    assert Settings().log_format == "json"
    monkeypatch.setenv("PLATFORM_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="PLATFORM_LOG_FORMAT"):
        Settings()


def test_text_lines_carry_the_pid() -> None:
    line = format_with(logging_config("info", "text"), a_record())
    assert line == f"WARNING training_platform.ingest [pid {os.getpid()}]: synced run1"


def test_json_lines_parse_and_carry_the_pid_and_the_traceback() -> None:
    line = format_with(logging_config("info", "json"), a_record())
    entry = json.loads(line)
    assert entry.keys() == {"time", "level", "logger", "message", "pid"}
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "WARNING", "training_platform.ingest", "synced run1",
    )  # fmt: skip
    assert entry["pid"] == os.getpid()
    assert entry["time"].endswith("Z") and entry["time"][:2] == "20"

    try:
        raise ValueError("line 1\nline 2")
    except ValueError:
        record = a_record("sync of %s failed", "run2", exc_info=sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line  # one object per line, whatever the traceback holds
    entry = json.loads(line)
    assert entry["message"] == "sync of run2 failed"
    assert entry["exception"].startswith("Traceback")
    assert "ValueError: line 1\nline 2" in entry["exception"]


def test_the_config_routes_uvicorns_loggers_through_the_one_handler() -> None:
    config = logging_config("info", "json")
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert config["loggers"][name] == {"handlers": [], "propagate": True}
    assert config["root"] == {"level": "INFO", "handlers": ["stderr"]}
    assert config["disable_existing_loggers"] is False


@pytest.mark.slow  # a real server in a subprocess: about 3 s
def test_serve_with_json_logs_writes_only_json_lines_with_its_pid(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    environment = {**os.environ, "PLATFORM_LOG_FORMAT": "json"}
    log = io.StringIO()
    with (tmp_path / "stderr.log").open("w+") as stderr:
        server = subprocess.Popen(
            [
                sys.executable, "-m", "training_platform", "serve", "--port", "0",
                "--metrics-dir", str(metrics), "--database-url", f"sqlite:///{tmp_path / 'p.db'}",
            ],
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path, env=environment,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            banner = next(line for line in server.stdout if "training_platform: http://" in line)
            url = banner.split()[1].rstrip("/")
            assert httpx.get(f"{url}/livez", timeout=5).status_code == 200
            assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        finally:
            server.terminate()
            server.wait(timeout=30)
        stderr.seek(0)
        log.write(stderr.read())
    lines = [line for line in log.getvalue().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is JSON
    assert {entry["pid"] for entry in entries} == {server.pid}, lines
    loggers = {entry["logger"] for entry in entries}
    messages = [entry["message"] for entry in entries]
    # uvicorn's own lines, its access log included, follow the same format.
    assert "uvicorn.error" in loggers and "uvicorn.access" in loggers, lines
    assert any("Application startup complete" in message for message in messages), lines
    assert any('"GET /livez HTTP/1.1" 200' in message for message in messages), lines
