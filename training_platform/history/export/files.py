"""One export from start to end: plan it, then its bytes as the chunks are read.

The API's export endpoints, `training-platform export` and the client's
database path all come through here, so a file is the same whoever wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from training_platform.errors import InvalidParameterError
from training_platform.history.export.columns import ColumnChunk, Columns
from training_platform.history.export.metrics import SessionFactory
from training_platform.history.export.sources import (
    CHUNK_ROWS,
    ExportPlan,
    Kind,
    nested_fields,
    plan_export,
    read_chunks,
    read_records,
)
from training_platform.history.export.writers import Format, encode, jsonl_bytes, require_pyarrow
from training_platform.history.field_names import FieldNames, resolve_fields

Progress = Callable[[int, int], None]  # (rows in the chunk just written, its last step)


@dataclass(frozen=True)
class Export:
    """A planned export: its plan (rows to expect, columns) and its bytes, lazily."""

    plan: ExportPlan
    body: Iterator[bytes]
    filename: str


def start_export(
    session_factory: SessionFactory,
    *,
    job_id: str,
    kind: Kind,
    fmt: Format,
    start_step: int | None = None,
    end_step: int | None = None,
    fields: Iterable[str] | None = None,
    chunk_rows: int = CHUNK_ROWS,
    on_chunk: Progress | None = None,
) -> Export:
    """Everything that can refuse the export runs here, before any byte: pyarrow
    missing (`MissingExtraError`), a field matching no column (422). `on_chunk` is
    told of each chunk as it is written (a progress bar): its rows and last step.

    Metrics' `fields` may name fixed fields flat (`kl_max`, `kl_divergence_max`:
    `history/field_names.py`); CSV and Parquet then name the column so. JSONL
    keeps the records' nested shape."""
    if fmt == "parquet":
        require_pyarrow()
    resolved = resolve_fields(fields if kind == "metrics" else None)
    names = resolved.read if kind == "metrics" else None if fields is None else frozenset(fields)
    try:
        plan = plan_export(
            session_factory,
            job_id=job_id,
            kind=kind,
            start_step=start_step,
            end_step=end_step,
            fields=names,
            flat=fmt != "jsonl",
            chunk_rows=chunk_rows,
        )
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{exc}{resolved.explain()}") from None
    suffix = "" if kind == "metrics" else f"_{kind}"
    filename = f"{job_id}{suffix}.{fmt}"
    if fmt == "jsonl":
        records = read_records(session_factory, plan, chunk_rows=chunk_rows)
        if names is not None:
            records = ([nested_fields(row, names) for row in chunk] for chunk in records)
        if on_chunk is not None:
            records = _seen(records, lambda rows: on_chunk(len(rows), rows[-1]["step"]))
        return Export(plan, jsonl_bytes(records), filename)
    chunks = read_chunks(session_factory, plan, chunk_rows=chunk_rows)
    if on_chunk is not None:
        chunks = _seen(chunks, lambda chunk: on_chunk(chunk.size, chunk.columns["step"][-1]))
    if resolved.aliases:
        columns = _renamed_columns(plan.columns, resolved)
        chunks = (_renamed_chunk(chunk, resolved) for chunk in chunks)
        return Export(replace(plan, columns=columns), encode(fmt, columns, chunks), filename)
    return Export(plan, encode(fmt, plan.columns, chunks), filename)


def _renamed_columns(columns: Columns, names: FieldNames) -> Columns:
    return {name: kind for column, kind in columns.items() for name in names.names_of(column)}


def _renamed_chunk(chunk: ColumnChunk, names: FieldNames) -> ColumnChunk:
    """`chunk` with its columns under the asked names. A column under a second name
    gets a copy of its values: the CSV writer spells non-finite cells in place."""
    columns: dict[str, list[Any]] = {}
    nonfinite_names: dict[str, tuple[str, ...]] = {}
    for column, values in chunk.columns.items():
        asked = names.names_of(column)
        columns[asked[0]] = values
        for extra in asked[1:]:
            columns[extra] = list(values)
        nonfinite_names[column] = asked
    nonfinite = [
        (name, index)
        for column, index in chunk.nonfinite
        for name in nonfinite_names.get(column, (column,))
    ]
    return ColumnChunk(chunk.size, columns, nonfinite)


T = TypeVar("T", ColumnChunk, list[dict[str, Any]])


def _seen(chunks: Iterator[T], on_chunk: Callable[[T], None]) -> Iterator[T]:
    for chunk in chunks:
        yield chunk
        on_chunk(chunk)
