"""A job's rows in step order, a chunk at a time, up to where the export began.

Each chunk is one keyset query (``WHERE step > last ORDER BY step LIMIT n``,
never an OFFSET) in a session of its own, so a slow reader holds no pooled
connection between chunks and the memory is one chunk of rows whatever the
run's length. A run still being written is exported up to the last step (the
last anomaly row) stored when the export started: a consistent snapshot, not
a file that grows while it is read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import NONFINITE_VALUES
from training_platform.history.export.columns import (
    LEADING,
    Columns,
    ColumnSet,
    flatten_record,
    select_columns,
)
from training_platform.store.metric_rows import COLUMN_OF, row_to_record
from training_platform.store.models import Anomaly, Sample, SamplePrompt, TrainingMetric

Kind = Literal["metrics", "samples", "anomalies"]
KINDS: Final[tuple[Kind, ...]] = ("metrics", "samples", "anomalies")
CHUNK_ROWS: Final = 2_000  # rows per query: ~1 MB of records, a Parquet row group
SessionFactory = Callable[[], Session]

_METRIC_COLUMNS: Final = tuple(TrainingMetric.__table__.columns)
_SAMPLE_COLUMNS: Final = (
    Sample.step,
    Sample.sample_index,
    Sample.timestamp,
    SamplePrompt.text,
    SamplePrompt.digest,
    Sample.completion,
    Sample.reward,
    Sample.reward_nonfinite,
    Sample.rewards,
    Sample.group_key,
    Sample.response_length,
    Sample.completion_chars,
    Sample.finish_reason,
    Sample.extra,
)
_SAMPLES_JOINED: Final = Sample.__table__.join(
    SamplePrompt.__table__, SamplePrompt.id == Sample.prompt_id
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
    pass over the same rows, so a column first logged late in the run is there
    from the header on. 422 for `fields` naming no column."""
    start = start_step or 0
    with session_factory() as session:
        end = _snapshot_end(session, job_id, kind, start, end_step)
    plan = ExportPlan(job_id, kind, start, end, _leading(kind))
    if kind == "anomalies":
        columns = select_columns(_ANOMALY_COLUMNS, fields, what=f"the anomalies of job {job_id!r}")
        return ExportPlan(job_id, kind, start, end, columns)
    if not flat and fields is None:
        return plan
    if kind == "metrics":
        found = _metric_fields(session_factory, plan, chunk_rows)
    else:
        found = ColumnSet(_leading(kind).items())
        for chunk in read_chunks(session_factory, plan, chunk_rows=chunk_rows):
            for row in chunk:
                found.add(row)
    what = f"the {kind} of job {job_id!r}"
    columns = select_columns(found.columns(fixed_first=kind == "metrics"), fields, what=what)
    return ExportPlan(job_id, kind, start, end, columns)


_FIXED: Final = tuple((f"{group}.{field}", column) for (group, field), column in COLUMN_OF.items())
_SERIES_OF_COLUMN: Final = {column: series for series, column in _FIXED}
_FIELD_COLUMNS: Final = (
    TrainingMetric.step,
    TrainingMetric.timing,
    TrainingMetric.extra,
    TrainingMetric.other,
    TrainingMetric.anomalies,
    TrainingMetric.nonfinite,
)


def _metric_fields(session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int) -> ColumnSet:
    """The metrics' columns, reading only what varies: one count per numeric column
    (a fixed series is a column when the run logged it), then the JSON groups a
    chunk at a time (their keys and kinds; a non-finite mark is a float)."""
    found = ColumnSet(_leading("metrics").items())
    if plan.end is None:
        return found
    in_range = (
        TrainingMetric.job_id == plan.job_id,
        TrainingMetric.step >= plan.start_step,
        TrainingMetric.step <= plan.end,
    )
    with session_factory() as session:
        counts = (
            session.connection()
            .execute(
                select(
                    *(func.count(getattr(TrainingMetric, column)) for _, column in _FIXED)
                ).where(*in_range)
            )
            .one()
        )
    fixed = {series for (series, _), count in zip(_FIXED, counts, strict=True) if count}
    after = plan.start_step - 1
    while True:
        with session_factory() as session:
            rows = (
                session.connection()
                .execute(
                    select(*_FIELD_COLUMNS)
                    .where(*in_range, TrainingMetric.step > after)
                    .order_by(TrainingMetric.step)
                    .limit(chunk_rows)
                )
                .all()
            )
        for row in rows:
            marks = row.nonfinite or {}
            fixed.update(_SERIES_OF_COLUMN[key] for key in marks if key in _SERIES_OF_COLUMN)
            flat: dict[str, Any] = {}
            for group in ("timing", "extra"):
                flat.update(_marked(group, getattr(row, group), marks.get(group)))
            for group, values in (row.other or {}).items():
                flat.update(_marked(str(group), values, (marks.get("other") or {}).get(group)))
            if row.anomalies:
                flat["anomalies"] = row.anomalies
            found.add(flat)
        if len(rows) < chunk_rows:
            break
        after = rows[-1].step
    found.add({series: 0.0 for series in fixed})
    return found


