"""PostgreSQL's vocabulary of the completions' words (store/word_search.py), filled by a
statement trigger as samples land: two jobs ingesting the same new words at once both
land (one waits for the other's new words, and the trigger inserts them sorted, so the
two never wait on each other), and every word is kept and found."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.history.samples_query import SampleFilter, sample_page
from training_platform.ingest.persister import sync_file
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.registry import discover_jobs
from training_platform.ingest.samples_file import SAMPLES


def _words(count: int) -> list[str]:
    rng = random.Random(11)
    return ["".join(rng.choices("bcdfghjklmnpqrstvwxz", k=12)) for _ in range(count)]


def _write_job(directory: Path, job: str, words: list[str]) -> None:
    (directory / f"{job}_metrics.jsonl").write_bytes(b"")
    samples = [
        build_sample(step, index, f"prompt {step}", " ".join(words[index::8]))
        for step in range(20)
        for index in range(8)
    ]
    path = directory / f"{job}_samples.jsonl"
    path.write_bytes(b"".join(encode_record(sample) for sample in samples))


def test_two_jobs_adding_the_same_new_words_at_once_both_land(
    engine: Engine, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the vocabulary is PostgreSQL's")
    words = _words(6_000)
    shared = words[:2_000]
    # The shared words among 4,000 more in one job: each statement's words
    # then come out of its DISTINCT in another order unless sorted.
    _write_job(tmp_path, "forward", shared + words[2_000:])
    _write_job(tmp_path, "backward", shared[::-1])
    with session_factory.begin() as session:
        discover_jobs(session, tmp_path)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def ingest(job: str) -> None:
        reader = LocalMetricsReader(job, tmp_path)
        try:
            start.wait()
            assert sync_file(session_factory, job, reader, SAMPLES).new_metrics == 160
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            reader.close()

    threads = [threading.Thread(target=ingest, args=(job,)) for job in ("forward", "backward")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    with engine.connect() as connection:
        known = set(connection.execute(text("SELECT word FROM sample_words")).scalars())
    assert set(words) <= known
    with session_factory() as session:
        for job in ("forward", "backward"):
            page = sample_page(session, job_id=job, where=SampleFilter(q=shared[5]), limit=100)
            assert len(page.samples) == 20  # one sample in each of the 20 steps
