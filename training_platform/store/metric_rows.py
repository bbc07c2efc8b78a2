"""Records (docs/contract.md §2's nested shape) <-> `training_metrics` rows, losslessly.

Numeric group fields become columns; `timing`, `extra`, `other` and the
callback's `anomalies` list become JSON. Non-finite numbers are stored as NULL
plus an entry in `nonfinite`, because SQLite turns NaN into NULL and
PostgreSQL's JSON types reject NaN tokens: the only portable, lossless way.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from training_platform.callbacks.wire.schema import GROUP_FIELDS, NONFINITE_VALUES, nonfinite_name
from training_platform.store.storable import (
    MAX_JSON_VALUE_BYTES,
    storable_anomalies,
    storable_json_group,
)

# (group, field) -> column name, in the order of docs/contract.md §2.
COLUMN_OF: Final[dict[tuple[str, str], str]] = {
    ("loss", "actor_loss"): "actor_loss",
    ("loss", "critic_loss"): "critic_loss",
    ("loss", "total_loss"): "total_loss",
    ("reward", "mean"): "reward_mean",
    ("reward", "std"): "reward_std",
    ("reward", "max"): "reward_max",
    ("reward", "min"): "reward_min",
    ("kl", "mean"): "kl_mean",
    ("kl", "max"): "kl_max",
    ("gradient", "actor_norm"): "actor_grad_norm",
    ("gradient", "critic_norm"): "critic_grad_norm",
    ("performance", "tokens_per_second"): "tokens_per_second",
    ("performance", "step_time"): "step_time",
    ("performance", "gpu_memory_allocated"): "gpu_memory_allocated",
}
assert set(COLUMN_OF) == {(g, f) for g, fields in GROUP_FIELDS.items() for f in fields}

METRIC_COLUMNS: Final = tuple(COLUMN_OF.values())
_GROUP_COLUMNS: Final = tuple(
    (group, tuple((field, COLUMN_OF[(group, field)]) for field in fields))
    for group, fields in GROUP_FIELDS.items()
)
_JSON_GROUPS: Final = ("timing", "extra")

# Every column a row dict carries, in table order (used for bulk upserts).
ROW_KEYS: Final = (
    "job_id",
    "step",
    "timestamp",
    *METRIC_COLUMNS,
    "has_anomaly",
    "anomaly_type",
    "anomaly_message",
    "timing",
    "extra",
    "other",
    "anomalies",
    "nonfinite",
    "received_at",
)


_POSITION: Final = {key: index for index, key in enumerate(ROW_KEYS)}
# group -> {field: (column, position in ROW_KEYS)}
_GROUP_SLOTS: Final = {
    group: {field: (column, _POSITION[column]) for field, column in columns}
    for group, columns in _GROUP_COLUMNS
}
_JSON_SLOTS: Final = tuple((group, _POSITION[group]) for group in _JSON_GROUPS)


def _nonfinite_marks(values: dict[str, Any]) -> dict[str, str] | None:
    if _all_finite(values):  # the usual case, decided in C
        return None
    marks: dict[str, str] | None = None
    for key, value in values.items():
        # `v - v != 0.0` is true exactly for NaN and +-Inf, without a call.
        if type(value) is float and value - value != 0.0:
            if marks is None:
                marks = {}
            marks[key] = nonfinite_name(value)
    return marks


def record_to_params(
    job_id: str,
    record: dict[str, Any],
    received_at: float,
    *,
    json_as_text: bool = True,
    notes: list[str] | None = None,
) -> list[Any]:
    """Column values in `ROW_KEYS` order, ready for a DBAPI `executemany`.

    This is the ingestion hot path: one pass over the record. JSON columns are
    serialised with orjson, which writes NaN as null -- exactly what we store,
    with the truth kept in `nonfinite` -- so no copy of the dict is needed.

    Values neither database could store (too deep, too big, lone surrogates,
    NUL or over-long text: see `store/storable.py`) are replaced in `record`
    itself too, so what is announced is what is stored; `notes` gets a line
    per change.
    """
    params: list[Any] = [None] * len(ROW_KEYS)
    params[0], params[1], params[2] = job_id, record["step"], record.get("timestamp")
    params[_RECEIVED_AT] = received_at
    nonfinite: dict[str, Any] | None = None
    for group, slots in _GROUP_SLOTS.items():
        values = record.get(group)
        if not values:
            continue
        for field, value in values.items():
            slot = slots.get(field)
            if slot is None:
                continue  # normalised records keep unknown fields in `other`
            if type(value) is float and value - value != 0.0:
                if nonfinite is None:
                    nonfinite = {}
                nonfinite[slot[0]] = nonfinite_name(value)
            else:
                params[slot[1]] = value
    dumps = _dumps if json_as_text else _identity
    for group, position in _JSON_SLOTS:
        values = record.get(group)
        if not values:
            continue
        if _all_finite(values):  # numbers only (the usual case): nothing nested or textual
            try:
                text = orjson.dumps(values)
            except TypeError:  # a key orjson cannot write (a lone surrogate)
                text = b""
            if 0 < len(text) <= MAX_JSON_VALUE_BYTES:
                params[position] = text.decode() if json_as_text else values
                continue
        values, text_value = _storable_group(record, group, values, notes)
        marks = _nonfinite_marks(values)
        if marks:
            if nonfinite is None:
                nonfinite = {}
            nonfinite[group] = marks
        # orjson wrote NaN as null already: the text is what is stored either way.
        params[position] = text_value if json_as_text else _nulled(values) if marks else values
    other = record.get("other")
    if other:
        other, text_value = _storable_group(record, "other", other, notes)
        for group, values in other.items():
            marks = _nonfinite_marks(values) if type(values) is dict else None
            if marks:
                if nonfinite is None:
                    nonfinite = {}
                nonfinite.setdefault("other", {})[group] = marks
        params[_OTHER] = (
            text_value
            if json_as_text
            else {g: _nulled(v) if type(v) is dict else v for g, v in other.items()}
        )
    anomalies = record.get("anomalies")
    params[_HAS_ANOMALY] = bool(anomalies)
    if anomalies:
        clean = storable_anomalies(anomalies, notes)
        if clean is not anomalies:
            record["anomalies"] = anomalies = clean
        params[_ANOMALIES] = dumps(anomalies)
        params[_ANOMALY_TYPE] = ",".join(dict.fromkeys(a["type"] for a in anomalies))
        params[_ANOMALY_MESSAGE] = "; ".join(a["message"] for a in anomalies if a["message"])
    if nonfinite:
        params[_NONFINITE] = dumps(nonfinite)
    return params


# What rollups read straight from the rows `record_to_params` builds.
STEP_POSITION: Final = _POSITION["step"]
TIMESTAMP_POSITION: Final = _POSITION["timestamp"]
NONFINITE_POSITION: Final = _POSITION["nonfinite"]
# ("group.field" series key, position in ROW_KEYS) of every numeric column.
COLUMN_SERIES: Final = tuple(
    (f"{group}.{field}", _POSITION[column]) for (group, field), column in COLUMN_OF.items()
)
_RECEIVED_AT: Final = _POSITION["received_at"]
_OTHER: Final = _POSITION["other"]
_HAS_ANOMALY: Final = _POSITION["has_anomaly"]
_ANOMALIES: Final = _POSITION["anomalies"]
_ANOMALY_TYPE: Final = _POSITION["anomaly_type"]
_ANOMALY_MESSAGE: Final = _POSITION["anomaly_message"]
_NONFINITE: Final = _POSITION["nonfinite"]


def _storable_group(
    record: dict[str, Any], group: str, values: dict[str, Any], notes: list[str] | None
) -> tuple[dict[str, Any], str]:
    """`values` (`record[group]`) made storable, and its JSON text.

    Replaced in `record` when it had to change.
    """
    if type(values) is not dict:  # only a caller bypassing wire_records.py could get here
        values = {"value": values}
    clean, text = storable_json_group(values, group, notes)
    if clean is not values or record.get(group) is not values:
        record[group] = clean
    return clean, text


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _identity(value: Any) -> Any:
    return value


def _nulled(values: dict[str, Any]) -> dict[str, Any]:
    return {k: None if type(v) is float and v - v != 0.0 else v for k, v in values.items()}


def record_to_row(job_id: str, record: dict[str, Any], received_at: float) -> dict[str, Any]:
    """A `training_metrics` row as a dict (JSON columns as Python objects)."""
    return dict(
        zip(
            ROW_KEYS, record_to_params(job_id, record, received_at, json_as_text=False), strict=True
        )
    )


_AS_STRING: Final = {name: name for name in NONFINITE_VALUES}


def _restore(
    values: dict[str, Any] | None, marks: dict[str, str] | None, decode: dict[str, Any]
) -> dict[str, Any] | None:
    if not marks:
        return values
    restored = dict(values or {})
    for key, name in marks.items():
        restored[key] = decode.get(name, decode["NaN"])
    return restored


def row_to_record(row: Any, *, nonfinite_as_strings: bool = False) -> dict[str, Any]:
    """The record (docs/contract.md §2's nested shape) of a row.

    Non-finite numbers come back as floats, or with `nonfinite_as_strings` as
    "NaN"/"Infinity"/"-Infinity" (the API's convention: browsers' JSON.parse
    rejects bare NaN). `row` is anything with attribute access (ORM object or Row).
    """
    nonfinite: dict[str, Any] = row.nonfinite or {}
    decode = _AS_STRING if nonfinite_as_strings else NONFINITE_VALUES
    record: dict[str, Any] = {"step": row.step, "timestamp": row.timestamp}
    for group, columns in _GROUP_COLUMNS:
        values: dict[str, Any] = {}
        for field, column in columns:
            value = getattr(row, column)
            if value is not None:
                values[field] = value
            elif column in nonfinite:
                values[field] = decode.get(nonfinite[column], decode["NaN"])
        if values:
            record[group] = values
    for group in _JSON_GROUPS:
        values_json = _restore(getattr(row, group), nonfinite.get(group), decode)
        if values_json:
            record[group] = values_json
    if row.other:
        other_marks = nonfinite.get("other", {})
        record["other"] = {
            group: _restore(values, other_marks.get(group), decode)
            for group, values in row.other.items()
        }
    if row.anomalies:
        record["anomalies"] = row.anomalies
    return record


def record_nonfinite_as_strings(record: dict[str, Any]) -> dict[str, Any]:
    """`record` (real floats, as the persister announces it) in the API's convention.

    The same shape and the same "NaN"/"Infinity"/"-Infinity" names that
    `row_to_record(row, nonfinite_as_strings=True)` gives for the stored row,
    without a trip through SQL. Only groups holding a non-finite number are
    copied; the input is never modified.
    """
    converted: dict[str, Any] | None = None
    for key, values in record.items():
        if type(values) is not dict or _all_finite(values):
            continue
        if key == "other":  # {group: {field: value}}: one level deeper
            other = dict(values)
            for group, fields in values.items():
                marks = _nonfinite_marks(fields) if type(fields) is dict else None
                if marks:
                    other[group] = {**fields, **marks}
                    converted = converted or dict(record)
                    converted["other"] = other
            continue
        marks = _nonfinite_marks(values)
        if marks:
            converted = converted or dict(record)
            converted[key] = {**values, **marks}
    timestamp = record.get("timestamp")
    if type(timestamp) is float and timestamp - timestamp != 0.0:
        converted = converted or dict(record)
        converted["timestamp"] = nonfinite_name(timestamp)
    return record if converted is None else converted


def _all_finite(values: dict[str, Any]) -> bool:
    """True when every value is a finite number: the common case, checked in C.

    A sum is finite iff every term is (barring overflow, which only sends us
    down the exact path); strings, None or nested dicts raise TypeError.
    """
    try:
        total = sum(values.values())
    except TypeError:
        return False
    return bool(total - total == 0.0)
