"""Which directories under the metrics directory are TensorBoard runs, and their names."""

from __future__ import annotations

from pathlib import Path

from training_platform.callbacks.wire.schema import JOB_ID_PATTERN
from training_platform.ingest.formats.run_discovery import (
    MAX_DEPTH,
    find_tool_runs,
    run_job_id,
)


def event_file(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "events.out.tfevents.1700000000.host.1.0").write_bytes(b"")


def test_runs_are_named_by_path_and_grouped_by_parent(tmp_path: Path) -> None:
    event_file(tmp_path / "grpo" / "seed1")
    event_file(tmp_path / "grpo" / "seed1" / "1700000001.5")  # add_hparams: part of seed1
    event_file(tmp_path / "ppo")
    event_file(tmp_path / "a" / "b" / "c" / "d")  # MAX_DEPTH down: found
    event_file(tmp_path / "a" / "b" / "c" / "d2" / "e")  # deeper: not walked
    event_file(tmp_path / ".cache" / "x")  # hidden
    event_file(tmp_path / "job7_profiles" / "tb")  # the platform's own folders
    event_file(tmp_path / "elsewhere")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # never followed
    event_file(tmp_path)  # the metrics directory itself is not a run
    runs = find_tool_runs(tmp_path)
    assert [(run.name, run.job_id, run.project) for run in runs] == [
        ("a/b/c/d", "a.b.c.d", "a/b/c"),
        ("elsewhere", "elsewhere", None),
        ("grpo/seed1", "grpo.seed1", "grpo"),
        ("ppo", "ppo", None),
    ]
    assert MAX_DEPTH == 4
    assert find_tool_runs(tmp_path / "missing") == []


def test_a_path_that_is_not_a_job_id_gets_a_safe_distinct_one() -> None:
    first, second = run_job_id("runs/lr 1e-5"), run_job_id("runs/lr_1e-5")
    assert first != second and second == "runs.lr_1e-5"
    assert first.startswith("runs.lr_1e-5-")
    long = run_job_id("x" * 300)
    assert JOB_ID_PATTERN.fullmatch(long) and JOB_ID_PATTERN.fullmatch(first)
    assert JOB_ID_PATTERN.fullmatch(run_job_id("_/-weird"))
