"""`{job_id}_samples.jsonl` into `samples`: exactly once, prompts stored once, storable values."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from tests.ingest.listener import Heard
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.ingest.samples_file import SAMPLES
from training_platform.ingest.sync_service import SyncService
from training_platform.settings import Settings
from training_platform.store.jobs import delete_job
from training_platform.store.models import Sample, SamplePrompt, SyncState


@pytest.fixture
def service(
    session_factory: sessionmaker[Session], settings: Settings, heard: Heard
) -> Iterator[SyncService]:
    service = SyncService(session_factory, settings, listener=heard, line_kinds=[SAMPLES])
    yield service
    service.close()


def write_metrics(metrics_dir: Path, *steps: int) -> None:
    with (metrics_dir / "run1_metrics.jsonl").open("ab") as handle:
        for step in steps:
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=float(step))))


def write_samples(metrics_dir: Path, *samples: dict[str, Any]) -> None:
    with (metrics_dir / "run1_samples.jsonl").open("ab") as handle:
        handle.write(b"".join(encode_record(sample) for sample in samples))


def group(step: int, prompt: str, rewards: list[float], key: str) -> list[dict[str, Any]]:
    return [
        build_sample(
            step, i, prompt, f"answer {i} to {prompt}", reward=r, group=key, finish_reason="stop"
        )
        for i, r in enumerate(rewards)
    ]


def stored(factory: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    with factory() as session:
        rows = session.execute(
            select(Sample.step, Sample.sample_index, SamplePrompt.text, Sample.completion,
                   Sample.reward, Sample.reward_nonfinite)
            .join(SamplePrompt, SamplePrompt.id == Sample.prompt_id)
            .order_by(Sample.step, Sample.sample_index)
        )  # fmt: skip
        return [tuple(row) for row in rows]


def test_samples_land_once_with_each_prompt_stored_once(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path, heard: Heard
) -> None:
    write_metrics(metrics_dir, 0, 1)
    write_samples(metrics_dir, *group(0, "What is 2+2?", [1.0, 0.0, 1.0, 0.5], "p-0"))
    write_samples(metrics_dir, *group(1, "What is 2+2?", [1.0, 1.0], "p-0"))

    service.sync_job("run1")
    service.sync_job("run1")  # nothing new: nothing twice

    rows = stored(session_factory)
    assert [(step, index) for step, index, *_ in rows] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 1),
    ]
    assert {prompt for _, _, prompt, *_ in rows} == {"What is 2+2?"}
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(SamplePrompt)) == 1
        state = session.get(SyncState, ("run1", "samples"))
        assert state is not None and state.records_ingested == 6
    (batch,) = [b for b in heard.batches if b.kind == "samples"]
    assert [(s["step"], s["index"]) for s in batch.records] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 1),
    ]


def test_a_rewritten_sample_wins_and_odd_values_are_stored(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    write_metrics(metrics_dir, 0)
    write_samples(
        metrics_dir,
        build_sample(0, 0, "p", "first", reward=0.0),
        build_sample(
            0, 1, "p\x00 with NUL", "nan reward", reward=math.nan, rewards={"acc": math.inf}
        ),
    )
    with (metrics_dir / "run1_samples.jsonl").open("ab") as handle:
        handle.write(b'{"step": 0, "index": 2, "prompt": "p", "completion": "\xff bad utf-8"}\n')
        handle.write(b'{"step": 0, "index": 3, "completion": "no prompt"}\n')
        handle.write(
            json.dumps({"step": 0, "index": 4, "prompt": "p", "completion": "\udc80"}).encode()
            + b"\n"
        )
    write_samples(metrics_dir, build_sample(0, 0, "p", "second", reward=1.0))  # a resumed run

    service.sync_job("run1")

    rows = stored(session_factory)
    assert rows[0][2:] == ("p", "second", 1.0, None)
    assert rows[1][2:] == ("p with NUL", "nan reward", None, "NaN")
    assert rows[2][:2] == (0, 4) and rows[2][3] == "\ufffd"  # a lone surrogate, made storable
    with session_factory() as session:
        sample = session.get(Sample, ("run1", 0, 1))
        assert sample is not None and sample.rewards == {"acc": "Infinity"}
        state = session.get(SyncState, ("run1", "samples"))
        assert state is not None and state.lines_malformed == 2  # bad UTF-8, missing prompt


def test_deleting_a_job_deletes_its_samples_and_prompts(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    write_metrics(metrics_dir, 0)
    write_samples(metrics_dir, *group(0, "q", [1.0, 0.0], "g"))
    service.sync_job("run1")

    with session_factory.begin() as session:
        delete_job(session, "run1")

    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Sample)) == 0
        assert session.scalar(select(func.count()).select_from(SamplePrompt)) == 0
