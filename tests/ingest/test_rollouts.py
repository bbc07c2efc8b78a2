"""verl's rollout dumps (`{job_id}_rollouts/{step}.jsonl`) into `samples`, exactly once."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from tests.ingest.listener import Heard
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.ingest import rollout_files, rollouts
from training_platform.ingest.polling import KnownJob, PollRule
from training_platform.ingest.readers import SYMLINK_REFUSED
from training_platform.ingest.rollout_lines import decode_rollout_line, step_of_name
from training_platform.ingest.samples_file import SAMPLES
from training_platform.ingest.sync_service import SyncService
from training_platform.settings import Settings
from training_platform.store.models import Job, Sample, SamplePrompt, SyncState


def make_service(factory: sessionmaker[Session], settings: Settings, heard: Heard) -> SyncService:
    return SyncService(factory, settings, listener=heard, line_kinds=[SAMPLES])


@pytest.fixture
def service(
    session_factory: sessionmaker[Session], settings: Settings, heard: Heard
) -> Iterator[SyncService]:
    service = make_service(session_factory, settings, heard)
    yield service
    service.close()


@pytest.fixture
def rollout_dir(metrics_dir: Path) -> Path:
    """Job `run1`, discovered from its metrics file, with verl's dumps next to it."""
    (metrics_dir / "run1_metrics.jsonl").write_bytes(
        encode_record(build_record(0, {"loss": 1.0}, timestamp=1.0))
    )
    path = metrics_dir / "run1_rollouts"
    path.mkdir()
    return path


def verl_lines(step: int, n: int, *, tag: str = "", nan_at: int | None = None) -> list[str]:
    """What verl's `_dump_generations` writes: json.dumps of each sample, NaN as a token."""
    lines = []
    for i in range(n):
        entry = {
            "input": f"prompt {i // 2}{tag}",
            "output": f"completion {i}{tag} of step {step}",
            "gts": f"truth {i // 2}",
            "score": math.nan if i == nan_at else i / 10,
            "step": step,
            "acc": i % 2 == 0,
            "uid": f"uid-{step}-{i // 2}",
        }
        lines.append(json.dumps(entry, ensure_ascii=False))
    return lines


def dump(directory: Path, step: int, lines: list[str], *, final_newline: bool = True) -> Path:
    """verl writes the whole file in one go: ``"\\n".join(lines) + "\\n"``."""
    path = directory / f"{step}.jsonl"
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="utf-8")
    return path


