"""`{job_id}_samples.jsonl`: one generated sample per line (docs/contract.md, Samples).

The trainer writes them (`build_sample` + `encode_record`), the platform
reads them (`decode_sample_line`): one module, so both sides agree on every
rule. stdlib + orjson only: it runs inside training processes.

A sample is identified by `(step, index)`; the newest line for it wins.
`step`, `index`, `prompt` and `completion` are required; the rest is
optional and normalised to None when absent, so every decoded sample has
every key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from training_platform.callbacks.wire.lines import parse_json_line
from training_platform.callbacks.wire.schema import INT64_MAX, NONFINITE_VALUES, to_scalar
from training_platform.errors import RecordError

SAMPLES_SUFFIX: Final = "_samples.jsonl"
SAMPLE_KEYS: Final = (
    "step",
    "index",
    "timestamp",
    "prompt",
    "completion",
    "reward",
    "rewards",
    "group",
    "response_length",
    "finish_reason",
    "extra",
)
MAX_INDEX: Final = 2**31 - 1  # samples per step: far beyond any rollout batch
GROUP_CHARS: Final = 256
FINISH_REASON_CHARS: Final = 32
REWARD_NAME_CHARS: Final = 64
MAX_REWARD_COMPONENTS: Final = 64


def _integer(value: Any, name: str, upper: int) -> int:
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or not 0 <= value <= upper:
        raise RecordError(f"{name} must be an integer from 0 to {upper}, got {value!r}")
    return value


def _number(value: Any, name: str) -> float | None:
    """A float (NaN and infinities kept: a NaN reward is news), or None."""
    if value is None:
        return None
    if isinstance(value, str) and value in NONFINITE_VALUES:
        return NONFINITE_VALUES[value]
    value = to_scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"{name} must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int beyond float's range
        return math.inf if value > 0 else -math.inf


def _text(value: Any, name: str, max_chars: int | None = None) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{name} must be a string, got {type(value).__name__}")
    if max_chars is not None and len(value) > max_chars:
        raise RecordError(f"{name} is longer than {max_chars} characters")
    return value


def normalize_sample(obj: Any) -> dict[str, Any]:
    """A decoded sample with every key of `SAMPLE_KEYS`; raises `RecordError`."""
    if not isinstance(obj, dict):
        raise RecordError("a sample must be a JSON object")
    for required in ("step", "index", "prompt", "completion"):
        if obj.get(required) is None:
            raise RecordError(f"a sample needs {required!r}")
    rewards = obj.get("rewards")
    if rewards is not None:
        if not isinstance(rewards, dict) or len(rewards) > MAX_REWARD_COMPONENTS:
            raise RecordError(
                f"rewards must be an object of at most {MAX_REWARD_COMPONENTS} numbers"
            )
        rewards = {
            _text(key, "a reward's name", REWARD_NAME_CHARS): _number(value, f"rewards.{key}")
            for key, value in rewards.items()
        }
    group = obj.get("group")
    if isinstance(group, int) and not isinstance(group, bool):
        group = str(group)  # a prompt's position in the batch is a fine group key
    extra = obj.get("extra")
    if extra is not None and not isinstance(extra, dict):
        raise RecordError("extra must be a JSON object")
    length = obj.get("response_length")
    if length is not None:
        length = _integer(length, "response_length", MAX_INDEX)
    finish = obj.get("finish_reason")
    if finish is not None:
        finish = _text(finish, "finish_reason", FINISH_REASON_CHARS)
    timestamp = _number(obj.get("timestamp"), "timestamp")
    return {
        "step": _integer(obj["step"], "step", INT64_MAX),
        "index": _integer(obj["index"], "index", MAX_INDEX),
        "timestamp": timestamp if timestamp is None or math.isfinite(timestamp) else None,
        "prompt": _text(obj["prompt"], "prompt"),
        "completion": _text(obj["completion"], "completion"),
        "reward": _number(obj.get("reward"), "reward"),
        "rewards": rewards,
        "group": None if group is None else _text(group, "group", GROUP_CHARS),
        "response_length": None
        if length is None
        else _integer(length, "response_length", MAX_INDEX),
        "finish_reason": None
        if finish is None
        else _text(finish, "finish_reason", FINISH_REASON_CHARS),
        "extra": extra,
    }


def decode_sample_line(line: bytes) -> dict[str, Any]:
    """One complete line (without its ``\\n``) into a sample; raises `RecordError`.

    The line rules are the metrics file's: a BOM and a trailing ``\\r`` are
    tolerated, ``NaN``/``Infinity`` tokens accepted, invalid UTF-8 refused.
    """
    return normalize_sample(parse_json_line(line))


def build_sample(
    step: int,
    index: int,
    prompt: str,
    completion: str,
    *,
    reward: float | None = None,
    rewards: Mapping[str, float] | None = None,
    group: str | None = None,
    response_length: int | None = None,
    finish_reason: str | None = None,
    extra: Mapping[str, Any] | None = None,
    timestamp: float | None = None,
) -> dict[str, Any]:
    """A sample as the file holds it (absent optional fields left out)."""
    sample: dict[str, Any] = {"step": step, "index": index}
    if timestamp is not None:
        sample["timestamp"] = timestamp
    sample["prompt"], sample["completion"] = prompt, completion
    optional = {
        "reward": reward,
        "rewards": None if rewards is None else dict(rewards),
        "group": group,
        "response_length": response_length,
        "finish_reason": finish_reason,
        "extra": None if extra is None else dict(extra),
    }
    sample.update({key: value for key, value in optional.items() if value is not None})
    return sample
