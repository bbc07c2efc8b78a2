"""One export from start to end: plan it, then its bytes as the chunks are read.

The API's export endpoints, `training-platform export` and the client's
database path all come through here, so a file is the same whoever wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from training_platform.history.export.columns import ColumnChunk
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
    told of each chunk as it is written (a progress bar): its rows and last step."""
    if fmt == "parquet":
        require_pyarrow()
    names = None if fields is None else frozenset(fields)
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
    return Export(plan, encode(fmt, plan.columns, chunks), filename)


T = TypeVar("T", ColumnChunk, list[dict[str, Any]])


def _seen(chunks: Iterator[T], on_chunk: Callable[[T], None]) -> Iterator[T]:
    for chunk in chunks:
        yield chunk
        on_chunk(chunk)
