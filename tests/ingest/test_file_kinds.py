"""A new kind of line file plugs into ingestion: read incrementally, committed exactly once.

The kind here is a test's own (`{job_id}_notes.jsonl` into a table of its
own), given to the sync service the way `services.py` gives it real kinds:
every guarantee the metrics file has (offset committed with the rows,
crash safety, restarts, bad lines, quiet rounds) must hold for it with no
code of its own beyond decoding and storing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, Text, select
from sqlalchemy.orm import Session, sessionmaker

from tests.ingest.listener import Heard
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.errors import RecordError
from training_platform.ingest.file_kinds import LineFileKind, StoredRows
from training_platform.ingest.polling import KnownJob, PollRule
from training_platform.ingest.sync_service import SyncService
from training_platform.settings import Settings
from training_platform.store.database import dialect_insert
from training_platform.store.models import Job, SyncState

NOTES_TABLE = Table(
    "test_notes",
    MetaData(),
    Column("job_id", String(128), primary_key=True),
    Column("key", Integer, primary_key=True, autoincrement=False),
    Column("text", Text),
)


def decode_note(line: bytes) -> dict[str, Any]:
    value = json.loads(line)
    if not isinstance(value, dict) or not isinstance(value.get("key"), int):
        raise RecordError("a note needs an integer 'key'")
    return {"key": value["key"], "text": str(value.get("text", ""))}


class Crash(Exception):
    """Raised from inside a store, after its rows were written (before the commit)."""


crash_after_store = False


def store_notes(
    session: Session, job_id: str, records: list[dict[str, Any]], _at: float, _notes: list[str]
) -> StoredRows:
    insert = dialect_insert(session)(NOTES_TABLE)
    statement = insert.on_conflict_do_update(
        index_elements=["job_id", "key"], set_={"text": insert.excluded.text}
    )
    session.execute(statement, [{"job_id": job_id, **record} for record in records])
    if crash_after_store:
        raise Crash("simulated crash before commit")
    return StoredRows(len(records))


NOTES = LineFileKind(
    name="notes",
    suffix="_notes.jsonl",
    decode=decode_note,
    store=store_notes,
    key=lambda record: record["key"],
)


@pytest.fixture
def notes_table(engine: Engine) -> Iterator[None]:
    NOTES_TABLE.create(engine)
    yield
    NOTES_TABLE.drop(engine)


@pytest.fixture
def service(
    session_factory: sessionmaker[Session], settings: Settings, heard: Heard, notes_table: None
) -> Iterator[SyncService]:
    service = SyncService(session_factory, settings, listener=heard, line_kinds=[NOTES])
    yield service
    service.close()


def write_metrics(metrics_dir: Path, *steps: int) -> None:
    with (metrics_dir / "run1_metrics.jsonl").open("ab") as handle:
        for step in steps:
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=float(step))))


def write_notes(metrics_dir: Path, *lines: str, mode: str = "a") -> None:
    with (metrics_dir / "run1_notes.jsonl").open(mode) as handle:
        handle.write("".join(line + "\n" for line in lines))


def note(key: int, text: str) -> str:
    return json.dumps({"key": key, "text": text})


def stored_notes(factory: sessionmaker[Session]) -> list[tuple[int, str]]:
    with factory() as session:
        rows = session.execute(
            select(NOTES_TABLE.c.key, NOTES_TABLE.c.text).order_by(NOTES_TABLE.c.key)
        )
        return [(key, text) for key, text in rows]


def notes_state(factory: sessionmaker[Session]) -> SyncState:
    with factory() as session:
        state = session.get(SyncState, ("run1", "notes"))
        assert state is not None
        return state


def test_a_new_kind_is_ingested_with_its_own_offset_and_announced(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path, heard: Heard
) -> None:
    write_metrics(metrics_dir, 0, 1)
    write_notes(metrics_dir, note(1, "a"), note(2, "b"), note(1, "a again"))

    outcome = service.sync_job("run1")

    assert outcome.result.new_metrics == 2  # the metrics file's own counts
    assert stored_notes(session_factory) == [(1, "a again"), (2, "b")]  # newest line wins
    notes_file = metrics_dir / "run1_notes.jsonl"
    state = notes_state(session_factory)
    assert state.offset == notes_file.stat().st_size and state.records_ingested == 3
    with session_factory() as session:
        metrics_state = session.get(SyncState, ("run1", "metrics"))
        assert metrics_state is not None and metrics_state.records_ingested == 2
    (batch,) = [batch for batch in heard.batches if batch.kind == "notes"]
    # One record per key, the newest, in file order.
    assert batch.records == [{"key": 2, "text": "b"}, {"key": 1, "text": "a again"}]

    service.sync_job("run1")  # nothing new: nothing written, nothing announced
    assert len([b for b in heard.batches if b.kind == "notes"]) == 1
    write_notes(metrics_dir, note(3, "c"))
    service.sync_job("run1")
    assert stored_notes(session_factory) == [(1, "a again"), (2, "b"), (3, "c")]
    assert notes_state(session_factory).records_ingested == 4


def test_a_crash_before_the_commit_loses_and_duplicates_nothing(
    service: SyncService,
    session_factory: sessionmaker[Session],
    metrics_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_metrics(metrics_dir, 0)
    write_notes(metrics_dir, note(1, "a"))
    service.sync_job("run1")
    write_notes(metrics_dir, note(2, "b"), note(3, "c"))
    before = notes_state(session_factory).offset

    monkeypatch.setattr(__name__ + ".crash_after_store", True)
    with pytest.raises(Crash):
        service.sync_job("run1")
    assert stored_notes(session_factory) == [(1, "a")]  # rolled back with its offset
    assert notes_state(session_factory).offset == before

    monkeypatch.setattr(__name__ + ".crash_after_store", False)
    service.sync_job("run1")
    assert stored_notes(session_factory) == [(1, "a"), (2, "b"), (3, "c")]
    assert notes_state(session_factory).records_ingested == 3


def test_a_missing_file_of_an_optional_kind_is_nothing_yet_and_bad_lines_are_counted(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    write_metrics(metrics_dir, 0)

    outcome = service.sync_job("run1")  # no notes file: not an error

    assert outcome.result.new_metrics == 1 and stored_notes(session_factory) == []
    with session_factory() as session:
        job = session.get(Job, "run1")
        assert job is not None and job.last_sync_error is None

    write_notes(metrics_dir, note(1, "a"), "{not json", json.dumps({"key": "x"}), note(2, "b"))
    service.sync_job("run1")
    assert stored_notes(session_factory) == [(1, "a"), (2, "b")]
    assert notes_state(session_factory).lines_malformed == 2


def test_a_rewritten_file_is_read_again_from_its_start(
    service: SyncService, session_factory: sessionmaker[Session], metrics_dir: Path
) -> None:
    write_metrics(metrics_dir, 0)
    write_notes(metrics_dir, note(1, "first run"), note(2, "first run"))
    service.sync_job("run1")

    write_notes(metrics_dir, note(1, "restarted"), mode="w")  # a restarted run rewrote it
    service.sync_job("run1")

    assert stored_notes(session_factory) == [(1, "restarted"), (2, "first run")]
    assert notes_state(session_factory).resets == 1


def test_a_change_to_that_file_alone_makes_the_job_due_in_a_quiet_round(
    service: SyncService, settings: Settings, metrics_dir: Path
) -> None:
    write_metrics(metrics_dir, 0)
    service.sync_job("run1")
    rule = PollRule(service, settings)
    job = KnownJob("run1", "local", "running", str(metrics_dir.resolve()))

    def due() -> list[str]:
        return rule.due([job], now=0.0, local_due=True, watching=False)

    assert due() == []  # nothing changed since the last sync
    write_notes(metrics_dir, note(1, "a"))
    assert due() == ["run1"]
    service.sync_job("run1")
    assert due() == []
