"""Persister: exactly-once ingestion through appends, rewrites, crashes and races."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.errors import RecordError
from training_platform.history.metrics_query import list_anomalies, list_metrics
from training_platform.ingest import metrics_file as metrics_persister
from training_platform.ingest.metrics_file import parse_platform_metric, sync_metrics_from_file
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.registry import discover_jobs
from training_platform.ingest.status_file import sync_anomaly_from_status_file
from training_platform.store.models import Job, SyncState, TrainingMetric

JOB = "run1"


def line(step: int, loss: float = 1.0, **groups: Any) -> bytes:
    metrics: dict[str, Any] = {"loss": {"actor_loss": loss}, **groups}
    return encode_record(build_record(step, metrics, timestamp=1_700_000_000.0 + step))


def write(path: Path, *chunks: bytes) -> None:
    with path.open("ab") as handle:
        for chunk in chunks:
            handle.write(chunk)


@pytest.fixture
def metrics_file(metrics_dir: Path, session_factory: sessionmaker[Session]) -> Path:
    path = metrics_dir / f"{JOB}_metrics.jsonl"
    path.touch()
    with session_factory.begin() as session:
        assert discover_jobs(session, metrics_dir) == [JOB]
    return path


def sync(factory: sessionmaker[Session], metrics_dir: Path, **limits: int):
    reader = LocalMetricsReader(JOB, metrics_dir, **limits)
    try:
        return sync_metrics_from_file(factory, JOB, reader)
    finally:
        reader.close()


def stored(factory: sessionmaker[Session]) -> list[dict[str, Any]]:
    with factory() as session:
        return list_metrics(session, job_id=JOB)


def row_count(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return session.scalar(
            select(func.count()).select_from(TrainingMetric).where(TrainingMetric.job_id == JOB)
        )


def test_sync_ingests_every_complete_line_and_commits_the_offset(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    write(metrics_file, *(line(step, loss=step / 10) for step in range(5)))

    result = sync(session_factory, metrics_dir)

    assert result.new_metrics == 5
    assert [r["loss"]["actor_loss"] for r in stored(session_factory)] == [0, 0.1, 0.2, 0.3, 0.4]
    with session_factory() as session:
        state = session.get(SyncState, (JOB, "metrics"))
        assert state is not None
        assert state.offset == metrics_file.stat().st_size
        assert state.records_ingested == 5
    assert sync(session_factory, metrics_dir).new_metrics == 0


def test_partial_last_line_waits_for_its_newline(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    complete = line(1)
    partial = line(2)
    write(metrics_file, complete, partial[:10])

    assert sync(session_factory, metrics_dir).new_metrics == 1
    write(metrics_file, partial[10:])

    assert sync(session_factory, metrics_dir).new_metrics == 1
    assert [r["step"] for r in stored(session_factory)] == [1, 2]


def test_rewritten_step_keeps_only_the_newest_record_and_its_anomalies(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    nan_alert = [{"type": "nan_inf", "severity": "critical", "message": "loss is NaN"}]
    first = build_record(3, {"loss": {"actor_loss": math.nan}}, timestamp=1.0, anomalies=nan_alert)
    write(metrics_file, line(1), line(2), encode_record(first), line(2, loss=9.0))
    sync(session_factory, metrics_dir)
    # The run resumes from a checkpoint at step 2 and writes steps 2-4 again.
    write(metrics_file, line(2, loss=7.0), line(3, loss=5.0), line(4))
    sync(session_factory, metrics_dir)

    records = stored(session_factory)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[1]["loss"]["actor_loss"] == 7.0
    assert records[2]["loss"]["actor_loss"] == 5.0
    assert "anomalies" not in records[2]
    with session_factory() as session:
        assert list_anomalies(session, job_id=JOB) == []


def test_a_step_rewritten_with_other_groups_keeps_only_the_new_ones(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    # SQLite's rows are written without their NULL columns, one statement per
    # layout: a batch mixes layouts, and a conflict must still clear the columns
    # the new record leaves out.
    full = {"reward": {"mean": 0.5}, "timing": {"gen": 2.0}, "extra": {"lr": 1e-5}}
    write(
        metrics_file,
        *(line(step, **(full if step % 2 else {})) for step in range(1, 5)),
        encode_record(build_record(5, {"kl": {"mean": 0.1}}, timestamp=1.0)),
    )
    sync(session_factory, metrics_dir)
    rewritten = build_record(3, {"kl": {"mean": 0.2}}, timestamp=2.0)
    write(metrics_file, encode_record(rewritten), line(4, **full))
    sync(session_factory, metrics_dir)

    records = {record["step"]: record for record in stored(session_factory)}
    assert records[1]["reward"] == {"mean": 0.5} and records[1]["extra"] == {"lr": 1e-5}
    assert "reward" not in records[2] and records[2]["loss"] == {"actor_loss": 1.0}
    assert records[3] == {"step": 3, "timestamp": 2.0, "kl": {"mean": 0.2}}
    assert records[4]["timing"] == {"gen": 2.0} and records[4]["loss"] == {"actor_loss": 1.0}
    assert records[5] == {"step": 5, "timestamp": 1.0, "kl": {"mean": 0.1}}


def test_big_batches_append_and_rewrite_exactly_once(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    # Batches over 64 rows take PostgreSQL's COPY paths: straight into the
    # table for appends, through the staging table for a rewrite.
    write(metrics_file, *(line(step, loss=1.0) for step in range(300)))
    assert sync(session_factory, metrics_dir).new_metrics == 300
    # Resumed from a checkpoint at step 200: 100 steps again, 100 new, one batch.
    write(metrics_file, *(line(step, loss=2.0) for step in range(200, 400)))
    assert sync(session_factory, metrics_dir).new_metrics == 200

    records = stored(session_factory)
    assert [r["step"] for r in records] == list(range(400))
    assert [r["loss"]["actor_loss"] for r in records] == [1.0] * 200 + [2.0] * 200
    assert row_count(session_factory) == 400


def test_truncated_and_rewritten_file_is_read_again_from_the_start(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    write(metrics_file, *(line(step) for step in range(10)))
    sync(session_factory, metrics_dir)
    # A restarted run replaces the file while no server is running; `sync`
    # builds a new reader that only has the stored position, as after a restart.
    metrics_file.write_bytes(line(0, loss=42.0) + line(1, loss=43.0))
    factory = session_factory

    result = sync(factory, metrics_dir)

    assert result.resets == 1
    records = stored(factory)
    assert [r["loss"]["actor_loss"] for r in records[:2]] == [42.0, 43.0]
    assert len(records) == 10  # steps 2-9 of the first run stay until overwritten
    with factory() as session:
        state = session.get(SyncState, (JOB, "metrics"))
        assert state is not None and state.resets == 1
        assert state.offset == metrics_file.stat().st_size


def test_malformed_and_oversized_lines_are_counted_while_the_rest_lands(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    huge = b'{"step": 99, "timestamp": 1.0, "extra": {"blob": "' + b"x" * (20 << 20) + b'"}}\n'
    write(
        metrics_file,
        line(1),
        b"{not json\n",
        b'{"timestamp": 1.0}\n',  # valid JSON, but no step
        b"\xff\xfe garbage\n",
        huge,
        b"\n",
        line(2),
    )

    result = sync(session_factory, metrics_dir)

    assert [r["step"] for r in stored(session_factory)] == [1, 2]
    assert (result.lines_malformed, result.lines_oversized) == (3, 1)
    assert len(result.errors) == 4
    with session_factory() as session:
        state = session.get(SyncState, (JOB, "metrics"))
        assert state is not None
        assert (state.lines_malformed, state.lines_oversized) == (3, 1)


def test_integers_beyond_64_bits_land_as_floats_and_block_nothing(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    huge = 10**30
    write(
        metrics_file,
        line(1),
        # u64-sized (orjson keeps it an int), then JSON's unlimited integers
        # (a NaN token sends the line to the stdlib parser, which keeps digits).
        b'{"step": 2, "loss": {"actor_loss": 18446744073709551615}, "timing": {"gen": 1}}\n',
        b'{"step": 3, "loss": {"actor_loss": NaN}, "kl": {"mean": %d},'
        b' "extra": {"tokens": %d, "floor": %d, "hist": [%d, 1]}}\n'
        % (huge, huge, -(10**400), huge),
        b'{"step": 9223372036854775808, "loss": {"actor_loss": 1.0}}\n',  # step past int64
        line(4),
    )

    result = sync(session_factory, metrics_dir)

    records = stored(session_factory)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert result.lines_malformed == 1 and "step must be" in result.errors[0]
    assert records[1]["loss"]["actor_loss"] == 18446744073709551615.0
    assert records[1]["timing"] == {"gen": 1}
    assert records[2]["kl"]["mean"] == 1e30 and records[2]["extra"]["tokens"] == 1e30
    assert records[2]["extra"]["floor"] == -math.inf  # past even a float
    assert records[2]["extra"]["hist"] == [1e30, 1]


def test_a_callback_record_with_a_huge_integer_round_trips() -> None:
    record = build_record(1, {"extra": {"hist": [10**30]}}, timestamp=1.0)

    row = parse_platform_metric(encode_record(record), job_id=JOB)

    assert row["extra"] == {"hist": [1e30]}


def test_nan_and_infinity_survive_sql_distinct_from_missing(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    record = build_record(
        5,
        {
            "loss": {"actor_loss": math.nan, "critic_loss": math.inf},
            "kl": {"mean": -math.inf},
            "timing": {"gen": math.nan, "update": 0.5},
            "extra": {"actor/entropy": math.inf, "note": "text"},
            "weird_group": {"x": -math.inf},
        },
        timestamp=3.0,
    )
    write(metrics_file, encode_record(record))
    sync(session_factory, metrics_dir)

    (back,) = stored(session_factory)
    assert math.isnan(back["loss"]["actor_loss"])
    assert back["loss"]["critic_loss"] == math.inf
    assert "total_loss" not in back["loss"]  # missing stays missing
    assert back["kl"] == {"mean": -math.inf}
    assert math.isnan(back["timing"]["gen"]) and back["timing"]["update"] == 0.5
    assert back["extra"] == {"actor/entropy": math.inf, "note": "text"}
    assert back["other"] == {"weird_group": {"x": -math.inf}}


def test_status_file_lands_on_the_job(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    (metrics_dir / f"{JOB}_status.json").write_text(
        '{"job_id": "run1", "status": "failed", "current_step": 40, "total_steps": 100,'
        ' "anomaly_detected": true, "anomaly_reason": "kl.mean 3.2 > threshold 1.0",'
        ' "started_at": 1.0, "updated_at": 2.0}'
    )
    reader = LocalMetricsReader(JOB, metrics_dir)
    with session_factory.begin() as session:
        job = session.get(Job, JOB)
        assert job is not None
        assert sync_anomaly_from_status_file(session, job, reader) is True
    with session_factory.begin() as session:
        job = session.get(Job, JOB)
        assert job is not None
        assert (job.status, job.current_step, job.total_steps) == ("failed", 40, 100)
        assert job.anomaly_detected and job.anomaly_reason == "kl.mean 3.2 > threshold 1.0"
        assert sync_anomaly_from_status_file(session, job, reader) is False


def test_a_crash_between_read_and_commit_loses_and_duplicates_nothing(
    session_factory: sessionmaker[Session],
    metrics_dir: Path,
    metrics_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(metrics_file, *(line(step) for step in range(20)))
    real_upsert = metrics_persister.upsert_metrics

    def crash_after_writing(session: Session, **kwargs: Any) -> int:
        real_upsert(session, **kwargs)
        raise KeyboardInterrupt("simulated crash before commit")

    monkeypatch.setattr(metrics_persister, "upsert_metrics", crash_after_writing)
    with pytest.raises(KeyboardInterrupt):
        sync(session_factory, metrics_dir)
    assert row_count(session_factory) == 0

    monkeypatch.setattr(metrics_persister, "upsert_metrics", real_upsert)
    assert sync(session_factory, metrics_dir).new_metrics == 20
    assert [r["step"] for r in stored(session_factory)] == list(range(20))


def test_a_killed_sync_process_resumes_without_loss_or_duplicate(
    session_factory: sessionmaker[Session],
    metrics_dir: Path,
    metrics_file: Path,
    database_url: str,
) -> None:
    total = 40_000
    write(metrics_file, b"".join(line(step, loss=step) for step in range(total)))
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PLATFORM_METRICS_DIR": str(metrics_dir),
        "PLATFORM_SYNC_BATCH_BYTES": "65536",  # many small transactions to die between
    }
    command = [sys.executable, "-m", "training_platform", "sync", JOB]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while row_count(session_factory) < 2_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert 0 < row_count(session_factory) < total, "the kill should land mid-sync"

    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)

    steps = [r["step"] for r in stored(session_factory)]
    assert steps == list(range(total))
    with session_factory() as session:
        state = session.get(SyncState, (JOB, "metrics"))
        assert state is not None
        assert state.records_ingested == total
        assert state.offset == metrics_file.stat().st_size


def test_racing_syncs_never_duplicate_or_lose_a_record(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    total = 3_000
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        for step in range(total):
            write(metrics_file, line(step))
            if step % 300 == 0:
                time.sleep(0.01)
        done.set()

    def syncer() -> None:
        try:
            while not done.is_set():
                sync(session_factory, metrics_dir, max_bytes=8192)
            sync(session_factory, metrics_dir)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=syncer) for _ in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors
    sync(session_factory, metrics_dir)
    assert [r["step"] for r in stored(session_factory)] == list(range(total))
    with session_factory() as session:
        state = session.get(SyncState, (JOB, "metrics"))
        assert state is not None and state.records_ingested == total


def test_many_small_appends_arrive_in_order(
    session_factory: sessionmaker[Session], metrics_dir: Path, metrics_file: Path
) -> None:
    for step in range(200):
        data = line(step)
        write(metrics_file, data[:7])
        sync(session_factory, metrics_dir)
        write(metrics_file, data[7:])
        if step % 3 == 0:
            sync(session_factory, metrics_dir)
    sync(session_factory, metrics_dir)
    assert [r["step"] for r in stored(session_factory)] == list(range(200))


def test_parse_platform_metric_maps_groups_onto_columns() -> None:
    row = parse_platform_metric(
        b'{"step": 12, "timestamp": 1704672000.123, "loss": {"actor_loss": 2.5, "total_loss":'
        b' 3.7}, "reward": {"mean": 0.5, "max": 0.7}, "kl": {"mean": 0.1, "max": 0.15},'
        b' "gradient": {"actor_norm": 1.5}, "performance": {"tokens_per_second": 1000.0,'
        b' "gpu_memory_allocated": 40.5}, "timing": {"rollout": 1.2}, "extra": {"a/b": 1},'
        b' "anomalies": [{"type": "kl_explosion", "severity": "warning", "message": "m"}]}\n',
        job_id="j",
        received_at=5.0,
    )
    assert row["step"] == 12 and row["job_id"] == "j" and row["received_at"] == 5.0
    assert (row["actor_loss"], row["total_loss"], row["critic_loss"]) == (2.5, 3.7, None)
    assert (row["reward_mean"], row["reward_max"], row["kl_max"]) == (0.5, 0.7, 0.15)
    assert (row["actor_grad_norm"], row["gpu_memory_allocated"]) == (1.5, 40.5)
    assert row["timing"] == {"rollout": 1.2} and row["extra"] == {"a/b": 1}
    assert (row["has_anomaly"], row["anomaly_type"], row["anomaly_message"]) == (
        True,
        "kl_explosion",
        "m",
    )
    with pytest.raises(RecordError):
        parse_platform_metric(b'{"timestamp": 1.0}', job_id="j")
