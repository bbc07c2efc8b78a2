"""The command line: known errors are one line and a non-zero exit; `--help` shows defaults."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.locations import default_output_dir
from training_platform.callbacks.wire.records import build_record
from training_platform.cli import app
from training_platform.settings import Settings

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def assert_one_line_error(code: int, stderr: str, *expected: str) -> None:
    assert code == 1
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    for text in expected:
        assert text in lines[0]


def test_sync_of_an_unknown_job_is_one_line_and_exit_1(database_url: str, tmp_path: Path) -> None:
    code, _, stderr = run(
        "sync", "nosuch-job", "--database-url", database_url, "--metrics-dir", str(tmp_path)
    )
    assert_one_line_error(code, stderr, "job 'nosuch-job' not found")


def test_sync_of_a_missing_metrics_dir_fails_instead_of_doing_nothing(
    database_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nonexistent"
    code, stdout, stderr = run(
        "sync", "--metrics-dir", str(missing), "--database-url", database_url
    )
    assert_one_line_error(code, stderr, "metrics directory", str(missing), "does not exist")
    assert stdout == ""


def test_sync_ingests_and_says_so(database_url: str, metrics_dir: Path) -> None:
    with (metrics_dir / "run1_metrics.jsonl").open("wb") as handle:
        for step in range(3):
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=1.0)))
    code, stdout, _ = run("sync", "--metrics-dir", str(metrics_dir), "--database-url", database_url)
    assert code == 0
    assert stdout.startswith("run1: 3 new records")


def test_sync_with_no_jobs_at_all_says_so(database_url: str, metrics_dir: Path) -> None:
    code, stdout, _ = run("sync", "--metrics-dir", str(metrics_dir), "--database-url", database_url)
    assert code == 0
    assert stdout.startswith("no jobs")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("notaurl", "bad database URL 'notaurl'"),
        ("nosuchdialect://x/y", "bad database URL"),
        ("mysql://user@host/db", "driver is not installed"),
        ("postgresql+psycopg://postgres@127.0.0.1:1/x", "cannot use the database at"),
    ],
)
def test_migrate_with_a_bad_or_unreachable_database_is_one_line(url: str, expected: str) -> None:
    code, _, stderr = run("migrate", "--database-url", url)
    assert_one_line_error(code, stderr, expected)


def test_an_unreachable_database_hides_its_password() -> None:
    code, _, stderr = run(
        "migrate", "--database-url", "postgresql+psycopg://alice:hunter2@127.0.0.1:1/x"
    )
    assert_one_line_error(code, stderr, "127.0.0.1")
    assert "hunter2" not in stderr


def test_sync_of_an_invalid_job_id_is_one_line(database_url: str, tmp_path: Path) -> None:
    code, _, stderr = run(
        "sync", "../etc", "--database-url", database_url, "--metrics-dir", str(tmp_path)
    )
    assert_one_line_error(code, stderr, "invalid job_id")


def test_an_invalid_setting_is_one_line() -> None:
    code, _, stderr = run("serve", "--port", "70000")
    assert_one_line_error(code, stderr, "PLATFORM_PORT")


def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "training_platform", "migrate", "--database-url", "notaurl"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines() == [
        "error: bad database URL 'notaurl': Could not parse SQLAlchemy URL from given URL string"
    ]


@pytest.mark.parametrize(
    ("command", "defaults"),
    [
        # The metrics directory's default: the user's data directory (a temp one in tests).
        ("serve", ["127.0.0.1", "8000", "training-platform", "sqlite:///./training_platform.db"]),
        ("sync", ["training-platform", "sqlite:///./training_platform.db"]),
        ("migrate", ["sqlite:///./training_platform.db"]),
    ],
)
def test_help_shows_the_defaults(command: str, defaults: list[str]) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for default in defaults:
        assert "[default:" in result.stdout
        assert default in result.stdout, (default, result.stdout)


def test_serve_with_an_unreachable_database_is_one_line_before_starting() -> None:
    code, stdout, stderr = run(
        "serve", "--database-url", "postgresql+psycopg://postgres@127.0.0.1:1/x", "--port", "0"
    )
    assert_one_line_error(code, stderr, "cannot use the database at")
    assert "Uvicorn running" not in stdout + stderr


@pytest.fixture
def default_metrics_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No PLATFORM_METRICS_DIR: the default, under a temporary user data directory."""
    monkeypatch.delenv("PLATFORM_METRICS_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return default_output_dir()


@pytest.fixture
def announced(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """`run_server` replaced: it announces a URL at once and returns (no server)."""
    served: list[Settings] = []

    def announce_only(
        settings: Settings, log_level: str, *, announce: Callable[[str], None], **_: object
    ) -> None:
        served.append(settings)
        announce("http://127.0.0.1:9")

    monkeypatch.setattr("training_platform.serving.run_server", announce_only)
    return served


def test_serve_creates_the_default_metrics_dir_and_names_it_in_its_banner(
    default_metrics_dir: Path, announced: list[Settings], tmp_path: Path
) -> None:
    assert not default_metrics_dir.exists()
    code, stdout, _ = run("serve", "--database-url", f"sqlite:///{tmp_path / 'p.db'}")
    assert code == 0
    assert default_metrics_dir.is_dir()
    assert f"watching {default_metrics_dir} for runs" in stdout
    assert announced[0].metrics_dir == default_metrics_dir  # where PlatformCallback writes


def test_serve_names_a_relative_metrics_dir_as_an_absolute_path(
    default_metrics_dir: Path, announced: list[Settings], tmp_path: Path
) -> None:
    code, stdout, _ = run(
        "serve", "--metrics-dir", "runs", "--database-url", f"sqlite:///{tmp_path / 'p.db'}"
    )
    assert code == 0
    assert f"watching {(tmp_path / 'runs').resolve()} for runs" in stdout


def test_serve_with_a_metrics_dir_it_cannot_create_is_one_line(
    announced: list[Settings], tmp_path: Path
) -> None:
    (tmp_path / "taken").write_text("a file")
    code, _, stderr = run(
        "serve", "--metrics-dir", str(tmp_path / "taken"),
        "--database-url", f"sqlite:///{tmp_path / 'p.db'}",
    )  # fmt: skip
    assert_one_line_error(code, stderr, "metrics directory", "taken", "PLATFORM_METRICS_DIR")
    assert announced == []


def test_demo_train_with_an_output_dir_it_cannot_create_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file")
    code, _, stderr = run("demo-train", "--output-dir", str(tmp_path / "taken"), "--steps", "1")
    assert_one_line_error(code, stderr, "metrics directory", "taken", "PLATFORM_METRICS_DIR")


def test_the_demo_trainer_writes_where_the_demo_server_watches(
    default_metrics_dir: Path,
    announced: list[Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands: list[list[str]] = []

    class RecordedTrainer:
        def __init__(self, command: Sequence[str]) -> None:
            commands.append(list(command))

        def stop(self) -> None:
            pass

    monkeypatch.setattr("training_platform.demo.launcher.DemoTrainer", RecordedTrainer)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # the demo's SIGTERM handler
    code, stdout, _ = run("demo", "--database-url", f"sqlite:///{tmp_path / 'p.db'}")
    assert code == 0, stdout
    (command,) = commands
    written = Path(command[command.index("--output-dir") + 1])
    assert written == default_metrics_dir == announced[0].metrics_dir
    assert written.is_dir() and written.is_absolute()
    assert f"write to {default_metrics_dir}, which the server watches" in stdout


@pytest.mark.slow  # a real server in a subprocess: about 2 s
def test_serve_prints_its_banner_once_it_answers(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "training_platform", "serve", "--port", "0",
            "--metrics-dir", str(metrics), "--database-url", f"sqlite:///{tmp_path / 'p.db'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert server.stdout is not None
        for line in server.stdout:
            lines.append(line)
            if "training_platform: http://" in line:
                break
        url = lines[-1].split()[1].rstrip("/")
        # No retry: the banner comes once the server answers.
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        assert f"watching {metrics} for runs" in next(server.stdout)
    finally:
        server.terminate()
        server.wait(timeout=30)
    log = "".join(lines)
    assert "Application startup complete" in log, log
    assert log.count("INFO") <= 6, log  # the first start stays quiet: no migration notes
