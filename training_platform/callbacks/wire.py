"""The wire format shared by the trainer side and the platform (docs/contract.md §1).

One module builds records from what trainers emit (verl's and TRL's flat keys,
Hugging Face logs, or the groups of docs/contract.md §2) and parses JSONL lines back into the
same nested shape, so the writer and the reader can never disagree.

A record is a plain dict in docs/contract.md §2's nested shape::

    {"step": 12, "timestamp": 1704672000.1, "loss": {"actor_loss": 2.5}, ...,
     "timing": {"rollout": 1.2}, "extra": {"actor/entropy": 0.9}, "anomalies": [...]}

plus, only when a line carries fields this module does not know inside a known
group (or whole unknown groups), an ``"other"`` dict ``{group: {field: value}}``
so that nothing a trainer wrote is lost on the way to SQL and back.

This module is stdlib + orjson only: it runs inside training processes.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson

from training_platform.errors import InvalidJobIdError, RecordError

JOB_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# Fixed numeric groups: these fields become SQL columns on the platform side.
GROUP_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "loss": ("actor_loss", "critic_loss", "total_loss"),
    "reward": ("mean", "std", "max", "min"),
    "kl": ("mean", "max"),
    "gradient": ("actor_norm", "critic_norm"),
    "performance": ("tokens_per_second", "step_time", "gpu_memory_allocated"),
}
# Free-form groups: any name -> scalar. `timing` values are seconds per stage.
FREE_GROUPS: Final = ("timing", "extra")
STATUS_VALUES: Final = ("pending", "running", "completed", "failed", "stopped")
SEVERITIES: Final = ("info", "warning", "critical")

# The one table that maps flat trainer keys onto the groups of docs/contract.md §2.
# For each (group, field) the source keys are listed best first: when a trainer
# reports several (verl logs both `actor/kl_loss` and `actor/ppo_kl`), the best
# one fills the field and the others stay in `extra`, so nothing is dropped.
FIELD_SOURCES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("loss", "actor_loss"): ("actor/pg_loss", "loss/policy_avg", "actor_loss", "policy_loss"),
    ("loss", "critic_loss"): ("critic/vf_loss", "loss/value_avg", "critic_loss", "value_loss"),
    ("loss", "total_loss"): ("total_loss", "loss", "train/loss", "train_loss"),
    # verl: `critic/score/*` is the raw reward-model/verifier score; `critic/rewards/*`
    # has the in-reward KL penalty folded in, so it is only a fallback.
    ("reward", "mean"): (
        "critic/score/mean",
        "reward",
        "objective/scores",
        "rewards/mean",
        "critic/rewards/mean",
        "objective/rlhf_reward",
        "reward_mean",
    ),
    ("reward", "std"): ("critic/score/std", "reward_std", "rewards/std", "reward/std"),
    ("reward", "max"): ("critic/score/max", "critic/rewards/max", "reward_max", "reward/max"),
    ("reward", "min"): ("critic/score/min", "critic/rewards/min", "reward_min", "reward/min"),
    # KL to the reference policy first; `actor/ppo_kl` / `policy/approxkl_avg` are
    # old-vs-new policy KL of one update, used only when nothing better is logged.
    ("kl", "mean"): (
        "actor/kl_loss",
        "actor/reward_kl_penalty",
        "kl",
        "objective/kl",
        "kl_mean",
        "actor/ppo_kl",
        "policy/approxkl_avg",
    ),
    ("kl", "max"): ("actor/kl_max", "kl_max", "kl/max"),
    ("gradient", "actor_norm"): ("actor/grad_norm", "grad_norm", "actor_grad_norm"),
    ("gradient", "critic_norm"): ("critic/grad_norm", "critic_grad_norm"),
    ("performance", "tokens_per_second"): (
        "perf/throughput",
        "tokens_per_second",
        "throughput/tokens_per_second",
    ),
    # verl's `timing_s/step` is the whole step (the sum of the stages and more), not
    # a stage: in `timing` it would be counted twice in the per-stage chart.
    ("performance", "step_time"): (
        "perf/time_per_step",
        "timing_s/step",
        "timing/step",
        "step_time",
        "time/step",
    ),
    ("performance", "gpu_memory_allocated"): (
        "perf/max_memory_allocated_gb",
        "gpu_memory_allocated",
        "memory/max_allocated_gb",
    ),
}
# Flat keys whose prefix names a stage time in seconds: `timing_s/gen` -> timing.gen.
TIMING_PREFIXES: Final = ("timing_s/", "timing/")

# Well-known extra keys the detectors and the dashboard look for, best first.
ENTROPY_KEYS: Final = (
    "actor/entropy",
    "entropy",
    "policy/entropy_avg",
    "objective/entropy",
    "policy/entropy",
)
RESPONSE_LENGTH_KEYS: Final = (
    "response_length/mean",
    "completions/mean_length",
    "response_length",
    "completion_length",
)

KEY_MAP: Final[dict[str, tuple[str, str, int]]] = {
    key: (group, field, rank)
    for (group, field), keys in FIELD_SOURCES.items()
    for rank, key in enumerate(keys)
}

_NONFINITE_STRINGS: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_BOM: Final = b"\xef\xbb\xbf"


def validate_job_id(job_id: object) -> str:
    """Return `job_id` unchanged, or raise `InvalidJobIdError` saying what is allowed."""
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(job_id):
        raise InvalidJobIdError(
            f"invalid job_id {job_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return job_id


def to_scalar(value: Any) -> Any:
    """Turn numpy scalars and 0-d torch tensors (CPU or CUDA) into Python numbers.

    Python scalars pass through untouched; anything else that has `.item()` is
    asked for it (that is also what syncs a CUDA tensor). Other objects are
    returned as they are and rejected by the record builder.
    """
    if value is None or type(value) in (float, int, bool, str):
        return value
    item = getattr(value, "item", None)
    if item is not None:
        try:
            return item()
        except (ValueError, RuntimeError):  # a tensor with more than one element
            return value
    return value


_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _bounded(value: int) -> float | int:
    """An int that SQL can store: beyond 64 bits it becomes the nearest float (or +-inf).

    JSON has no integer limit and Python's json parser keeps every digit,
    but neither SQLite, PostgreSQL nor orjson takes more than 64 bits.
    """
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _number(value: Any) -> float | int | None:
    """A finite or non-finite number, or None when `value` is not numeric."""
    if type(value) is float:
        return value
    if type(value) is int:
        return _bounded(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return _NONFINITE_STRINGS.get(value)
    value = to_scalar(value)
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _bounded(value)
    return None


def _step(value: Any) -> int:
    value = to_scalar(value)
    if isinstance(value, bool):
        raise RecordError(f"step must be an integer >= 0, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
        raise RecordError(f"step must be an integer from 0 to 2**63 - 1, got {value!r}")
    return value


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
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
            number = _bounded(raw)
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
        return _bounded(value)
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
    record: dict[str, Any] = {
        "step": step if type(step) is int and 0 <= step <= _INT64_MAX else _step(step),
        "timestamp": time.time()
        if timestamp is None
        else timestamp
        if type(timestamp) is float and timestamp - timestamp == 0.0
        else _timestamp(timestamp),
    }
    if not (metrics and _build_flat(record, metrics)):
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
# Per key tuple (trainers log the same keys every step), a function that builds
# the groups of a flat all-number metrics dict: the key table is consulted once
# per layout, not once per key and step.
_FLAT_BUILDERS: dict[tuple[Any, ...], Callable[[Mapping[Any, Any]], dict[str, Any]]] = {}
_MAX_FLAT_BUILDERS: Final = 256


def _flat_builder(keys: tuple[Any, ...]) -> Callable[[Mapping[Any, Any]], dict[str, Any]]:
    """Compile ``lambda m: {"loss": {"actor_loss": m["actor/pg_loss"], ...}, ...}``
    for this key tuple. The layout comes from running the general builder once
    on stand-in values (so the key table and its priorities decide, as always);
    keys and fields enter the source only as `repr()` literals."""
    builder = _Builder()
    for index, key in enumerate(keys):
        builder.put_flat(str(key), float(index))
    layout = dict(builder.groups)
    if builder.extra:
        layout["extra"] = builder.extra
    groups = ", ".join(
        f"{group!r}: {{"
        + ", ".join(f"{field!r}: m[{keys[int(index)]!r}]" for field, index in fields.items())
        + "}"
        for group, fields in layout.items()
    )
    build: Callable[[Mapping[Any, Any]], dict[str, Any]] = eval(f"lambda m: {{{groups}}}")
    if len(_FLAT_BUILDERS) >= _MAX_FLAT_BUILDERS:  # keys that change every step: stay bounded
        _FLAT_BUILDERS.clear()
    _FLAT_BUILDERS[keys] = build
    return build


def _build_flat(record: dict[str, Any], metrics: Mapping[Any, Any]) -> bool:
    """The common case, a flat dict of Python floats and ints under string keys:
    what the general builder produces, without its per-key work (~5x faster).
    False (nothing done) for anything else."""
    kinds = set(map(type, metrics.values()))
    if not kinds <= _FLAT_NUMBERS:
        return False
    if int in kinds and not all(_INT64_MIN <= value <= _INT64_MAX for value in metrics.values()):
        metrics = {k: _bounded(v) if type(v) is int else v for k, v in metrics.items()}
    keys = tuple(metrics)
    build = _FLAT_BUILDERS.get(keys)
    if build is None:
        if not all(type(key) is str for key in keys):
            return False
        build = _flat_builder(keys)
    record.update(build(metrics))
    return True


_GROUP_FIELD_SETS: Final = {group: frozenset(fields) for group, fields in GROUP_FIELDS.items()}
_PASSTHROUGH_KEYS: Final = frozenset({"step", "timestamp", "anomalies", "extra"})


def _is_canonical(obj: dict[str, Any]) -> bool:
    """True when `obj` is already a record in the shape of docs/contract.md, needing no rewrite.

    That is what our own callback writes, so ingestion checks it first: a
    tight loop of type checks instead of rebuilding every group (about 5x
    faster; for dicts this small it also beats `issuperset(map(type, ...))`).
    Anything unusual (a bool, a string "NaN", an integer beyond 64 bits, an
    unknown field or group, a flat key) returns False and takes the general
    path.
    """
    step = obj.get("step")
    if type(step) is not int or not 0 <= step <= _INT64_MAX:
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
                if kind is not float and (
                    kind is not int or not _INT64_MIN <= number <= _INT64_MAX
                ):
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


def _parse_int(digits: str) -> float | int:
    # orjson itself turns integers beyond 64 bits into floats; do the same here.
    return _bounded(int(digits))


def decode_line(line: bytes) -> dict[str, Any]:
    """Decode one complete JSONL line (without its ``\\n``) into a record.

    Tolerates a UTF-8 BOM and a trailing ``\\r``; accepts the ``NaN``,
    ``Infinity`` and ``-Infinity`` tokens Python's json writes. Raises
    `RecordError` for anything that is not a valid record, including invalid
    UTF-8 and malformed JSON.
    """
    if line.startswith(_BOM):
        line = line[3:]
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        # orjson refuses NaN/Infinity tokens; the stdlib parser takes them.
        try:
            obj = json.loads(line.decode("utf-8"), parse_int=_parse_int)
        except UnicodeDecodeError as exc:
            raise RecordError(f"line is not valid UTF-8: {exc}") from None
        except json.JSONDecodeError as exc:
            raise RecordError(f"malformed JSON: {exc}") from None
        except RecursionError:
            raise RecordError("malformed JSON: nested too deeply") from None
    return normalize_record(obj)


def _has_nonfinite(value: Any) -> bool:
    # `v - v != 0.0` is true exactly for NaN and +-Inf and costs no call.
    if type(value) is float:
        return value - value != 0.0
    if type(value) is dict:
        for item in value.values():
            kind = type(item)
            if kind is float:
                if item - item != 0.0:
                    return True
            elif (kind is dict or kind is list) and _has_nonfinite(item):
                return True
        return False
    if type(value) is list:
        return any(_has_nonfinite(item) for item in value)
    return False


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One JSONL line (with its ``\\n``); non-finite floats as ``NaN``/``Infinity``.

    orjson is ~10x faster than json but writes NaN as null, which would turn
    "the loss was NaN" into "no loss logged": non-finite records take the
    stdlib path, which is rare and always correct.
    """
    try:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        # orjson writes NaN/Inf as null: no "null" at all means none were there,
        # which spares the common case the walk over every value.
        if b"null" not in line or not _has_nonfinite(record):
            return line
    except orjson.JSONEncodeError:
        pass  # e.g. an integer beyond 64 bits deep in `extra`: the stdlib writes it
    return json.dumps(record, allow_nan=True, separators=(",", ":")).encode() + b"\n"


def iter_numbers(record: Mapping[str, Any]) -> Iterable[tuple[str, float | int]]:
    """Yield ``("group.field", value)`` for every number in a record (for NaN checks)."""
    for group in (*GROUP_FIELDS, *FREE_GROUPS):
        values = record.get(group)
        if not values:
            continue
        for field, value in values.items():
            if type(value) is float or (type(value) is int):
                yield f"{group}.{field}", value


def first_extra(record: Mapping[str, Any], keys: Iterable[str]) -> float | None:
    """The first numeric `extra` value among `keys` (e.g. `ENTROPY_KEYS`), else None."""
    extra = record.get("extra")
    if not extra:
        return None
    for key in keys:
        value = extra.get(key)
        if type(value) is float or type(value) is int:
            return value
    return None
