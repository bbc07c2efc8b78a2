"""A job's rows in step order, a chunk at a time, up to where the export began.

Each chunk is one keyset query (``WHERE step > last ORDER BY step LIMIT n``,
never an OFFSET) in a session of its own, so a slow reader holds no pooled
connection between chunks and the memory is one chunk of rows whatever the
run's length. A run still being written is exported up to the last step (the
last anomaly row) stored when the export started: a consistent snapshot, not
a file that grows while it is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import NONFINITE_VALUES
from training_platform.history.export.columns import (
    LEADING,
    ColumnChunk,
    Columns,
    ColumnSet,
    chunk_of_rows,
    select_columns,
)
from training_platform.history.export.metrics import (
    Path,
    SessionFactory,
    metric_chunks,
    metric_columns,
    read_metric_columns,
)
from training_platform.history.samples_query import SAMPLE_COLUMNS, SAMPLES_JOINED, sample_record
from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import Anomaly, Sample, TrainingMetric

Kind = Literal["metrics", "samples", "anomalies"]
KINDS: Final[tuple[Kind, ...]] = ("metrics", "samples", "anomalies")
CHUNK_ROWS: Final = 2_000  # rows per query: ~1 MB of records, a Parquet row group

# Step first: the keyset (`metric_chunks`) carries on after the last row's.
_METRIC_COLUMNS: Final = (
    TrainingMetric.step,
    *(column for column in TrainingMetric.__table__.columns if column.name != "step"),
)
_ANOMALY_COLUMNS: Final[Columns] = {
    "step": "int",
    "end_step": "int",
    "type": "str",
    "severity": "str",
    "message": "str",
    "source": "str",
    "created_at": "float",
    "evidence": "json",
}


@dataclass(frozen=True)
class ExportPlan:
    """What one export reads: the job, the kind, the range (`end` is the snapshot's
    bound) and the columns of the flat formats (None: nothing is stored)."""

    job_id: str
    kind: Kind
    start_step: int
    end: int | None
    columns: Columns
    # Where the values of the metrics' JSON columns sit in a record (metrics.py).
    paths: Mapping[str, Path] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.end is None


def plan_export(
    session_factory: SessionFactory,
    *,
    job_id: str,
    kind: Kind,
    start_step: int | None = None,
    end_step: int | None = None,
    fields: Iterable[str] | None = None,
    flat: bool = True,
    chunk_rows: int = CHUNK_ROWS,
) -> ExportPlan:
    """The snapshot's bound, then (for CSV and Parquet, `flat`) the columns: a first
    pass over the same rows (the metrics': their JSON groups' shapes only,
    `metric_columns`), so a column first logged late in the run is there from the
    header on. 422 for `fields` naming no column."""
    start = start_step or 0
    with session_factory() as session:
        end = _snapshot_end(session, job_id, kind, start, end_step)
    plan = ExportPlan(job_id, kind, start, end, _leading(kind))
    if kind == "anomalies":
        columns = select_columns(_ANOMALY_COLUMNS, fields, what=f"the anomalies of job {job_id!r}")
        return ExportPlan(job_id, kind, start, end, columns)
    if not flat and fields is None:
        return plan
    found, paths = ColumnSet(_leading(kind).items()), dict[str, Path]()
    if kind == "metrics" and end is not None:
        found, paths = metric_columns(
            session_factory, job_id, start, end, _leading(kind), chunk_rows
        )
    elif kind == "samples":
        for chunk in _records(session_factory, plan, chunk_rows, nested=False):
            for row in chunk:
                found.add(row)
    what = f"the {kind} of job {job_id!r}"
    columns = select_columns(found.columns(fixed_first=kind == "metrics"), fields, what=what)
    return ExportPlan(job_id, kind, start, end, columns, paths)


def _leading(kind: Kind) -> Columns:
    if kind == "metrics":
        return {"step": "int", "timestamp": "float"}
    if kind == "samples":
        return {"step": "int", "index": "int", "timestamp": "float"}
    return dict(_ANOMALY_COLUMNS)


def _snapshot_end(
    session: Session, job_id: str, kind: Kind, start: int, end_step: int | None
) -> int | None:
    """The last step (anomalies: row id) in range stored now; None: nothing is."""
    if kind == "anomalies":
        query = select(func.max(Anomaly.id)).where(Anomaly.job_id == job_id, Anomaly.step >= start)
        if end_step is not None:
            query = query.where(Anomaly.step <= end_step)
        return session.scalar(query)
    table = TrainingMetric if kind == "metrics" else Sample
    query = select(func.max(table.step)).where(table.job_id == job_id, table.step >= start)
    if end_step is not None:
        query = query.where(table.step <= end_step)
    return session.scalar(query)


def read_chunks(
    session_factory: SessionFactory, plan: ExportPlan, *, chunk_rows: int = CHUNK_ROWS
) -> Iterator[ColumnChunk]:
    """The plan's rows in order, at most `chunk_rows` per chunk, as the columns of the
    flat formats (dotted names, real floats)."""
    if plan.end is None:
        return
    if plan.kind == "metrics":
        yield from read_metric_columns(
            session_factory, plan.job_id, plan.start_step, plan.end, plan.columns, plan.paths,
            chunk_rows,
        )  # fmt: skip
        return
    for rows in _records(session_factory, plan, chunk_rows, nested=False):
        yield chunk_of_rows(rows, plan.columns)


def read_records(
    session_factory: SessionFactory, plan: ExportPlan, *, chunk_rows: int = CHUNK_ROWS
) -> Iterator[list[dict[str, Any]]]:
    """The plan's rows in order, at most `chunk_rows` per list, in the API's shapes (a
    metrics record as `GET .../metrics` answers it, non-finite numbers as "NaN",
    "Infinity", ...): the lines of JSONL."""
    return _records(session_factory, plan, chunk_rows, nested=True)


def _records(
    session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int, nested: bool
) -> Iterator[list[dict[str, Any]]]:
    if plan.end is None:
        return
    read = {"metrics": _metric_rows, "samples": _sample_rows, "anomalies": _anomaly_rows}
    yield from read[plan.kind](session_factory, plan, chunk_rows, nested)


def _metric_rows(
    session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int, nested: bool
) -> Iterator[list[dict[str, Any]]]:
    """Nested records (JSONL); the flat formats read columns (`read_metric_columns`)."""
    assert plan.end is not None
    for rows in metric_chunks(
        session_factory, plan.job_id, plan.start_step, plan.end, chunk_rows, _METRIC_COLUMNS
    ):
        yield [row_to_record(row, nonfinite_as_strings=nested) for row in rows]


def _sample_rows(
    session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int, nested: bool
) -> Iterator[list[dict[str, Any]]]:
    step, index = plan.start_step, -1
    while True:
        with session_factory() as session:
            rows = (
                session.connection()
                .execute(
                    select(*SAMPLE_COLUMNS)
                    .select_from(SAMPLES_JOINED)
                    .where(
                        Sample.job_id == plan.job_id,
                        Sample.step <= plan.end,
                        or_(
                            Sample.step > step,
                            and_(Sample.step == step, Sample.sample_index > index),
                        ),
                    )
                    .order_by(Sample.step, Sample.sample_index)
                    .limit(chunk_rows)
                )
                .all()
            )
        if not rows:
            return
        yield [_sample(row, nested) for row in rows]
        if len(rows) < chunk_rows:
            return
        step, index = rows[-1].step, rows[-1].sample_index


def _sample(row: Any, nested: bool) -> dict[str, Any]:
    """A sample as `GET .../samples` shows it (nested), or flattened (real floats)."""
    sample = sample_record(row)
    if nested:
        return sample
    flat = {key: value for key, value in sample.items() if key not in ("rewards", "extra")}
    if row.reward is None and row.reward_nonfinite is not None:
        flat["reward"] = NONFINITE_VALUES[row.reward_nonfinite]
    for group in ("rewards", "extra"):
        for name, value in (sample[group] or {}).items():
            flat[f"{group}.{name}"] = value
    return flat


def _anomaly_rows(
    session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int, nested: bool
) -> Iterator[list[dict[str, Any]]]:
    """Stored rows, one per (step, type, source), in step order; `end` bounds the ids."""
    step, last_id = plan.start_step, 0
    while True:
        with session_factory() as session:
            rows = session.scalars(
                select(Anomaly)
                .where(
                    Anomaly.job_id == plan.job_id,
                    Anomaly.id <= plan.end,
                    or_(Anomaly.step > step, and_(Anomaly.step == step, Anomaly.id > last_id)),
                )
                .order_by(Anomaly.step, Anomaly.id)
                .limit(chunk_rows)
            ).all()
            chunk = [
                {
                    name: (row.step if name == "end_step" and row.end_step is None else value)
                    for name in _ANOMALY_COLUMNS
                    for value in (getattr(row, name),)
                }
                for row in rows
            ]
        if not rows:
            return
        yield chunk
        if len(rows) < chunk_rows:
            return
        step, last_id = rows[-1].step, rows[-1].id


def nested_fields(record: dict[str, Any], fields: Iterable[str] | None) -> dict[str, Any]:
    """A nested record cut down to `fields` (columns or groups), for JSONL."""
    if fields is None:
        return record
    names = set(fields)
    kept: dict[str, Any] = {key: record[key] for key in LEADING if key in record}
    for group, values in record.items():
        if group in LEADING:
            continue
        if group in names:
            kept[group] = values
        elif group == "other" and isinstance(values, dict):
            other = {
                name: fields_
                for name, fields_ in (
                    (name, _cut(str(name), inner, names)) for name, inner in values.items()
                )
                if fields_
            }
            if other:
                kept["other"] = other
        elif isinstance(values, dict) and (cut := _cut(group, values, names)):
            kept[group] = cut
    return kept


def _cut(group: str, values: Any, names: set[str]) -> Any:
    if group in names:
        return values
    if not isinstance(values, dict):
        return None
    return {field: value for field, value in values.items() if f"{group}.{field}" in names}
