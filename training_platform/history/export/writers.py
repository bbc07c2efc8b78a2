"""The export formats: chunks of rows in, bytes out as they come, one writer per format.

CSV and Parquet take flat rows (dotted columns, `columns.py`), JSONL the API's
nested shapes. Each writer yields its bytes chunk by chunk, so the caller (a
streaming response, a file) never holds more than a chunk. Non-finite numbers
stay what they are in Parquet (IEEE NaN and infinities) and are written
`NaN`, `inf`, `-inf` in CSV (what pandas and R read back as such); JSONL keeps
the API's strings "NaN", "Infinity", "-Infinity".

Parquet is pyarrow's, an optional install (`training-platform[export]`):
`require_pyarrow` says so in a `MissingExtraError` before anything is written.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson

from training_platform.errors import MissingExtraError
from training_platform.history.export.columns import ColumnChunk, Columns, as_text

if TYPE_CHECKING:
    import pyarrow as pa

Format = Literal["csv", "parquet", "jsonl"]
FORMATS: Final[tuple[Format, ...]] = ("csv", "parquet", "jsonl")
MEDIA_TYPES: Final[dict[Format, str]] = {
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
    "jsonl": "application/x-ndjson",
}
EXPORT_EXTRA: Final = "export"
Rows = Iterable[list[dict[str, Any]]]
Chunks = Iterable[ColumnChunk]


def require_pyarrow() -> Any:
    """pyarrow's parquet module, or a `MissingExtraError` naming the install."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingExtraError(
            "format 'parquet' needs pyarrow, which is not installed here: "
            f"pip install 'training-platform[{EXPORT_EXTRA}]' (or use format=csv or jsonl)"
        ) from exc
    return pq


def encode(fmt: Format, columns: Columns, chunks: Chunks) -> Iterator[bytes]:
    """The bytes of a CSV or Parquet file, a piece per chunk of columns."""
    if fmt == "csv":
        return csv_bytes(columns, chunks)
    return parquet_bytes(columns, chunks)


def jsonl_bytes(chunks: Rows) -> Iterator[bytes]:
    for chunk in chunks:
        yield b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in chunk)


_NONFINITE_CSV: Final = {math.inf: "inf", -math.inf: "-inf"}
_BOOL_CSV: Final = {True: "true", False: "false"}


def _csv_column(values: list[Any] | None, kind: str, size: int) -> list[Any]:
    """A column's cells: csv.writer writes None as nothing, an int as itself and a
    float as its repr (the shortest text that reads back as the same double)."""
    if values is None:
        return [None] * size
    if kind in ("int", "float"):
        return values
    if kind == "bool":
        return [None if value is None else _BOOL_CSV.get(value, value) for value in values]
    return [value if value is None or type(value) is str else as_text(value) for value in values]


def csv_bytes(columns: Columns, chunks: Chunks) -> Iterator[bytes]:
    names = list(columns)
    position = {name: index for index, name in enumerate(names)}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    yield buffer.getvalue().encode()
    for chunk in chunks:
        buffer.seek(0)
        buffer.truncate()
        cells = [_csv_column(chunk.columns.get(name), kind, chunk.size) for name, kind in
                 columns.items()]  # fmt: skip
        for name, index in chunk.nonfinite:
            if name in position:
                value = chunk.columns[name][index]
                cells[position[name]][index] = _NONFINITE_CSV.get(value, "NaN")
        writer.writerows(zip(*cells, strict=True))
        yield buffer.getvalue().encode()


class _Sink:
    """A write-only file for pyarrow that hands its bytes over as they are written.

    `tell` keeps counting across hand-overs: the footer's offsets are positions
    in the whole file."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        piece = bytes(data)
        self.parts.append(piece)
        self.position += len(piece)
        return len(piece)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        taken = b"".join(self.parts)
        self.parts.clear()
        return taken


def arrow_schema(columns: Columns) -> pa.Schema:
    import pyarrow as pa

    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(name, types.get(kind, pa.string())) for name, kind in columns.items()])


def arrow_table(columns: Columns, schema: pa.Schema, chunk: ColumnChunk) -> pa.Table:
    """A chunk as a table of `schema`; a value that no longer fits its column's type
    (a step rewritten since the first pass) is left out rather than failing the file."""
    import pyarrow as pa

    arrays = []
    for (name, kind), field in zip(columns.items(), schema, strict=True):
        values = chunk.columns.get(name)
        if values is None:
            arrays.append(pa.nulls(chunk.size, field.type))
            continue
        if kind in ("str", "json"):
            values = [None if value is None else as_text(value) for value in values]
        try:
            arrays.append(pa.array(values, type=field.type, from_pandas=False))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            arrays.append(pa.array([_fit(value, kind) for value in values], type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _fit(value: Any, kind: str) -> Any:
    if kind == "float":
        return float(value) if type(value) in (int, float) else None
    if kind == "int":
        return value if type(value) is int else None
    if kind == "bool":
        return value if type(value) is bool else None
    return value


def parquet_bytes(columns: Columns, chunks: Chunks) -> Iterator[bytes]:
    """One row group per chunk, each handed over as soon as it is written."""
    pq = require_pyarrow()
    schema = arrow_schema(columns)
    sink = _Sink()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for chunk in chunks:
            table = arrow_table(columns, schema, chunk)
            writer.write_table(table, row_group_size=chunk.size or 1)
            if piece := sink.take():
                yield piece
    finally:
        writer.close()
    yield sink.take()
