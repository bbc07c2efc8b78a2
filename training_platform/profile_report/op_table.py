"""`op_stats.csv`, read and checked: one row per operator (docs/profiling.md)."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from training_platform.profile_report.source import iter_text_lines

REQUIRED_COLUMNS = ("op_name", "self_time_ms", "total_time_ms", "calls")
MAX_ROWS = 5_000  # torch's key averages have a few hundred; more is read no further


class OpTableError(Exception):
    """The table cannot be used: no header, or a required column missing."""


@dataclass
class OpTable:
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    bad_rows: list[str] = field(default_factory=list)  # "line 7: self_time_ms is 'x'"
    truncated: bool = False

    def top(self, limit: int = 15, by: str = "self_time_ms") -> list[dict[str, Any]]:
        key = by if by in self.columns else "self_time_ms"
        return sorted(self.rows, key=lambda row: row.get(key) or 0.0, reverse=True)[:limit]


def read_op_table(chunks: Iterable[bytes]) -> OpTable:
    """Parse the CSV; rows with an unreadable number are listed in `bad_rows`, not used."""
    reader = csv.reader(iter_text_lines(chunks))
    try:
        header = next(reader)
    except StopIteration:
        raise OpTableError("empty file (no header)") from None
    except csv.Error as exc:
        raise OpTableError(f"not CSV: {exc}") from None
    columns = [name.strip() for name in header]
    if columns and columns[0].startswith("\ufeff"):
        columns[0] = columns[0][1:]
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise OpTableError(f"missing column(s) {', '.join(missing)} (has: {', '.join(columns)})")
    table = OpTable(columns)
    try:
        for line, values in enumerate(reader, start=2):
            if not values:
                continue
            if len(table.rows) >= MAX_ROWS:
                table.truncated = True
                break
            row, problem = _row(columns, values)
            if problem:
                if len(table.bad_rows) < 20:
                    table.bad_rows.append(f"line {line}: {problem}")
                continue
            table.rows.append(row)
    except (csv.Error, ValueError) as exc:
        table.bad_rows.append(f"unreadable after row {len(table.rows)}: {exc}")
    return table


def _row(columns: list[str], values: list[str]) -> tuple[dict[str, Any], str | None]:
    if len(values) != len(columns):
        return {}, f"{len(values)} fields, the header has {len(columns)}"
    row: dict[str, Any] = {}
    for name, text in zip(columns, values, strict=True):
        if name == "op_name":
            row[name] = text
            continue
        try:
            number = float(text)
        except ValueError:
            return {}, f"{name} is {text[:40]!r}, not a number"
        if not math.isfinite(number):
            return {}, f"{name} is {text!r}"
        row[name] = int(number) if name == "calls" else number
    if row["calls"] < 0 or row["self_time_ms"] < 0 or row["total_time_ms"] < 0:
        return {}, "a negative time or count"
    return row, None
