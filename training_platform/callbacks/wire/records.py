"""Records built from what trainers emit, and parsed lines normalised into records.

`build_record` takes verl's and TRL's flat keys, Hugging Face logs or the
groups of docs/contract.md §2 (the trainer side); `normalize_record` takes one
decoded JSONL line (the platform side). Both apply the rules of `wire`, through
the same `_Builder`, so a record means the same on both sides.

This module is stdlib + orjson only: it runs inside training processes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from training_platform.callbacks.wire.schema import (
    FREE_GROUPS,
    GROUP_FIELDS,
    INT64_MAX,
    INT64_MIN,
    KEY_MAP,
    MAX_STEP,
    NONFINITE_VALUES,
    SEVERITIES,
    TIMING_PREFIXES,
    bounded_int,
    to_scalar,
)
from training_platform.errors import RecordError


def _number(value: Any) -> float | int | None:
    """A finite or non-finite number, or None when `value` is not numeric."""
    if type(value) is float:
        return value
    if type(value) is int:
        return bounded_int(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return NONFINITE_VALUES.get(value)
    value = to_scalar(value)
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return bounded_int(value)
    return None


def _step(value: Any) -> int:
    value = to_scalar(value)
    if isinstance(value, bool):
        raise RecordError(f"step must be an integer >= 0, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or not 0 <= value <= MAX_STEP:
        raise RecordError(f"step must be an integer from 0 to 2**63 - 1, got {value!r}")
    return value


def _timestamp(value: Any) -> float | None:
    return None if value is None else _seconds(value)


def _seconds(value: Any) -> float:
    number = _number(value)
    if number is None or not math.isfinite(number):
        raise RecordError(f"timestamp must be Unix seconds, got {value!r}")
    return float(number)


class _Builder:
    """Accumulates one record; `put_flat` applies the key table with priorities.

    This runs once per training step inside the trainer, so the common case (a
    Python float under a known or unknown key) takes the fewest operations.
    """

    __slots__ = ("extra", "groups", "nonfinite", "other", "ranks")

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}
        self.extra: dict[str, Any] = {}
        self.other: dict[str, dict[str, Any]] = {}
        self.ranks: dict[tuple[str, str], tuple[int, str]] = {}
        self.nonfinite = False

    def put_flat(self, key: str, raw: Any) -> None:
        kind = type(raw)
        if kind is float:
            if raw - raw != 0.0:  # NaN or +-Inf, without a function call
                self.nonfinite = True
            number: Any = raw
        elif kind is int:
            number = bounded_int(raw)
        else:
            number = _number(raw)
            if number is None:
                self.extra[key] = _extra_value(to_scalar(raw))
                return
            if type(number) is float and not math.isfinite(number):
                self.nonfinite = True
        target = KEY_MAP.get(key)
        if target is not None:
            group, field, rank = target
            held = self.ranks.get((group, field))
            if held is None or rank < held[0]:
                fields = self.groups.get(group)
                if fields is None:
                    fields = self.groups[group] = {}
                if held is not None:  # demote the weaker source to extra
                    self.extra[held[1]] = fields[field]
                fields[field] = number
                self.ranks[(group, field)] = (rank, key)
            else:
                self.extra[key] = number
        elif key.startswith(TIMING_PREFIXES):
            stage = key[key.index("/") + 1 :]
            held = self.ranks.get(("timing", stage))
            if held is not None and held[0] < 0:  # an explicit timing group came first
                self.extra[key] = number
            else:
                self.groups.setdefault("timing", {})[stage] = number
                self.ranks[("timing", stage)] = (0, key)
        else:
            self.extra[key] = number

    def finish(self, record: dict[str, Any]) -> dict[str, Any]:
        record.update(self.groups)
        if self.extra:
            record.setdefault("extra", {}).update(self.extra)
        if self.other:
            record["other"] = self.other
        return record

    def put_group(self, group: str, values: Mapping[str, Any]) -> None:
        known = GROUP_FIELDS.get(group)
        if known is None and group not in FREE_GROUPS:
            self.other[group] = {str(k): _extra_value(to_scalar(v)) for k, v in values.items()}
            return
        fields = self.extra if group == "extra" else self.groups.setdefault(group, {})
        for field, raw in values.items():
            field = str(field)
            value = to_scalar(raw)
            number = _number(value)
            if type(number) is float and not math.isfinite(number):
                self.nonfinite = True
            if group == "extra":
                fields[field] = _extra_value(value)
            elif number is not None and (known is None or field in known):
                held = self.ranks.get((group, field))
                if held is not None and held[0] >= 0:  # a flat key came first: keep it in extra
                    self.extra[held[1]] = fields[field]
                fields[field] = number
                self.ranks[(group, field)] = (-1, field)  # explicit groups beat flat keys
            else:  # unknown field of a known group, or a non-number: keep it aside
                self.other.setdefault(group, {})[field] = _extra_value(value)


def _extra_value(value: Any) -> Any:
    """Extras are scalars; anything else is kept as its JSON-able form or repr."""
    if type(value) is int:
        return bounded_int(value)
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    number = _number(value)
    if number is not None:
        return number
    if isinstance(value, (list, tuple, dict)):
        return value
    return repr(value)


def _anomalies(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    found: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, Mapping) or not item.get("type"):
            continue
        severity = str(item.get("severity") or "warning")
        anomaly = {
            "type": str(item["type"]),
            "severity": severity if severity in SEVERITIES else "warning",
            "message": str(item.get("message") or ""),
        }
        found.append(anomaly)
    return found


def build_record(
    step: Any,
    metrics: Mapping[str, Any] | None = None,
    *,
    timestamp: float | None = None,
    anomalies: Iterable[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Build a record from a metrics mapping, flat or grouped.

    `metrics` may mix the groups of docs/contract.md §2 (``{"loss": {"actor_loss": 1.0}}``) and
    flat trainer keys (``{"actor/pg_loss": 1.0, "timing_s/gen": 3.2}``); known
    keys land in their group, everything else in ``extra``. `timestamp`
    defaults to now.
    """
    return build_step_record(step, metrics, timestamp, anomalies)


