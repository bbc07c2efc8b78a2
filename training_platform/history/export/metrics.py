"""A job's metric records as columns (CSV and Parquet): the column pass, then the chunks.

Both read plain rows in keyset chunks (``WHERE step > last ORDER BY step LIMIT
n``, one short session each), the JSON columns as their stored text decoded
by orjson here, without SQLAlchemy's processing per value. Nothing is built
per row: a chunk is its columns, each one list comprehension over the rows
(a fixed series is its SQL column; a JSON group's field is one ``get`` per
row of the decoded group), and non-finite numbers (stored NULL with a mark
in `nonfinite`) are written into their cells from the few rows that have
marks.

The column pass finds the columns of the JSON groups a run logged and their
kinds: it reads only those columns, and a group's fields are looked at once
per distinct shape (names and value types), not once per row: a run logs
the same shape step after step. The fixed series are one COUNT per column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import orjson
from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import NONFINITE_VALUES
from training_platform.history.export.columns import ColumnChunk, Columns, ColumnSet
from training_platform.store.metric_rows import COLUMN_OF
from training_platform.store.models import TrainingMetric

SessionFactory = Callable[[], Session]
Path = tuple[str, ...]  # where a column's values sit in a record: ("extra", "lr"), ("other", g, f)
_FIXED: Final = tuple((f"{group}.{field}", column) for (group, field), column in COLUMN_OF.items())
_SERIES_OF_COLUMN: Final = {column: series for series, column in _FIXED}
_JSON: Final = ("timing", "extra", "other", "anomalies", "nonfinite")
_EMPTY: Final[dict[str, Any]] = {}


def _raw(name: str) -> Any:
    """A JSON column as its text: decoded here by orjson, not per value by the driver
    (psycopg's JSON loader costs 5 µs a value, the nulls included)."""
    return cast(getattr(TrainingMetric, name), Text).label(name)


_READ: Final = (
    TrainingMetric.step,
    TrainingMetric.timestamp,
    *(getattr(TrainingMetric, column) for _, column in _FIXED),
    *(_raw(group) for group in _JSON),
)
# Positions in a row of `_READ`.
_POSITION: Final = {"step": 0, "timestamp": 1, **{s: i + 2 for i, (s, _) in enumerate(_FIXED)}}
_AT: Final = {group: len(_POSITION) + index for index, group in enumerate(_JSON)}
_PASS: Final = (TrainingMetric.step, *(_raw(group) for group in _JSON))


def _decoded(value: Any) -> Any:
    return orjson.loads(value) if type(value) is str else value


def _keyset(
    session_factory: SessionFactory,
    job_id: str,
    after: int,
    end: int,
    chunk_rows: int,
    columns: Sequence[Any],
) -> list[Any]:
    with session_factory() as session:
        # Core rows through the connection, not ORM objects: no identity map to grow,
        # and no ORM loading step (a third of the time of a read).
        return list(
            session.connection()
            .execute(
                select(*columns)
                .where(
                    TrainingMetric.job_id == job_id,
                    TrainingMetric.step > after,
                    TrainingMetric.step <= end,
                )
                .order_by(TrainingMetric.step)
                .limit(chunk_rows)
            )
            .all()
        )


def metric_chunks(
    session_factory: SessionFactory,
    job_id: str,
    start: int,
    end: int,
    chunk_rows: int,
    columns: Sequence[Any],
) -> Iterator[list[Any]]:
    """Rows of `columns` (the step first) of steps `start`..`end`, `chunk_rows` at a
    time, in step order: a keyset query each, in a session of its own."""
    after = start - 1
    while rows := _keyset(session_factory, job_id, after, end, chunk_rows, columns):
        yield rows
        if len(rows) < chunk_rows:
            return
        after = rows[-1][0]


class _Found:
    """The column pass's findings: kinds (`ColumnSet`) and where each column's values sit."""

    def __init__(self, leading: Columns) -> None:
        self.columns = ColumnSet(leading.items())
        self.paths: dict[str, Path] = {}
        self._shapes: set[tuple[Any, ...]] = set()

    def group(self, path: Path, values: Any) -> None:
        """A JSON group (`path`: ("extra",), ("other", g)): a column per field, or one."""
        if values is None:
            return
        name = ".".join(path[1:]) if path[0] == "other" and len(path) > 1 else path[0]
        if type(values) is not dict:
            self.add(name, path, values)
            return
        shape = (path, tuple(values), tuple(map(type, values.values())))
        if shape in self._shapes:
            return
        self._shapes.add(shape)
        for field, value in values.items():
            self.add(f"{name}.{field}", (*path, field), value)

    def add(self, name: str, path: Path, value: Any) -> None:
        self.paths.setdefault(name, path)
        self.columns.add({name: value})


def metric_columns(
    session_factory: SessionFactory,
    job_id: str,
    start: int,
    end: int,
    leading: Columns,
    chunk_rows: int,
) -> tuple[ColumnSet, dict[str, Path]]:
    """The columns of the records of steps `start`..`end`, and their values' paths."""
    in_range = (
        TrainingMetric.job_id == job_id,
        TrainingMetric.step >= start,
        TrainingMetric.step <= end,
    )
    with session_factory() as session:
        query = select(*(func.count(getattr(TrainingMetric, c)) for _, c in _FIXED))
        counts = session.connection().execute(query.where(*in_range)).one()
    found = _Found(leading)
    fixed = {series for (series, _), count in zip(_FIXED, counts, strict=True) if count}
    previous: tuple[Any, ...] = (None,) * len(_JSON)
    for rows in metric_chunks(session_factory, job_id, start, end, chunk_rows, _PASS):
        for row in rows:
            texts = row[1:]
            if texts != previous:  # a row like the one before (`null`s, the same text) adds nothing
                _look(found, fixed, *(_decoded(text) for text in texts))
                previous = texts
    for series in fixed:
        found.columns.add({series: 0.0})
    return found.columns, found.paths


def _look(
    found: _Found, fixed: set[str], timing: Any, extra: Any, other: Any, anomalies: Any, marks: Any
) -> None:
    """What one row's JSON columns add to the columns."""
    found.group(("timing",), timing)
    found.group(("extra",), extra)
    if type(other) is dict:
        for name, values in other.items():
            found.group(("other", str(name)), values)
    else:
        found.group(("other",), other)
    if anomalies:
        found.add("anomalies", ("anomalies",), [])
    if marks:
        fixed.update(_SERIES_OF_COLUMN[key] for key in marks if key in _SERIES_OF_COLUMN)
        for path, field, _ in _marked(marks):
            name = ".".join(path[1:] if path[0] == "other" else path)
            found.add(f"{name}.{field}", (*path, field), math.nan)


def _marked(marks: Mapping[str, Any]) -> Iterator[tuple[Path, str, Any]]:
    """(group path, field, mark) of each non-finite mark of a JSON group."""
    for group in ("timing", "extra"):
        for field, mark in (marks.get(group) or {}).items():
            yield (group,), field, mark
    for name, fields in (marks.get("other") or {}).items():
        for field, mark in (fields or {}).items():
            yield ("other", name), field, mark


def read_metric_columns(
    session_factory: SessionFactory,
    job_id: str,
    start: int,
    end: int,
    columns: Columns,
    paths: Mapping[str, Path],
    chunk_rows: int,
) -> Iterator[ColumnChunk]:
    """The records of steps `start`..`end` as `ColumnChunk`s of `columns`, in step order."""
    layout = _Layout(columns, paths)
    for rows in metric_chunks(session_factory, job_id, start, end, chunk_rows, _READ):
        yield layout.chunk(rows)


class _Layout:
    """Where each wanted column comes from in a row of `_READ`."""

    def __init__(self, columns: Columns, paths: Mapping[str, Path]) -> None:
        self.plain = [(name, _POSITION[name]) for name in columns if name in _POSITION]
        self.groups: dict[str, list[tuple[str, Path]]] = {}
        for name in columns:
            if name not in _POSITION and name in paths:
                self.groups.setdefault(paths[name][0], []).append((name, paths[name][1:]))
        # Non-finite marks: a fixed column's or a JSON field's path -> the export's column.
        self.marks: dict[Any, str] = {
            column: series for series, column in _FIXED if series in columns
        }
        self.marks.update({paths[name]: name for name in columns if name in paths})

    def chunk(self, rows: list[Any]) -> ColumnChunk:
        values = {name: [row[position] for row in rows] for name, position in self.plain}
        for group, wanted in self.groups.items():
            at = _AT[group]
            decoded = [_decoded(row[at]) for row in rows]
            if group == "anomalies":
                values["anomalies"] = decoded
                continue
            for name, inner in wanted:
                values[name] = _values_at(decoded, inner)
        nonfinite: list[tuple[str, int]] = []
        at = _AT["nonfinite"]
        for index, row in enumerate(rows):
            if row[at] is not None and (marks := _decoded(row[at])):
                self._mark(marks, values, index, nonfinite)
        return ColumnChunk(len(rows), values, nonfinite)

    def _mark(
        self,
        marks: Mapping[str, Any],
        values: dict[str, list[Any]],
        index: int,
        nonfinite: list[tuple[str, int]],
    ) -> None:
        cells: list[tuple[Any, Any]] = [
            (k, m) for k, m in marks.items() if type(m) is str
        ]  # fixed columns
        cells += [((*path, field), mark) for path, field, mark in _marked(marks)]
        for key, mark in cells:
            name = self.marks.get(key)
            if name is not None:
                values[name][index] = NONFINITE_VALUES.get(mark, math.nan)
                nonfinite.append((name, index))


def _values_at(decoded: list[Any], inner: Path) -> list[Any]:
    """The values at `inner` (a field, a group's field, or () for the whole value)."""
    if not inner:
        return [None if type(value) is dict else value for value in decoded]
    if len(inner) == 1:
        field = inner[0]
        return [value.get(field) if type(value) is dict else None for value in decoded]
    group, field = inner
    groups = [(value.get(group) if type(value) is dict else None) for value in decoded]
    return [value.get(field) if type(value) is dict else None for value in groups]
