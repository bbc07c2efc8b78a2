from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tests.callbacks.helpers import read_records, read_status
from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.line_file import write_json_atomic


def test_a_concurrent_reader_never_sees_a_half_written_status_file(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, status_interval=0.0, background=False)
    status_path = callback.status_path
    callback.on_train_begin(total_steps=1000)
    done = threading.Event()
    reads: list[int] = []
    problems: list[str] = []

    def hammer() -> None:
        while not done.is_set():
            try:
                payload = json.loads(status_path.read_bytes())
            except (OSError, ValueError) as exc:  # a missing or torn file
                problems.append(repr(exc))
                continue
            if payload["job_id"] != "job" or payload["status"] != "running":
                problems.append(f"unexpected content: {payload}")
            reads.append(payload["current_step"])

    reader = threading.Thread(target=hammer)
    reader.start()
    try:
        # status_interval=0: the status file is replaced on every one of these steps.
        for step in range(1000):
            callback.on_step_end(step, {"loss": 1.0 / (step + 1)})
    finally:
        done.set()
        reader.join(timeout=30)
    callback.on_train_end()
    assert problems == []
    assert len(reads) > 50, "the reader should have overlapped many rewrites"
    assert reads == sorted(reads)  # each read is one complete version, in order
    assert list(tmp_path.glob(".*tmp")) == []  # no temp file left behind


def test_the_atomic_writer_replaces_the_file_in_one_step(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2}, fsync=True)
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(
        f"""
        from training_platform.callbacks import PlatformCallback
        callback = PlatformCallback("job", {str(tmp_path)!r})
        callback.on_train_begin(total_steps=100)
        for step in range(3):
            callback.on_step_end(step, {{"loss": 1.0}})
        """
    ) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )


def test_an_uncaught_exception_marks_the_run_failed_at_exit(tmp_path: Path) -> None:
    result = run_script(tmp_path, 'raise RuntimeError("loader died")\n')
    assert result.returncode == 1
    status = read_status(tmp_path / "job_status.json")
    assert status["status"] == "failed"
    assert status["error"] == "RuntimeError: loader died"
    assert len(read_records(tmp_path / "job_metrics.jsonl")) == 3  # drained, nothing lost


def test_exiting_without_on_train_end_marks_the_run_stopped_and_keeps_every_line(
    tmp_path: Path,
) -> None:
    result = run_script(tmp_path, "")
    assert result.returncode == 0, result.stderr
    status = read_status(tmp_path / "job_status.json")
    assert status["status"] == "stopped"
    assert "before on_train_end" in status["error"]
    assert len(read_records(tmp_path / "job_metrics.jsonl")) == 3