def build_step_record(
    step: Any,
    metrics: Mapping[str, Any] | None,
    timestamp: float | None,
    anomalies: Iterable[Mapping[str, Any]] | None,
    ints: bool | None = None,
) -> dict[str, Any]:
    """`build_record`, positionally; `ints` as `flat_record`'s (the callback's
    writer passes what its training thread found: `OpenStep.ints`)."""
    step = step if type(step) is int and 0 <= step <= MAX_STEP else _step(step)
    when = (
        time.time()
        if timestamp is None
        else timestamp
        if type(timestamp) is float and timestamp - timestamp == 0.0
        else _seconds(timestamp)
    )
    record = flat_record(step, when, metrics, ints) if metrics else None
    if record is None:
        record = {"step": step, "timestamp": when}
        builder = _Builder()
        for key, value in (metrics or {}).items():
            if isinstance(value, Mapping):
                builder.put_group(str(key), value)
            else:
                builder.put_flat(str(key), value)
        builder.finish(record)
    if anomalies:
        record["anomalies"] = _anomalies(list(anomalies))
    return record


_FLAT_NUMBERS: Final = frozenset((float, int))
FlatBuild = Callable[[int, float, Mapping[Any, Any]], dict[str, Any]]
# Per key tuple (trainers log the same keys every step), a function that builds
# the record of a flat all-number metrics dict: the key table is consulted once
# per layout, not once per key and step.
_FLAT_BUILDERS: dict[tuple[Any, ...], FlatBuild] = {}
_MAX_FLAT_BUILDERS: Final = 256
# The last layout's keys and builder, one tuple (swapped whole: writer threads
# of several callbacks may share it): a list compare is about half the cost of
# hashing a fresh tuple of 20 keys for the dict lookup (docs/benchmarks.md, Callback).
_last_layout: tuple[list[Any], FlatBuild | None] = ([], None)


def _flat_builder(keys: tuple[Any, ...]) -> FlatBuild:
    """Compile ``lambda s, t, m: {"step": s, "timestamp": t, "loss": {"actor_loss":
    m["actor/pg_loss"], ...}, ...}`` for this key tuple. The layout comes from
    running the general builder once on stand-in values (so the key table and
    its priorities decide, as always); keys and fields enter the source only as
    `repr()` literals."""
    builder = _Builder()
    for index, key in enumerate(keys):
        builder.put_flat(str(key), float(index))
    layout = dict(builder.groups)
    if builder.extra:
        layout["extra"] = builder.extra
    groups = "".join(
        f", {group!r}: {{"
        + ", ".join(f"{field!r}: m[{keys[int(index)]!r}]" for field, index in fields.items())
        + "}"
        for group, fields in layout.items()
    )
    build: FlatBuild = eval(f"lambda s, t, m: {{'step': s, 'timestamp': t{groups}}}")
    if len(_FLAT_BUILDERS) >= _MAX_FLAT_BUILDERS:  # keys that change every step: stay bounded
        _FLAT_BUILDERS.clear()
    _FLAT_BUILDERS[keys] = build
    return build


