"""What the client answers: pandas DataFrames when pandas is installed, lists of dicts
otherwise; records in the flat, dotted columns of the CSV and Parquet exports."""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

_NONFINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_LEADING: Final = ("step", "timestamp")


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def flatten_records(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records as `GET .../metrics` answers them -> rows keyed like the export's columns
    (`loss.actor_loss`, `extra.actor/entropy`); "NaN"/"Infinity" back to floats."""
    rows = []
    for record in records:
        row: dict[str, Any] = {"step": record["step"], "timestamp": record.get("timestamp")}
        for group, values in record.items():
            if group in _LEADING:
                continue
            if group == "other" and isinstance(values, Mapping):
                for name, fields in values.items():
                    _put(row, str(name), fields)
            elif group == "anomalies":
                row["anomalies"] = values
            else:
                _put(row, group, values)
        rows.append(row)
    return rows


def _put(row: dict[str, Any], group: str, fields: Any) -> None:
    if not isinstance(fields, Mapping):
        row[group] = fields
        return
    for name, value in fields.items():
        row[f"{group}.{name}"] = _NONFINITE.get(value, value) if type(value) is str else value


def restore_nonfinite(rows: list[dict[str, Any]], names: Iterable[str]) -> list[dict[str, Any]]:
    """Rows whose `names` columns may hold "NaN"/"Infinity" strings, as floats."""
    keys = tuple(names)
    for row in rows:
        for key in keys:
            value = row.get(key)
            if type(value) is str:
                row[key] = _NONFINITE.get(value, value)
    return rows


def answer(rows: list[dict[str, Any]], columns: Iterable[str] | None = None) -> Any:
    """A DataFrame of `rows` when pandas is installed (columns in the order first
    seen, or `columns`), else the rows themselves."""
    if not installed("pandas"):
        return rows
    import pandas as pd

    order = list(columns) if columns is not None else list(dict.fromkeys(_keys(rows)))
    return pd.DataFrame.from_records(rows, columns=order)


def _keys(rows: list[dict[str, Any]]) -> Iterable[str]:
    for row in rows:
        yield from row


def parquet_answer(data: bytes) -> Any:
    """A Parquet export read back: a DataFrame (pandas), else rows (pyarrow alone)."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    if installed("pandas"):
        return table.to_pandas()
    return table.to_pylist()


def series_rows(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A downsampled history (`max_points`) as one row per point: `step`, `timestamp`,
    and per series its value (exact) or bucket mean, with `name:min`, `name:max`
    (`last_step` too) when the points are buckets."""
    steps = body.get("steps") or []
    rows: list[dict[str, Any]] = [
        {"step": step, "timestamp": timestamp}
        for step, timestamp in zip(steps, body.get("timestamps") or [], strict=False)
    ]
    if body.get("downsampled"):
        for row, last in zip(rows, body.get("last_steps") or [], strict=False):
            row["last_step"] = last
    for name, series in (body.get("series") or {}).items():
        if series.get("values") is not None:
            for row, value in zip(rows, series["values"], strict=False):
                row[name] = _NONFINITE.get(value, value) if type(value) is str else value
            continue
        for suffix, key in (("", "mean"), (":min", "min"), (":max", "max")):
            for row, value in zip(rows, series.get(key) or [], strict=False):
                row[f"{name}{suffix}"] = value
    return rows
