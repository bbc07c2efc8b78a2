"""`PLATFORM_LOG_FILE`: the server's log lines also go to a size-rotated file, same format."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from training_platform.cli import app
from training_platform.logging_setup import LogFile, logging_config, prepare_log_file
from training_platform.settings import Settings

# Logging is configured in a child process: this one keeps pytest's own handlers.
LOG_LINES = """
import logging, sys
from pathlib import Path
from training_platform.logging_setup import LogFile, configure_logging
path, max_bytes, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
configure_logging("info", sys.argv[4], LogFile(path, max_bytes=max_bytes, backups=2))
for number in range(count):
    logging.getLogger("training_platform.ingest").warning("line %04d %s", number, "x" * 40)
"""


def log_lines(path: Path, *, max_bytes: int, count: int, fmt: str = "text") -> str:
    """Log `count` lines through `configure_logging` in a child; its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", LOG_LINES, str(path), str(max_bytes), str(count), fmt],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stderr


def test_the_file_gets_the_same_lines_as_stderr_in_a_directory_it_creates(
    tmp_path: Path,
) -> None:
    path = tmp_path / "logs" / "nested" / "platform.log"

    stderr = log_lines(path, max_bytes=1 << 20, count=3)

    lines = path.read_text().splitlines()
    assert lines == stderr.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("WARNING training_platform.ingest [pid ")
    assert lines[0].endswith(": line 0000 " + "x" * 40)


def test_json_lines_go_to_the_file_too(tmp_path: Path) -> None:
    path = tmp_path / "platform.log"
    stderr = log_lines(path, max_bytes=1 << 20, count=2, fmt="json")
    assert path.read_text().splitlines() == stderr.splitlines()
    assert path.read_text().startswith('{"time": ')


def test_the_file_is_rotated_at_its_size_keeping_its_backups(tmp_path: Path) -> None:
    path = tmp_path / "platform.log"

    log_lines(path, max_bytes=1024, count=100)  # ~8 KB of lines, ~80 bytes each

    rotated = sorted(p.name for p in tmp_path.iterdir())
    assert rotated == ["platform.log", "platform.log.1", "platform.log.2"]
    assert all(p.stat().st_size <= 1024 for p in tmp_path.iterdir())
    # The newest lines are in the current file, the ones just before in .1.
    assert path.read_text().splitlines()[-1].endswith("line 0099 " + "x" * 40)
    newest_rotated = (tmp_path / "platform.log.1").read_text().splitlines()[-1]
    assert (
        int(path.read_text().split("line ")[1][:4]) == int(newest_rotated.split("line ")[1][:4]) + 1
    )


def test_without_a_file_there_is_only_the_stderr_handler(tmp_path: Path) -> None:
    assert logging_config("info", "text")["root"]["handlers"] == ["stderr"]
    config = logging_config("info", "text", LogFile(tmp_path / "p.log", 2048, 3))
    assert config["root"]["handlers"] == ["stderr", "file"]
    assert config["handlers"]["file"]["maxBytes"] == 2048
    assert config["handlers"]["file"]["backupCount"] == 3
    assert config["handlers"]["file"]["formatter"] == "platform"


def test_the_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    assert settings.log_file is None
    assert (settings.log_file_max_bytes, settings.log_file_backups) == (10 << 20, 5)
    monkeypatch.setenv("PLATFORM_LOG_FILE", "logs/platform.log")
    monkeypatch.setenv("PLATFORM_LOG_FILE_MAX_BYTES", "4096")
    assert Settings().log_file == Path("logs/platform.log")
    assert Settings().log_file_max_bytes == 4096
    monkeypatch.setenv("PLATFORM_LOG_FILE", "")
    assert Settings().log_file is None
    monkeypatch.setenv("PLATFORM_LOG_FILE_BACKUPS", "0")
    with pytest.raises(ValueError, match="PLATFORM_LOG_FILE_BACKUPS"):
        Settings()


def test_a_file_that_cannot_be_written_stops_serve_with_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    path = blocker / "platform.log"
    with pytest.raises(OSError, match="cannot write the log file"):
        prepare_log_file(path)
    with pytest.raises(OSError, match="Is a directory"):
        prepare_log_file(tmp_path)

    result = CliRunner().invoke(
        app,
        ["serve", "--port", "0", "--database-url", f"sqlite:///{tmp_path / 'p.db'}"],
        env={"PLATFORM_LOG_FILE": str(path)},
    )

    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: cannot write the log file {path} (PLATFORM_LOG_FILE): {blocker} is not a directory"
    ]
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # a real server in a subprocess: about 3 s
def test_serve_writes_its_lines_uvicorns_included_to_the_file(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    path = tmp_path / "logs" / "platform.log"
    environment = {**os.environ, "PLATFORM_LOG_FILE": str(path)}
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
        finally:
            server.terminate()
            server.wait(timeout=30)
        stderr.seek(0)
        on_stderr = stderr.read()
    written = path.read_text()
    assert f"[pid {server.pid}]: Application startup complete" in written
    assert '"GET /livez HTTP/1.1" 200' in written
    assert written.splitlines() == [line for line in on_stderr.splitlines() if "[pid " in line]
