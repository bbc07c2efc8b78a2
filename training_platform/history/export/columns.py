"""The flat formats' columns: their names, each one's type from the values seen, and
chunks of rows held column by column (`ColumnChunk`).

A record's groups become ``group.field`` columns (``loss.actor_loss``,
``timing.rollout``, ``extra.actor/entropy``); the groups a trainer invented
(kept under ``other``) flatten the same way, as the series of a history do
(`history/series/buckets.py`). A value that is itself a list or an object
(the callback's ``anomalies``, a nested ``extra`` value) is one column of
JSON text (`metrics.py` finds a record's columns and reads them). Non-finite
numbers stay floats here; each writer spells them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from training_platform.callbacks.wire.schema import GROUP_FIELDS
from training_platform.errors import InvalidParameterError

Kind = Literal["int", "float", "bool", "str", "json"]
Columns = dict[str, Kind]

# The columns every export of records starts with, then the fixed groups in the
# contract's order (those the job logged), then the rest in the order first seen.
LEADING: Final = ("step", "timestamp")
_FIXED_ORDER: Final = tuple(
    f"{group}.{field}" for group, fields in GROUP_FIELDS.items() for field in fields
)
_KIND_OF_TYPE: Final[dict[type, Kind]] = {bool: "bool", int: "int", float: "float", str: "str"}


@dataclass
class ColumnChunk:
    """Consecutive rows of an export, column by column (CSV and Parquet are written from
    this: no dict per row). `columns` holds the values of the export's columns (one
    missing: no value in these rows); `nonfinite` the cells holding a NaN or an
    infinity (a real float), which CSV spells."""

    size: int
    columns: dict[str, list[Any]]
    nonfinite: list[tuple[str, int]] = field(default_factory=list)


def chunk_of_rows(rows: Sequence[Mapping[str, Any]], columns: Columns) -> ColumnChunk:
    """Flat rows (``{"group.field": value}``) as a `ColumnChunk` of `columns`."""
    values = {name: [row.get(name) for row in rows] for name in columns}
    nonfinite = [
        (name, index)
        for name, column in values.items()
        for index, value in enumerate(column)
        if type(value) is float and value - value != 0.0
    ]
    return ColumnChunk(len(rows), values, nonfinite)


def kind_of(value: Any) -> Kind | None:
    """A value's column kind; None for a missing value (it fits any)."""
    if value is None:
        return None
    return _KIND_OF_TYPE.get(type(value), "json")


def merge_kinds(seen: Kind | None, new: Kind) -> Kind:
    """The kind of a column holding both: ints widen to floats, anything else mixed is text."""
    if seen is None or seen == new:
        return new
    if {seen, new} == {"int", "float"}:
        return "float"
    return "json"  # mixed: each value as its JSON text (a string stays itself)


class ColumnSet:
    """The columns of an export, grown from the rows of a first pass over them."""

    def __init__(self, leading: Iterable[tuple[str, Kind]] = ()) -> None:
        self.kinds: dict[str, Kind | None] = dict(leading)

    def add(self, flat: Mapping[str, Any]) -> None:
        kinds = self.kinds
        for name, value in flat.items():
            new = kind_of(value)
            if name not in kinds:
                kinds[name] = new
            elif new is not None and kinds[name] != new:
                kinds[name] = merge_kinds(kinds[name], new)

    def columns(self, *, fixed_first: bool = False) -> Columns:
        """Name -> kind in column order; a column never holding a value is a float."""
        names = list(self.kinds)
        if fixed_first:
            rank = {name: position for position, name in enumerate(_FIXED_ORDER)}
            lead = [name for name in names if name in LEADING]
            fixed = sorted((name for name in names if name in rank), key=rank.__getitem__)
            rest = [name for name in names if name not in rank and name not in LEADING]
            names = [*lead, *fixed, *rest]
        return {name: self.kinds[name] or "float" for name in names}


def select_columns(columns: Columns, fields: Iterable[str] | None, *, what: str) -> Columns:
    """The columns `fields` names (a column, or a group: every ``group.*`` column);
    the leading ones always. 422 naming each entry that matches no column of `what`."""
    if fields is None:
        return columns
    names = set(fields)
    unknown = sorted(
        name
        for name in names
        if not any(column == name or column.startswith(name + ".") for column in columns)
    )
    if unknown:
        known = ", ".join(list(columns)[:40]) + (", ..." if len(columns) > 40 else "")
        raise InvalidParameterError(
            f"fields: no column of {what} matches {', '.join(repr(name) for name in unknown)} "
            f"(its columns: {known})"
        )
    return {
        column: kind
        for column, kind in columns.items()
        if column in LEADING
        or column in names
        or any(column.startswith(name + ".") for name in names)
    }


def as_text(value: Any) -> str:
    """A value of a text column: a string itself, anything else its JSON."""
    if type(value) is str:
        return value
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