def stored(factory: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    with factory() as session:
        rows = session.execute(
            select(Sample.step, Sample.sample_index, SamplePrompt.text, Sample.completion,
                   Sample.reward, Sample.reward_nonfinite, Sample.group_key, Sample.extra)
            .join(SamplePrompt, SamplePrompt.id == Sample.prompt_id)
            .order_by(Sample.step, Sample.sample_index)
        )  # fmt: skip
        return [tuple(row) for row in rows]


def state(factory: sessionmaker[Session], step: int) -> SyncState | None:
    with factory() as session:
        return session.get(SyncState, ("run1", f"rollout:{step}"))


def job_error(factory: sessionmaker[Session]) -> str:
    with factory() as session:
        job = session.get(Job, "run1")
        assert job is not None
        return job.last_sync_error or ""


class Reads:
    """Counts the step files actually read (opened and read), whatever the source."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        real = rollout_files.LocalRolloutSource.read

        def read(source: Any, entry: Any, limit: int) -> Any:
            self.names.append(entry.name)
            return real(source, entry, limit)

        monkeypatch.setattr(rollout_files.LocalRolloutSource, "read", read)


class Writes:
    """Statements that write samples or a rollout row (counted on the engine)."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[str] = []

        def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            text = statement.lower()
            if text.startswith(("insert", "update", "delete")) and (
                "samples" in text or ("sync_state" in text and "rollout" in str(args[0]))
            ):
                self.statements.append(statement)

        event.listen(engine, "before_cursor_execute", before)


def test_the_names_that_are_step_files() -> None:
    assert [step_of_name(n) for n in ("0.jsonl", "12.jsonl", "9223372036854775807.jsonl")] == [
        0,
        12,
        2**63 - 1,
    ]
    for other in ("007.jsonl", "-1.jsonl", "1.json", "1.jsonl.tmp", "a.jsonl", "9" * 20 + ".jsonl"):
        assert step_of_name(other) is None, other


def test_a_line_maps_onto_a_sample() -> None:
    line = json.dumps(
        {"input": "p", "output": "c", "score": 1, "step": 3.0, "gts": "g", "uid": 7,
         "finish_reason": "length", "response_length": 12, "acc": True}
    ).encode()  # fmt: skip
    sample = decode_rollout_line(line, 3, 5, 1.5)
    assert sample == {
        "step": 3, "index": 5, "timestamp": 1.5, "prompt": "p", "completion": "c",
        "reward": 1.0, "rewards": None, "group": "7", "response_length": 12,
        "finish_reason": "length", "extra": {"gts": "g", "acc": True},
    }  # fmt: skip
    bare = decode_rollout_line(b'{"input": "p", "output": "c"}', 0, 0)
    assert (bare["reward"], bare["group"], bare["extra"]) == (None, None, None)


def test_a_discovered_jobs_rollouts_land_with_verls_mapping(
    service: SyncService, session_factory: sessionmaker[Session], rollout_dir: Path, heard: Heard
) -> None:
    dump(rollout_dir, 1, verl_lines(1, 4, nan_at=3))
    dump(rollout_dir, 2, verl_lines(2, 2))
    dump(rollout_dir, 10, verl_lines(10, 3))
    (rollout_dir / "notes.txt").write_text("not a step")
    dump(rollout_dir, 7, verl_lines(7, 1)).rename(rollout_dir / "007.jsonl")
    (rollout_dir / "3.jsonl.tmp").write_text("{}\n")

    service.sync_job("run1")

    rows = stored(session_factory)
    assert [(step, index) for step, index, *_ in rows] == [
        (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (10, 0), (10, 1), (10, 2),
    ]  # fmt: skip
    assert rows[1] == (
        1, 1, "prompt 0", "completion 1 of step 1", 0.1, None, "uid-1-0",
        {"gts": "truth 0", "acc": False},
    )  # fmt: skip
    assert rows[3][4:6] == (None, "NaN")  # a NaN score is kept as NaN
    assert heard.samples() == [(1, 4), (2, 2), (10, 3)]  # one batch per file, in step order
    for step, count in ((1, 4), (2, 2), (10, 3)):
        row = state(session_factory, step)
        assert row is not None
        assert (row.offset, row.records_ingested) == (
            (rollout_dir / f"{step}.jsonl").stat().st_size,
            count,
        )
    with session_factory() as session:
        sample = session.get(Sample, ("run1", 1, 0))
        assert sample is not None and sample.timestamp == pytest.approx(
            (rollout_dir / "1.jsonl").stat().st_mtime
        )


def test_a_second_sync_reads_nothing_and_a_new_step_file_lands(
    service: SyncService,
    session_factory: sessionmaker[Session],
    engine: Engine,
    rollout_dir: Path,
    heard: Heard,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dump(rollout_dir, 1, verl_lines(1, 4))
    service.sync_job("run1")
    reads, writes = Reads(monkeypatch), Writes(engine)

    service.sync_job("run1")
    assert (reads.names, writes.statements) == ([], [])

    dump(rollout_dir, 2, verl_lines(2, 3))
    service.sync_job("run1")
    assert reads.names == ["2.jsonl"]
    assert [(s, i) for s, i, *_ in stored(session_factory)] == [
        (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (2, 2),
    ]  # fmt: skip
    assert heard.samples() == [(1, 4), (2, 3)]

    # Touched (same content, new time): read once to find out, then only its row moves.
    path = rollout_dir / "2.jsonl"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    before = len(writes.statements)
    service.sync_job("run1")
    assert heard.samples() == [(1, 4), (2, 3)]  # nothing announced again
    (only,) = writes.statements[before:]
    assert only.lower().startswith("update sync_state")
    row = state(session_factory, 2)
    assert row is not None and row.resets == 0
    assert row.fingerprint is not None and row.fingerprint.startswith(f"{path.stat().st_mtime_ns}:")


def test_a_rewritten_shorter_file_replaces_its_step(
    service: SyncService, session_factory: sessionmaker[Session], rollout_dir: Path, heard: Heard
) -> None:
    dump(rollout_dir, 5, verl_lines(5, 4))
    dump(rollout_dir, 6, verl_lines(6, 2))
    service.sync_job("run1")

    dump(rollout_dir, 5, verl_lines(5, 2, tag=" (resumed)"))  # a resumed run dumps step 5 again
    service.sync_job("run1")

    rows = stored(session_factory)
    assert [(s, i, c) for s, i, _, c, *_ in rows] == [
        (5, 0, "completion 0 (resumed) of step 5"),
        (5, 1, "completion 1 (resumed) of step 5"),
        (6, 0, "completion 0 of step 6"),
        (6, 1, "completion 1 of step 6"),
    ]
    assert heard.samples() == [(5, 4), (6, 2), (5, 2)]
    row = state(session_factory, 5)
    assert row is not None and (row.resets, row.records_ingested) == (1, 2)


def test_a_file_still_being_written_is_left_until_it_is_complete(
    service: SyncService,
    session_factory: sessionmaker[Session],
    rollout_dir: Path,
    heard: Heard,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = verl_lines(3, 3)
    dump(rollout_dir, 3, lines, final_newline=False)  # the last line is not finished
    service.sync_job("run1")
    assert stored(session_factory) == [] and state(session_factory, 3) is None

    # Complete now, but growing while it is read: still left alone.
    dump(rollout_dir, 3, lines)
    real = rollout_files._read_all

    def read_while_appending(fd: int, size: int) -> bytes:
        data = real(fd, size)
        with (rollout_dir / "3.jsonl").open("a") as handle:
            handle.write(verl_lines(3, 4)[3] + "\n")
        return data

    monkeypatch.setattr(rollout_files, "_read_all", read_while_appending)
    service.sync_job("run1")
    assert stored(session_factory) == [] and state(session_factory, 3) is None

    monkeypatch.setattr(rollout_files, "_read_all", real)
    service.sync_job("run1")
    assert [(s, i) for s, i, *_ in stored(session_factory)] == [(3, 0), (3, 1), (3, 2), (3, 3)]
    assert heard.samples() == [(3, 4)]


def test_a_crash_inside_a_steps_transaction_loses_and_duplicates_nothing(
    service: SyncService,
    session_factory: sessionmaker[Session],
    rollout_dir: Path,
    heard: Heard,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dump(rollout_dir, 1, verl_lines(1, 3))
    service.sync_job("run1")
    dump(rollout_dir, 1, verl_lines(1, 2, tag=" again"))  # a rewrite: its old samples go first
    dump(rollout_dir, 2, verl_lines(2, 3))
    real = rollouts.store_samples

    def store_then_crash(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise RuntimeError("killed after the insert")

    monkeypatch.setattr(rollouts, "store_samples", store_then_crash)
    with pytest.raises(RuntimeError, match="killed"):
        service.sync_job("run1")
    assert [(s, i, c) for s, i, _, c, *_ in stored(session_factory)] == [
        (1, i, f"completion {i} of step 1") for i in range(3)
    ]  # the old version, whole; nothing of the new
    assert state(session_factory, 2) is None

    monkeypatch.setattr(rollouts, "store_samples", real)
    service.sync_job("run1")
    service.sync_job("run1")
    rows = stored(session_factory)
    assert [(s, i) for s, i, *_ in rows] == [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    assert rows[0][3] == "completion 0 again of step 1"
    assert heard.samples() == [(1, 3), (1, 2), (2, 3)]


def test_malformed_lines_are_counted_and_skipped_keeping_the_indexes(
    service: SyncService, session_factory: sessionmaker[Session], rollout_dir: Path
) -> None:
    good = verl_lines(4, 4)
    dump(
        rollout_dir,
        4,
        [
            good[0],
            "{not json",
            good[1],
            json.dumps({"input": "p", "score": 1.0}),  # no output
            json.dumps({"input": "p", "output": "c", "step": 5}),  # another step's line
            "",
            good[2],
            json.dumps({"input": "p", "output": "c", "score": "high"}),
        ],
    )
    service.sync_job("run1")

    assert [(s, i) for s, i, *_ in stored(session_factory)] == [(4, 0), (4, 2), (4, 6)]
    row = state(session_factory, 4)
    assert row is not None and (row.lines_malformed, row.records_ingested) == (4, 3)
    error = job_error(session_factory)
    assert "rollout step 4 line 1" in error and "not its file's" in error


def test_an_oversized_file_and_a_symlink_are_skipped_with_an_error(
    session_factory: sessionmaker[Session],
    settings: Settings,
    heard: Heard,
    rollout_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = settings.model_copy(update={"sync_batch_bytes": 4096})  # files up to 32 KiB
    service = make_service(session_factory, small, heard)
    big = [json.dumps({"input": "p", "output": "x" * 1000, "score": 1.0})] * 40
    dump(rollout_dir, 1, big)
    outside = dump(tmp_path, 2, verl_lines(2, 2))
    (rollout_dir / "2.jsonl").symlink_to(outside)
    dump(rollout_dir, 3, verl_lines(3, 2))
    os.mkfifo(rollout_dir / "4.jsonl")  # never opened, never waited on

    service.sync_job("run1")

    assert [(s, i) for s, i, *_ in stored(session_factory)] == [(3, 0), (3, 1)]
    error = job_error(session_factory)
    assert "rollout step 1" in error and "over 32768 bytes" in error
    assert "rollout step 2" in error and SYMLINK_REFUSED in error
    assert "rollout step 4" in error and "not a regular file" in error
    row = state(session_factory, 1)
    assert row is not None and row.fingerprint is not None
    assert row.fingerprint.endswith(":skipped") and row.records_ingested == 0

    reads = Reads(monkeypatch)
    service.sync_job("run1")
    assert reads.names == []  # recorded as skipped: not opened again until it changes
    service.close()

    following = make_service(
        session_factory, small.model_copy(update={"follow_symlinks": True}), heard
    )
    dump(tmp_path, 2, verl_lines(2, 3))  # the target changed: the link is read now
    following.sync_job("run1")
    following.close()
    assert [(s, i) for s, i, *_ in stored(session_factory)][:3] == [(2, 0), (2, 1), (2, 2)]


def test_a_symlinked_default_directory_is_refused(
    service: SyncService, metrics_dir: Path, tmp_path: Path
) -> None:
    (metrics_dir / "run1_metrics.jsonl").write_bytes(encode_record(build_record(0, {"a": 1})))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dump(elsewhere, 1, verl_lines(1, 1))
    (metrics_dir / "run1_rollouts").symlink_to(elsewhere)
    with pytest.raises(Exception, match="refusing to follow"):
        service.sync_job("run1")


def test_a_sync_that_lost_the_race_writes_nothing(
    service: SyncService,
    session_factory: sessionmaker[Session],
    rollout_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dump(rollout_dir, 1, verl_lines(1, 3))
    service.sync_job("run1")
    dump(rollout_dir, 1, verl_lines(1, 2, tag=" new"))
    service.sync_job("run1")
    # A second sync that read the rows before the first one committed (the
    # file new, then its first version): both compare-and-swaps fail.
    source = rollout_files.local_source(
        "run1", str(rollout_dir.parent), None, follow_symlinks=False
    )
    assert source is not None
    monkeypatch.setattr(rollouts, "_load_states", lambda factory, job_id: {})
    lost = rollouts.sync_rollouts(
        session_factory, "run1", source, max_file_bytes=1 << 20, max_line_bytes=1 << 20
    )
    assert (lost.files, lost.samples) == (0, 0)
    assert [(s, i, c) for s, i, _, c, *_ in stored(session_factory)] == [
        (1, 0, "completion 0 new of step 1"),
        (1, 1, "completion 1 new of step 1"),
    ]
    with session_factory() as session:
        count = session.scalar(select(func.count()).select_from(SyncState))
        assert count == 3  # metrics, samples, rollout:1


def test_a_new_or_rewritten_step_file_makes_the_job_due_in_a_quiet_round(
    service: SyncService, settings: Settings, rollout_dir: Path, metrics_dir: Path
) -> None:
    dump(rollout_dir, 1, verl_lines(1, 2))
    service.sync_job("run1")
    rule = PollRule(service, settings)
    job = KnownJob("run1", "local", "running", str(metrics_dir.resolve()))

    def due() -> list[str]:
        return rule.due([job], now=0.0, local_due=True, watching=False)

    assert due() == []
    dump(rollout_dir, 2, verl_lines(2, 2))
    assert due() == ["run1"]
    service.sync_job("run1")
    assert due() == []
    dump(rollout_dir, 2, verl_lines(2, 3))  # the newest file rewritten in place
    assert due() == ["run1"]
    service.sync_job("run1")
    assert due() == []
