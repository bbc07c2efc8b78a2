"""`scripts/migrate_db_phase1_2.py`, the design documents' name for `training-platform migrate`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import inspect

from training_platform.store.database import current_revision, head_revision, make_engine

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "migrate_db_phase1_2.py"


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


def test_it_migrates_a_new_sqlite_database_to_the_head_then_does_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'platform.db'}"

    first = run_script("--database-url", url, cwd=tmp_path)

    assert first.returncode == 0, first.stderr
    head = head_revision()
    assert first.stdout.strip() == f"database migrated from empty to {head}"
    assert "training-platform migrate" in first.stderr  # it names its replacement
    engine = make_engine(url)
    try:
        assert current_revision(engine) == head
        assert "training_metrics" in inspect(engine).get_table_names()
    finally:
        engine.dispose()

    again = run_script("--database-url", url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"database already at revision {head}"


def test_it_reads_database_url_from_the_environment_as_the_command_does(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'env.db'}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "env.db").exists()


def test_a_bad_url_is_the_commands_one_line_error(tmp_path: Path) -> None:
    done = run_script("--database-url", "notaurl", cwd=tmp_path)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: bad database URL 'notaurl'")
    assert "Traceback" not in done.stderr
