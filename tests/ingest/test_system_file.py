"""`{job_id}_system*.jsonl` into the system tables: exactly once per file, bad input counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from tests.ingest.listener import Heard
from tests.system_support import T0, append_system, gpu, system_line
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.history.system_query import ANSWER_JSON, system_history
from training_platform.ingest.host_files import HostFiles
from training_platform.ingest.polling import PollRule, poll_once
from training_platform.ingest.samples_file import SAMPLES
from training_platform.ingest.sync_service import SyncService
from training_platform.ingest.system_file import SYSTEM, host_word_of, job_of_host_file
from training_platform.settings import Settings
from training_platform.store.jobs import delete_job
from training_platform.store.models import (
    Job,
    SyncState,
    SystemBlock,
    SystemLayout,
    SystemRollup,
)


@pytest.fixture
def service(
    session_factory: sessionmaker[Session], settings: Settings, heard: Heard
) -> Iterator[SyncService]:
    service = SyncService(
        session_factory,
        settings,
        listener=heard,
        line_kinds=[SAMPLES, SYSTEM],
        host_files=HostFiles(),
    )
    yield service
    service.close()


@pytest.fixture
def run1(metrics_dir: Path) -> Path:
    path = metrics_dir / "run1_metrics.jsonl"
    path.write_bytes(encode_record(build_record(0, {"loss": 1.0}, timestamp=T0)))
    return path


def count(factory: sessionmaker[Session], table: Any) -> int:
    with factory() as session:
        return int(session.execute(select(func.count()).select_from(table)).scalar_one())


def samples_stored(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        total = session.execute(select(func.sum(SystemBlock.sample_count))).scalar_one()
    return int(total or 0)


def history(factory: sessionmaker[Session], **options: Any) -> dict[str, Any]:
    """The answer as the API sends it (its columns are numpy arrays until then)."""
    with factory() as session:
        answer = system_history(session, job_id="run1", **options)
    return orjson.loads(orjson.dumps(answer, option=ANSWER_JSON))  # type: ignore[no-any-return]


def test_each_hosts_samples_land_once_from_the_callbacks_file_and_a_host_file(
    service: SyncService,
    session_factory: sessionmaker[Session],
    metrics_dir: Path,
    run1: Path,
    heard: Heard,
) -> None:
    append_system(
        metrics_dir / "run1_system.jsonl",
        *(system_line(T0 + i, "trainer-0", step=i, gpus=[gpu(0, 90.0 + i)]) for i in range(5)),
    )
    append_system(
        metrics_dir / "run1_system.worker-1.jsonl",
        *(system_line(T0 + i, "worker-1", gpus=[gpu(0), gpu(1, 10.0)]) for i in range(3)),
    )
    service.sync_job("run1")
    service.sync_job("run1")  # nothing new: nothing twice

    assert samples_stored(session_factory) == 8
    answer = history(session_factory)
    assert answer["all_hosts"] == ["trainer-0", "worker-1"]
    trainer = answer["hosts"]["trainer-0"]
    assert trainer["downsampled"] is False
    assert trainer["steps"] == [0, 1, 2, 3, 4]
    assert trainer["timestamps"] == [T0 + i for i in range(5)]
    assert trainer["series"]["gpus.0.utilization"]["values"] == [90.0, 91.0, 92.0, 93.0, 94.0]
    assert trainer["series"]["memory.used_gib"]["values"] == [10.5] * 5
    assert trainer["series"]["network.recv_mib_s"]["values"] == [1.25] * 5
    assert trainer["series"]["gpus.0.throttle_thermal"]["values"] == [0.0] * 5
    worker = answer["hosts"]["worker-1"]
    assert worker["series"]["gpus.1.utilization"]["values"] == [10.0] * 3
    assert worker["steps"] == [None] * 3  # sysmon on another node knows no step
    # Every file of the family is announced as "system", once per sample.
    heard_samples = [s for b in heard.batches if b.kind == "system" for s in b.records]
    assert sorted((s["host"], s["timestamp"]) for s in heard_samples) == sorted(
        [("trainer-0", T0 + i) for i in range(5)] + [("worker-1", T0 + i) for i in range(3)]
    )
    # One committed offset per file.
    with session_factory() as session:
        kinds = session.execute(select(SyncState.kind).where(SyncState.job_id == "run1"))
        kinds = sorted(kind for (kind,) in kinds)
    assert kinds[:3] == ["metrics", "samples", "system"] and kinds[3].startswith("system.")
    assert len(kinds) == 4


def test_bad_lines_are_counted_and_absurd_values_left_out_while_the_rest_land(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path, run1: Path
) -> None:
    path = metrics_dir / "run1_system.jsonl"
    append_system(
        path,
        system_line(T0, gpus=[gpu(0)]),
        b'{"timestamp": 1795000000.0, "cpu": {"percent": 1.0}}\n',  # no host
        b'{"host": "node-a", "cpu": {"percent": 1.0}}\n',  # no timestamp
        system_line(631_152_000.0),  # 1990: not a time of this run
        system_line(T0 + 10 * 365 * 86_400),  # ten years ahead
        b"not json at all\n",
        system_line(T0 + 1, gpus=[gpu(0, utilization=1e9)], memory_used_gib=-4.0),
        system_line(T0 + 2, gpus=[gpu(0)]),
    )
    service.sync_job("run1")

    with session_factory() as session:
        job = session.get(Job, "run1")
        assert job is not None and job.last_sync_error is not None
        assert "left out: memory.used_gib, gpus.0.utilization" in job.last_sync_error
        state = session.get(SyncState, ("run1", "system"))
        assert state is not None
        assert state.lines_malformed == 5
        assert state.records_ingested == 3
    answer = history(session_factory)["hosts"]["node-a"]
    assert answer["timestamps"] == [T0, T0 + 1, T0 + 2]
    assert answer["series"]["gpus.0.utilization"]["values"] == [95.0, None, 95.0]
    assert answer["series"]["memory.used_gib"]["values"] == [10.5, None, 10.5]


def test_a_gpu_list_that_grows_mid_run_and_a_rewritten_file_keep_one_row_per_sample(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path, run1: Path
) -> None:
    path = metrics_dir / "run1_system.jsonl"
    append_system(path, *(system_line(T0 + i, gpus=[gpu(0)]) for i in range(3)))
    service.sync_job("run1")
    append_system(path, *(system_line(T0 + i, gpus=[gpu(0), gpu(1, 5.0)]) for i in range(3, 5)))
    service.sync_job("run1")
    answer = history(session_factory)["hosts"]["node-a"]
    assert answer["series"]["gpus.1.utilization"]["values"] == [None, None, None, 5.0, 5.0]
    assert count(session_factory, SystemLayout) == 2

    # A restarted run rewrites the file from scratch, with other values.
    path.write_bytes(b"".join(system_line(T0 + i, gpus=[gpu(0, 50.0)]) for i in range(4)))
    service.sync_job("run1")
    answer = history(session_factory)["hosts"]["node-a"]
    assert samples_stored(session_factory) == 5  # the same (host, time): replaced
    assert answer["series"]["gpus.0.utilization"]["values"] == [50.0] * 4 + [95.0]
    with session_factory() as session:
        counts = session.execute(select(func.sum(SystemRollup.sample_count))).scalar_one()
    # Rollups count every sample they took (a replaced one twice): min and max
    # only widen, so a spike that was stored stays visible in the rollups.
    assert counts >= 2 * 5


def test_host_file_names_belong_to_their_job_only() -> None:
    assert host_word_of("run1_system.node-3.jsonl", "run1") == "node-3"
    assert host_word_of("run1_system.jsonl", "run1") is None  # the callback's file
    assert host_word_of("run1_system.a b.jsonl", "run1") is None  # not a host word
    assert host_word_of("run1_system..hidden.jsonl", "run1") is None
    assert host_word_of("run1_system.x_metrics.jsonl", "run1") is None  # job run1_system.x
    assert host_word_of("run10_system.node.jsonl", "run1") is None
    assert job_of_host_file("a_system.b_system.c.jsonl") == "a_system.b"
    assert job_of_host_file("a_system.b_metrics.jsonl") is None
    assert job_of_host_file("run1_system.jsonl") is None
    assert job_of_host_file("-bad_system.node.jsonl") is None


def test_hostile_host_names_are_kept_as_text_and_odd_file_names_ignored(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path, run1: Path
) -> None:
    hostile = '../../etc/passwd<script>alert("x")</script>' + "h" * 400
    append_system(metrics_dir / "run1_system.jsonl", system_line(T0, hostile))
    append_system(metrics_dir / "run1_system.a b.jsonl", system_line(T0, "spaced"))
    service.sync_job("run1")
    hosts = history(session_factory)["all_hosts"]
    assert hosts == [hostile[:255]]


def test_a_new_host_file_is_found_by_a_background_round_and_deleting_the_job_drops_it_all(
    service: SyncService,
    session_factory: sessionmaker[Session],
    settings: Settings,
    metrics_dir: Path,
    run1: Path,
) -> None:
    rule = PollRule(service, settings.model_copy(update={"poll_interval": 0.01}))
    poll_once(service, rule)
    append_system(metrics_dir / "run1_system.late-node.jsonl", system_line(T0, "late-node"))
    poll_once(service, rule)  # the round's listing finds the new file, its signature changed
    assert history(session_factory)["all_hosts"] == ["late-node"]

    with session_factory.begin() as session:
        delete_job(session, "run1")
    for table in (SystemBlock, SystemRollup, SystemLayout):
        assert count(session_factory, table) == 0


def test_a_sample_line_is_what_the_trainer_side_writes(metrics_dir: Path) -> None:
    line = system_line(T0, "node-a", 7, gpus=[gpu(0, throttle=["hw_thermal_slowdown"])])
    data = json.loads(line)
    assert data["host"] == "node-a" and data["step"] == 7 and data["gpus"][0]["index"] == 0
    decoded = SYSTEM.decode(line.rstrip(b"\n"))
    assert decoded["values"]["gpus.0.throttle_thermal"] == 1.0
    assert decoded["values"]["gpus.0.throttle_power"] == 0.0
    assert decoded["dropped"] == []