def _marked(group: str, values: Any, marks: dict[str, str] | None) -> dict[str, Any]:
    """A JSON group's values as dotted columns; a non-finite one (stored null) a float."""
    if not isinstance(values, dict):
        return {} if values is None else {group: values}
    flat = {f"{group}.{name}": value for name, value in values.items()}
    for name in marks or ():
        flat[f"{group}.{name}"] = math.nan
    return flat


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
    session_factory: SessionFactory,
    plan: ExportPlan,
    *,
    chunk_rows: int = CHUNK_ROWS,
    nested: bool = False,
) -> Iterator[list[dict[str, Any]]]:
    """The plan's rows in order, at most `chunk_rows` per list: flat dicts (dotted
    columns, real floats), or with `nested` the API's shapes (a metrics record as
    `GET .../metrics` answers it, non-finite numbers as "NaN", "Infinity", ...)."""
    if plan.end is None:
        return
    read = {"metrics": _metric_rows, "samples": _sample_rows, "anomalies": _anomaly_rows}
    yield from read[plan.kind](session_factory, plan, chunk_rows, nested)


def _metric_rows(
    session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int, nested: bool
) -> Iterator[list[dict[str, Any]]]:
    after = plan.start_step - 1
    while True:
        with session_factory() as session:
            # Core rows through the connection, not ORM objects: no identity map to
            # grow, and no ORM loading step (a third of the time of a read).
            rows = (
                session.connection()
                .execute(
                    select(*_METRIC_COLUMNS)
                    .where(
                        TrainingMetric.job_id == plan.job_id,
                        TrainingMetric.step > after,
                        TrainingMetric.step <= plan.end,
                    )
                    .order_by(TrainingMetric.step)
                    .limit(chunk_rows)
                )
                .all()
            )
        if not rows:
            return
        if nested:
            yield [row_to_record(row, nonfinite_as_strings=True) for row in rows]
        else:
            yield [flatten_record(row_to_record(row)) for row in rows]
        if len(rows) < chunk_rows:
            return
        after = rows[-1].step


def _sample_rows(
    session_factory: SessionFactory, plan: ExportPlan, chunk_rows: int, nested: bool
) -> Iterator[list[dict[str, Any]]]:
    step, index = plan.start_step, -1
    while True:
        with session_factory() as session:
            rows = (
                session.connection()
                .execute(
                    select(*_SAMPLE_COLUMNS)
                    .select_from(_SAMPLES_JOINED)
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
    """A sample as `GET .../samples` shows it (nested), or flattened."""
    reward = row.reward
    if reward is None and row.reward_nonfinite is not None:
        reward = row.reward_nonfinite if nested else NONFINITE_VALUES[row.reward_nonfinite]
    sample: dict[str, Any] = {
        "step": row.step,
        "index": row.sample_index,
        "timestamp": row.timestamp,
        "prompt": row.text,
        "prompt_digest": row.digest,
        "completion": row.completion,
        "reward": reward,
        "rewards": row.rewards,
        "group": row.group_key,
        "response_length": row.response_length,
        "length": row.response_length if row.response_length is not None else row.completion_chars,
        "finish_reason": row.finish_reason,
        "extra": row.extra,
    }
    if nested:
        return sample
    flat = {key: value for key, value in sample.items() if key not in ("rewards", "extra")}
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
