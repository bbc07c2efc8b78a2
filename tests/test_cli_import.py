"""`training-platform import PATH`: finished runs into the database without a server,
exactly once, whichever of the formats this version reads they are in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sqlalchemy import func, select

from tests.test_cli import assert_one_line_error, run
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.store.database import make_engine, make_session_factory
from training_platform.store.models import Job, TrainingMetric

VERL = Path(__file__).resolve().parent / "fixtures" / "verl" / "file_logger.jsonl"


def stored(database_url: str) -> dict[str, tuple[str, int]]:
    """job id -> (format, stored records)."""
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            counts = dict(
                session.execute(
                    select(TrainingMetric.job_id, func.count()).group_by(TrainingMetric.job_id)
                ).all()
            )
            return {job.job_id: (job.format, counts.get(job.job_id, 0)) for job in
                    session.scalars(select(Job))}  # fmt: skip
    finally:
        engine.dispose()


def runs_in(directory: Path) -> Path:
    directory.mkdir()
    shutil.copy(VERL, directory / "grpo-a.jsonl")
    with (directory / "ppo-b_metrics.jsonl").open("wb") as handle:
        for step in range(4):
            handle.write(encode_record(build_record(step, {"loss": 1.0 / (step + 1)})))
    (directory / "notes.jsonl").write_text(json.dumps({"hello": "world"}) + "\n")
    (directory / "README.md").write_text("not a run\n")
    return directory


def test_a_directory_of_runs_is_imported_once(database_url: str, tmp_path: Path) -> None:
    directory = runs_in(tmp_path / "runs")
    code, stdout, stderr = run("import", str(directory), "--database-url", database_url, "-q")
    assert code == 0, stderr
    assert "grpo-a (verl_file" in stdout and "3 new records" in stdout
    assert "ppo-b (platform" in stdout and "4 new records" in stdout
    assert stored(database_url) == {"grpo-a": ("verl_file", 3), "ppo-b": ("platform", 4)}

    again = run("import", str(directory), "--database-url", database_url, "-q")
    assert again[0] == 0 and again[1].count("0 new records") == 2  # exactly once

    with (directory / "grpo-a.jsonl").open("a") as handle:  # the run went on
        handle.write(json.dumps({"step": 4, "data": {"actor/pg_loss": 0.1}}) + "\n")
    code, stdout, _ = run("import", str(directory / "grpo-a.jsonl"), "--database-url",
                          database_url, "-q")  # fmt: skip
    assert code == 0 and "1 new records" in stdout
    assert stored(database_url)["grpo-a"] == ("verl_file", 4)


def test_a_run_registered_elsewhere_under_the_same_id_is_refused_and_said(
    database_url: str, tmp_path: Path
) -> None:
    runs_in(tmp_path / "runs")
    other = runs_in(tmp_path / "other")
    assert run("import", str(tmp_path / "runs"), "--database-url", database_url, "-q")[0] == 0
    code, stdout, stderr = run("import", str(other), "--database-url", database_url, "-q")
    assert code == 1
    assert "grpo-a: not imported" in stderr and "different source" in stderr
    assert "ppo-b: not imported" in stderr and stdout == ""


def test_bad_arguments_are_one_line_each(database_url: str, tmp_path: Path) -> None:
    directory = runs_in(tmp_path / "runs")
    assert_one_line_error(*_code_err(run("import", str(tmp_path / "nope"))), "does not exist")
    assert_one_line_error(
        *_code_err(run("import", str(directory / "notes.jsonl"), "--database-url", database_url)),
        "not a run's file",
    )
    assert_one_line_error(
        *_code_err(run("import", str(directory), "--format", "csv")), "--format must be"
    )
    assert_one_line_error(
        *_code_err(run("import", str(directory), "--database-url", "notaurl")),
        "bad database URL",
    )


def _code_err(result: tuple[int, str, str]) -> tuple[int, str]:
    return result[0], result[2]
