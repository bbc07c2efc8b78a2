"""`training-platform import PATH`: finished runs into the database without a server,
exactly once, whichever of the formats this version reads they are in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
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


def write_tensorboard_run(directory: Path, steps: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(directory))
    for step in range(steps):
        writer.add_scalar("actor/pg_loss", 1.0 / (step + 1), step)
        writer.add_scalar("critic/score/mean", 0.1 * step, step)
    writer.close()


def projects(database_url: str) -> dict[str, str | None]:
    from training_platform.store.models import RunFile

    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            return dict(session.execute(select(RunFile.job_id, RunFile.project)).all())
    finally:
        engine.dispose()


def test_a_tree_of_tensorboard_runs_is_imported_once_with_their_projects(
    database_url: str, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    write_tensorboard_run(logs / "grpo" / "seed1", 5)
    write_tensorboard_run(logs / "grpo" / "seed2", 3)
    write_tensorboard_run(logs / "ppo", 2)
    code, stdout, stderr = run("import", str(logs), "--database-url", database_url, "-q")
    assert code == 0, stderr
    assert "grpo.seed1 (tensorboard" in stdout and "5 new records" in stdout
    assert stored(database_url) == {
        "grpo.seed1": ("tensorboard", 5), "grpo.seed2": ("tensorboard", 3),
        "ppo": ("tensorboard", 2),
    }  # fmt: skip
    assert projects(database_url) == {"grpo.seed1": "grpo", "grpo.seed2": "grpo", "ppo": None}
    again = run("import", str(logs), "--database-url", database_url, "-q")
    assert again[0] == 0 and again[1].count("0 new records") == 3  # exactly once


def test_one_run_takes_a_job_id_and_a_project(database_url: str, tmp_path: Path) -> None:
    write_tensorboard_run(tmp_path / "tb", 4)
    shutil.copy(VERL, tmp_path / "qwen_grpo.jsonl")
    code, stdout, stderr = run(
        "import", str(tmp_path / "tb"), "--job-id", "tb-run", "--project", "rl",
        "--database-url", database_url,
    )  # fmt: skip
    assert code == 0, stderr
    assert "tb-run (tensorboard" in stdout and "4 new records" in stdout
    code, stdout, stderr = run(
        "import", str(tmp_path / "qwen_grpo.jsonl"), "--job-id", "verl-run",
        "--database-url", database_url, "-q",
    )  # fmt: skip
    assert code == 0, stderr
    assert stored(database_url) == {"tb-run": ("tensorboard", 4), "verl-run": ("verl_file", 3)}
    assert projects(database_url)["tb-run"] == "rl"
    assert_one_line_error(
        *_code_err(run("import", str(tmp_path), "--job-id", "x", "--database-url", database_url)),
        "--job-id names one run",
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the API tests: both
def test_each_run_of_a_trackio_project_is_imported_once(database_url: str, tmp_path: Path) -> None:
    from tests.api.test_trackio_runs import logged

    logged(tmp_path, "grpo-1", range(5))
    logged(tmp_path, "grpo-2", range(2))
    code, stdout, stderr = run("import", str(tmp_path / "rl.db"), "--database-url", database_url,
                               "-q")  # fmt: skip
    assert code == 0, stderr
    assert "rl.grpo-1 (trackio" in stdout and "5 new records" in stdout
    assert stored(database_url) == {"rl.grpo-1": ("trackio", 5), "rl.grpo-2": ("trackio", 2)}
    assert projects(database_url) == {"rl.grpo-1": "rl", "rl.grpo-2": "rl"}
    again = run("import", str(tmp_path), "--database-url", database_url, "-q")
    assert again[0] == 0 and again[1].count("0 new records") == 2  # exactly once


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the API tests: both
def test_each_run_of_an_mlflow_sqlite_store_is_imported_once(
    database_url: str, tmp_path: Path
) -> None:
    from tests.api.test_mlflow_runs import logged

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    logged(uri, range(4), name="grpo-a")
    logged(uri, range(2), name="grpo-b")
    code, stdout, stderr = run("import", str(tmp_path / "mlflow.db"), "--database-url",
                               database_url, "-q")  # fmt: skip
    assert code == 0, stderr
    assert "rl.grpo-a (mlflow" in stdout and "4 new records" in stdout
    assert stored(database_url) == {"rl.grpo-a": ("mlflow", 4), "rl.grpo-b": ("mlflow", 2)}
    assert projects(database_url) == {"rl.grpo-a": "rl", "rl.grpo-b": "rl"}
    again = run("import", str(tmp_path / "mlflow.db"), "--database-url", database_url, "-q")
    assert again[0] == 0 and again[1].count("0 new records") == 2  # exactly once


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the API tests: both
def test_each_run_of_an_mlflow_file_store_is_imported_once(
    database_url: str, tmp_path: Path
) -> None:
    from tests.api.test_mlflow_file_store import child_in_file_store

    store = tmp_path / "mlruns"
    for steps, name in [(range(4), "grpo-a"), (range(2), "grpo-b")]:
        child = child_in_file_store(store.as_uri(), steps, name=name)
        errors = child.communicate(timeout=180)[1]
        assert child.returncode == 0, errors
    code, stdout, stderr = run("import", str(store), "--database-url", database_url, "-q")
    assert code == 0, stderr
    assert "rl.grpo-a (mlflow" in stdout
    assert stored(database_url) == {"rl.grpo-a": ("mlflow", 4), "rl.grpo-b": ("mlflow", 2)}
    assert projects(database_url) == {"rl.grpo-a": "rl", "rl.grpo-b": "rl"}
    again = run("import", str(store), "--database-url", database_url, "-q")
    assert again[0] == 0 and again[1].count("0 new records") == 2  # exactly once


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the API tests: both
def test_a_wandb_directory_of_offline_runs_is_imported_once(
    database_url: str, tmp_path: Path
) -> None:
    from tests.api.test_wandb_runs import logged

    run_dir = logged(tmp_path, range(3))
    code, stdout, stderr = run("import", str(tmp_path / "wandb"), "--database-url", database_url,
                               "-q")  # fmt: skip
    assert code == 0, stderr
    job_id = run_dir.name
    assert f"{job_id} (wandb" in stdout and "3 new records" in stdout
    assert stored(database_url) == {job_id: ("wandb", 3)}
    again = run("import", str(run_dir), "--database-url", database_url, "-q")  # the run itself
    assert again[0] == 0 and "0 new records" in again[1], again


def test_an_import_killed_midway_then_run_again_stores_every_step_once(
    database_url: str, tmp_path: Path
) -> None:
    steps = 30_000
    logs = tmp_path / "big"
    write_tensorboard_run(logs, steps)  # two tags a step: a step may straddle two batches
    command = [sys.executable, "-m", "training_platform", "import", str(logs),
               "--database-url", database_url, "-q"]  # fmt: skip
    env = {**os.environ, "PLATFORM_SYNC_BATCH_BYTES": "16384"}  # a few hundred commits
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    at_kill, deadline = 0, time.monotonic() + 120
    try:
        while child.poll() is None and time.monotonic() < deadline:
            at_kill = stored(database_url).get("big", ("", 0))[1]
            if at_kill > 0:
                break
            time.sleep(0.01)
    finally:
        child.kill()  # SIGKILL: whatever it was doing, no cleanup of any kind
        child.wait(timeout=30)
    assert 0 < at_kill < steps, f"not killed mid-import ({at_kill} of {steps} stored)"

    code, _, stderr = run("import", str(logs), "--database-url", database_url, "-q")
    assert code == 0, stderr
    assert stored(database_url) == {"big": ("tensorboard", steps)}  # nothing lost or repeated
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            incomplete = session.scalar(
                select(func.count()).where(
                    TrainingMetric.job_id == "big",
                    (TrainingMetric.actor_loss.is_(None)) | (TrainingMetric.reward_mean.is_(None)),
                )
            )
    finally:
        engine.dispose()
    assert incomplete == 0  # a step cut between two commits has both its tags