def flat_record(
    step: int, timestamp: float, metrics: Mapping[Any, Any], ints: bool | None = None
) -> dict[str, Any] | None:
    """The common case, a flat dict of Python floats and ints under string keys,
    as a record of a valid `step` and `timestamp` (without anomalies): what the
    general builder produces, without its per-key work (see docs/benchmarks.md,
    Callback). None (nothing done) for anything else.

    `ints`: the caller has checked that every value is a float or an int (the
    callback's training thread does), and whether some are ints (True: their
    range is still checked here); None: check the types here.
    """
    global _last_layout
    if ints is None:
        kinds = set(map(type, metrics.values()))
        if not kinds <= _FLAT_NUMBERS:
            return None
        ints = int in kinds
    if ints and not all(INT64_MIN <= value <= INT64_MAX for value in metrics.values()):
        metrics = {k: bounded_int(v) if type(v) is int else v for k, v in metrics.items()}
    keys = list(metrics)
    last_keys, build = _last_layout
    if keys != last_keys or build is None:
        key_tuple = tuple(keys)
        build = _FLAT_BUILDERS.get(key_tuple)
        if build is None:
            if not all(type(key) is str for key in keys):
                return None
            build = _flat_builder(key_tuple)
        _last_layout = keys, build
    return build(step, timestamp, metrics)


_GROUP_FIELD_SETS: Final = {group: frozenset(fields) for group, fields in GROUP_FIELDS.items()}
_PASSTHROUGH_KEYS: Final = frozenset({"step", "timestamp", "anomalies", "extra"})


def _is_canonical(obj: dict[str, Any]) -> bool:
    """True when `obj` is already a record in the shape of docs/contract.md, needing no rewrite.

    That is what our own callback writes, so ingestion checks it first: a
    tight loop of type checks instead of rebuilding every group (far cheaper;
    for dicts this small it also beats `issuperset(map(type, ...))`: see
    docs/benchmarks.md, Ingestion).
    Anything unusual (a bool, a string "NaN", an integer beyond 64 bits, an
    unknown field or group, a flat key) returns False and takes the general
    path.
    """
    step = obj.get("step")
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        return False
    timestamp = obj.get("timestamp")
    if timestamp is not None and (type(timestamp) is not float or timestamp - timestamp != 0.0):
        return False
    for key, value in obj.items():
        known = _GROUP_FIELD_SETS.get(key)
        if known is not None or key == "timing":
            if type(value) is not dict:
                return False
            for field, number in value.items():
                kind = type(number)
                if kind is not float and (kind is not int or not INT64_MIN <= number <= INT64_MAX):
                    return False
                if known is not None and field not in known:
                    return False
        elif key == "extra":
            if type(value) is not dict:
                return False
        elif key not in _PASSTHROUGH_KEYS:
            return False
    return True


def normalize_record(obj: Any) -> dict[str, Any]:
    """Turn one decoded JSON line into a record, or raise `RecordError`.

    Accepts the shape of docs/contract.md and verl's file-logger shape
    ``{"step": N, "data": {flat keys}}``; top-level flat keys are mapped too.
    A missing timestamp stays ``None`` (verl's file logger writes none).
    """
    if not isinstance(obj, dict):
        raise RecordError(f"a metrics line must be a JSON object, got {type(obj).__name__}")
    if _is_canonical(obj):
        if "anomalies" in obj:
            anomalies = _anomalies(obj["anomalies"])
            if anomalies:
                obj["anomalies"] = anomalies
            else:
                del obj["anomalies"]
        return obj
    if "step" not in obj:
        raise RecordError("a metrics line needs a 'step'")
    step = _step(obj["step"])
    timestamp = _timestamp(obj.get("timestamp"))
    builder = _Builder()
    for key, value in obj.items():
        if key in ("step", "timestamp", "anomalies"):
            continue
        if key == "other" and isinstance(value, dict):
            for group, fields in value.items():
                if isinstance(fields, dict):
                    builder.other.setdefault(str(group), {}).update(fields)
        elif key == "data" and isinstance(value, dict):  # verl file logger
            for flat_key, flat_value in value.items():
                if isinstance(flat_value, dict):
                    builder.put_group(str(flat_key), flat_value)
                else:
                    builder.put_flat(str(flat_key), flat_value)
        elif isinstance(value, dict):
            builder.put_group(key, value)
        else:
            builder.put_flat(key, value)
    record: dict[str, Any] = {"step": step, "timestamp": timestamp}
    builder.finish(record)
    anomalies = _anomalies(obj.get("anomalies"))
    if anomalies:
        record["anomalies"] = anomalies
    return record
