"""One export from start to end: plan it, then its bytes as the chunks are read.

The API's export endpoints, `training-platform export` and the client's
database path all come through here, so a file is the same whoever wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from training_platform.history.export.sources import (
    CHUNK_ROWS,
    ExportPlan,
    Kind,
    SessionFactory,
    nested_fields,
    plan_export,
    read_chunks,
)
from training_platform.history.export.writers import Format, encode, require_pyarrow


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
    on_chunk: Callable[[list[dict[str, Any]]], None] | None = None,
) -> Export:
    """Everything that can refuse the export runs here, before any byte: pyarrow
    missing (`MissingExtraError`), a field matching no column (422). `on_chunk` sees
    each chunk of rows as it is written (a progress bar)."""
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
    chunks = read_chunks(session_factory, plan, chunk_rows=chunk_rows, nested=fmt == "jsonl")
    if on_chunk is not None:
        chunks = _seen(chunks, on_chunk)
    if fmt == "jsonl" and names is not None:
        chunks = ([nested_fields(row, names) for row in chunk] for chunk in chunks)
    suffix = "" if kind == "metrics" else f"_{kind}"
    return Export(plan, encode(fmt, plan.columns, chunks), f"{job_id}{suffix}.{fmt}")


def _seen(
    chunks: Iterator[list[dict[str, Any]]], on_chunk: Callable[[list[dict[str, Any]]], None]
) -> Iterator[list[dict[str, Any]]]:
    for chunk in chunks:
        yield chunk
        on_chunk(chunk)
