"""The wire format's contract, shared by the trainer side and the platform (docs/contract.md §1).

The names and limits of docs/contract.md §2's records, defined once: the
groups and their fields, the table mapping trainers' flat keys onto them, the
spellings of non-finite numbers, the 64-bit integer bounds, the job id rule.
`wire_records` builds and normalises records by these rules and
`wire_lines` turns them into JSONL lines and back, so the writer and the
reader can never disagree.

A record is a plain dict in docs/contract.md §2's nested shape::

    {"step": 12, "timestamp": 1704672000.1, "loss": {"actor_loss": 2.5}, ...,
     "timing": {"rollout": 1.2}, "extra": {"actor/entropy": 0.9}, "anomalies": [...]}

plus, only when a line carries fields the contract does not know inside a
known group (or whole unknown groups), an ``"other"`` dict
``{group: {field: value}}`` so that nothing a trainer wrote is lost on the
way to SQL and back.

These modules are stdlib + orjson only: they run inside training processes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from training_platform.errors import InvalidJobIdError

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
# Each field's stored column name (`kl_max`) and the design documents' name
# (`kl_divergence_max`, `grad_norm_actor`, ...) are among its keys, so a record
# logged in those names lands in the same fields (docs/contract.md, Metric names).
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
    ("kl", "max"): ("actor/kl_max", "kl_max", "kl/max", "kl_divergence_max"),
    ("gradient", "actor_norm"): (
        "actor/grad_norm",
        "grad_norm",
        "actor_grad_norm",
        "grad_norm_actor",
    ),
    ("gradient", "critic_norm"): ("critic/grad_norm", "critic_grad_norm", "grad_norm_critic"),
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
        "gpu_memory_allocated_gib",
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

# The wire format's spellings of non-finite numbers (what Python's json writes
# for NaN and +-inf, and the API's strings, which browsers' JSON.parse can read).
NONFINITE_VALUES: Final[dict[str, float]] = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
}
NONFINITE_NAMES: Final = tuple(NONFINITE_VALUES)
_INFINITY_NAMES: Final = {math.inf: "Infinity", -math.inf: "-Infinity"}

# Integers the databases can store (BIGINT): SQLite, PostgreSQL and orjson
# take no more than 64 bits. A step is an integer from 0 to `MAX_STEP`.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
MAX_STEP: Final = INT64_MAX


def nonfinite_name(value: float) -> str:
    """The spelling of a NaN or infinite float: "NaN", "Infinity" or "-Infinity"."""
    return _INFINITY_NAMES.get(value, "NaN")  # NaN is never found as a key: NaN != NaN


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


def bounded_int(value: int) -> float | int:
    """An int that SQL can store: beyond 64 bits it becomes the nearest float (or +-inf).

    JSON has no integer limit and Python's json parser keeps every digit,
    but neither SQLite, PostgreSQL nor orjson takes more than 64 bits.
    """
    if INT64_MIN <= value <= INT64_MAX:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


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
