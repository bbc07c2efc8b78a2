"""Exports (history/export/): every format holds what was stored, read a chunk at a time."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from typing import Any

import pyarrow.parquet as pq
import pytest
from sqlalchemy import event, insert
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.records import build_record
from training_platform.errors import InvalidParameterError, MissingExtraError
from training_platform.history.export import sources
from training_platform.history.export.files import start_export
from training_platform.history.export.writers import require_pyarrow
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.store.metric_rows import ROW_KEYS
from training_platform.store.models import Job, TrainingMetric

JOB = "run1"
CHUNK = 4


def _records() -> list[dict[str, Any]]:
    """Ten steps: NaN and infinities, an int and a text series, a group of the trainer's
    own (kept under `other`), callback anomalies, and a series first logged at step 8."""
    records = []
    for step in range(10):
        groups: dict[str, Any] = {
            "loss": {"actor_loss": [math.nan, math.inf, -math.inf][step % 3] if step < 3 else 0.5},
            "reward": {"mean": step / 10},
            "extra": {"tokens": step * 100, "phase": f"p{step % 2}"},
            "mine": {"x": 1.25},
        }
        if step >= 8:
            groups["extra"]["late"] = -2.0
        record = build_record(step, groups, timestamp=1000.0 + step)
        if step == 2:
            record["anomalies"] = [{"type": "nan_inf", "severity": "critical", "message": "m"}]
        records.append(record)
    return records


def _store(factory: sessionmaker[Session], records: list[dict[str, Any]]) -> None:
    with factory() as session:
        if session.get(Job, JOB) is None:
            session.add(Job(job_id=JOB, created_at=0.0))
            session.flush()
        upsert_metrics(session, job_id=JOB, records=records, received_at=1.0)
        session.commit()


def _export(factory: sessionmaker[Session], fmt: Any, **options: Any) -> bytes:
    export = start_export(factory, job_id=JOB, kind="metrics", fmt=fmt, chunk_rows=CHUNK, **options)
    return b"".join(export.body)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_parquet_keeps_types_nonfinite_values_and_a_late_column(
    session_factory: sessionmaker[Session],
) -> None:
    _store(session_factory, _records())
    table = pq.read_table(io.BytesIO(_export(session_factory, "parquet")))
    types = {field.name: str(field.type) for field in table.schema}
    assert list(types)[:4] == ["step", "timestamp", "loss.actor_loss", "reward.mean"]
    assert types["step"] == "int64" and types["extra.tokens"] == "int64"
    assert types["extra.phase"] == "string" and types["anomalies"] == "string"
    assert types["mine.x"] == "double" and types["extra.late"] == "double"
    rows = table.to_pylist()
    assert [row["step"] for row in rows] == list(range(10))
    assert math.isnan(rows[0]["loss.actor_loss"])
    assert rows[1]["loss.actor_loss"] == math.inf and rows[2]["loss.actor_loss"] == -math.inf
    assert rows[5]["extra.tokens"] == 500 and rows[5]["reward.mean"] == 0.5
    assert [row["extra.late"] for row in rows] == [None] * 8 + [-2.0, -2.0]  # null, not NaN
    assert json.loads(rows[2]["anomalies"])[0]["type"] == "nan_inf"
    assert pq.ParquetFile(io.BytesIO(_export(session_factory, "parquet"))).num_row_groups == 3


def test_csv_spells_nonfinite_numbers_and_keeps_every_column(
    session_factory: sessionmaker[Session],
) -> None:
    _store(session_factory, _records())
    rows = list(csv.DictReader(io.StringIO(_export(session_factory, "csv").decode())))
    assert [row["loss.actor_loss"] for row in rows[:4]] == ["NaN", "inf", "-inf", "0.5"]
    assert rows[9]["extra.late"] == "-2.0" and rows[0]["extra.late"] == ""
    assert rows[3]["extra.tokens"] == "300" and rows[3]["extra.phase"] == "p1"
    assert rows[3]["timestamp"] == "1003.0" and rows[3]["mine.x"] == "1.25"
    import pandas as pd

    frame = pd.read_csv(io.StringIO(_export(session_factory, "csv").decode()))
    assert math.isnan(frame["loss.actor_loss"][0]) and frame["loss.actor_loss"][1] == math.inf


def test_nonfinite_values_inside_json_groups_and_mixed_kinds_keep_their_values(
    session_factory: sessionmaker[Session],
) -> None:
    """A NaN or infinity in `extra` or in a trainer's own group (stored null plus a mark)
    comes back in its cell; a field logged as an int, then a float, is a float column;
    one holding a number, then text, is text; rows alike after the first add no column."""
    records = [
        build_record(
            step,
            {
                "extra": {"x": [1, 2.5, math.nan, 4][step], "y": [1, "one", 2, 3][step]},
                "mine": {"z": [0.5, math.inf, 0.5, -math.inf][step]},
            },
            timestamp=float(step),
        )
        for step in range(4)
    ] + [build_record(step, {"extra": {"x": 1, "y": 2}}, timestamp=9.0) for step in range(4, 9)]
    _store(session_factory, records)
    table = pq.read_table(io.BytesIO(_export(session_factory, "parquet")))
    types = {field.name: str(field.type) for field in table.schema}
    assert types["extra.x"] == "double" and types["extra.y"] == "string"
    assert types["mine.z"] == "double"
    rows = table.to_pylist()
    assert [row["extra.x"] for row in rows[:2]] == [1.0, 2.5] and math.isnan(rows[2]["extra.x"])
    assert [row["mine.z"] for row in rows[:4]] == [0.5, math.inf, 0.5, -math.inf]
    assert [row["extra.y"] for row in rows[:4]] == ["1", "one", "2", "3"]
    last = {"step": 8, "timestamp": 9.0, "extra.x": 1.0, "extra.y": "2"}
    assert rows[8] == {**dict.fromkeys(types), **last}
    lines = list(csv.DictReader(io.StringIO(_export(session_factory, "csv").decode())))
    assert [line["extra.x"] for line in lines[:4]] == ["1", "2.5", "NaN", "4"]
    assert [line["mine.z"] for line in lines[:4]] == ["0.5", "inf", "0.5", "-inf"]
    assert lines[8]["extra.x"] == "1" and lines[8]["mine.z"] == ""


def test_jsonl_lines_are_the_records_the_history_endpoint_answers(
    session_factory: sessionmaker[Session],
) -> None:
    records = _records()
    _store(session_factory, records)
    lines = [json.loads(line) for line in _export(session_factory, "jsonl").splitlines()]
    assert [line["step"] for line in lines] == list(range(10))
    assert [line["loss"]["actor_loss"] for line in lines[:3]] == ["NaN", "Infinity", "-Infinity"]
    assert lines[9]["extra"] == {"tokens": 900, "phase": "p1", "late": -2.0}
    assert lines[4]["other"] == {"mine": {"x": 1.25}}


def test_fields_pick_columns_and_groups_and_an_unknown_one_is_named(
    session_factory: sessionmaker[Session],
) -> None:
    _store(session_factory, _records())
    header = _export(session_factory, "csv", fields=["extra", "loss.actor_loss"]).split(b"\n")[0]
    assert header.decode().split(",") == [
        "step", "timestamp", "loss.actor_loss", "extra.tokens", "extra.phase", "extra.late",
    ]  # fmt: skip
    lines = _export(session_factory, "jsonl", fields=["extra.late"]).splitlines()
    assert json.loads(lines[9]) == {"step": 9, "timestamp": 1009.0, "extra": {"late": -2.0}}
    with pytest.raises(InvalidParameterError, match=r"job 'run1' matches 'extra\.nope'"):
        _export(session_factory, "csv", fields=["extra.nope", "loss"])


def test_a_range_and_an_empty_job_export_only_a_header(
    session_factory: sessionmaker[Session],
) -> None:
    _store(session_factory, _records())
    rows = list(csv.DictReader(io.StringIO(_export(session_factory, "csv", start_step=3,
                                                   end_step=5).decode())))  # fmt: skip
    assert [row["step"] for row in rows] == ["3", "4", "5"]
    empty = _export(session_factory, "csv", start_step=50)
    assert empty == b"step,timestamp\n"
    assert (
        pq.read_table(io.BytesIO(_export(session_factory, "parquet", start_step=50))).num_rows == 0
    )


def test_an_export_is_a_snapshot_of_the_steps_stored_when_it_began(
    session_factory: sessionmaker[Session],
) -> None:
    _store(session_factory, _records()[:6])
    export = start_export(session_factory, job_id=JOB, kind="metrics", fmt="jsonl", chunk_rows=2)
    first = next(export.body)
    _store(session_factory, _records()[6:])  # the run goes on while the file is read
    lines = (first + b"".join(export.body)).splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(6))


def test_parquet_without_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # `import` raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'training-platform\[export\]'"):
        require_pyarrow()


def _bulk(factory: sessionmaker[Session], count: int) -> None:
    with factory() as session:
        session.add(Job(job_id=JOB, created_at=0.0))
        session.flush()
        blank = dict.fromkeys(ROW_KEYS)
        rows = [
            {**blank, "job_id": JOB, "step": step, "actor_loss": step * 0.5, "has_anomaly": False,
             "extra": {"s": step}, "received_at": 1.0}
            for step in range(count)
        ]  # fmt: skip
        session.execute(insert(TrainingMetric.__table__), rows)  # Core: no ORM bulk cost
        session.commit()


def test_a_long_run_is_read_a_chunk_at_a_time_and_lazily(
    session_factory: sessionmaker[Session],
) -> None:
    """100k records: each query is a keyset page of at most a chunk (LIMIT, no OFFSET),
    each chunk is held alone, and nothing is read ahead of what the writer took."""
    count, chunk = 100_000, 5_000
    _bulk(session_factory, count)
    plan = sources.plan_export(
        session_factory, job_id=JOB, kind="metrics", flat=False, chunk_rows=chunk
    )
    engine = session_factory.kw["bind"]
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM training_metrics" in statement:
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        started = time.monotonic()
        chunks = sources.read_chunks(session_factory, plan, chunk_rows=chunk)
        first = next(chunks)
        assert first.size == chunk and len(statements) == 1  # lazy: one page read so far
        steps_seen, last = first.size, first.columns["step"][-1]
        del first
        for columns in chunks:
            assert columns.size <= chunk and columns.columns["step"][0] == last + 1
            steps_seen, last = steps_seen + columns.size, columns.columns["step"][-1]
        assert steps_seen == count and last == count - 1
        assert len(statements) == count // chunk + 1  # the last page comes back short... or empty
        assert all("LIMIT" in statement.upper() for statement in statements)
        assert time.monotonic() - started < 60
    finally:
        event.remove(engine, "before_cursor_execute", seen)
