"""`compare_metric_logs(a, b)`: are two runs' metrics the same, step by step and field by field?

The documents' ``verify_m1``: two runs with one seed must log identical
metrics. What a clock measures differs between any two runs and is left out:
the record's ``timestamp``, the ``timing`` and ``performance`` groups (stage
times, step time, throughput, memory) and the profiling kit's ``extra``
figures (``extra.profiling/...``: rates and memory). Everything else is
compared exactly (NaN equals NaN: a run that diverges the same way twice is
deterministic).

A step logged twice (late metrics rewrite a step: docs/contract.md) counts
as its last line, as the platform stores it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

# Flattened keys, each ignored with everything under it ("timing" ignores "timing.rollout").
WALL_CLOCK_FIELDS = ("timestamp", "timing", "performance", "extra.profiling")


class _Absent:
    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()


@dataclass
class Difference:
    step: int
    field: str
    first: Any
    second: Any

    def describe(self) -> str:
        first, second = self.first, self.second
        return f"step {self.step}: {self.field} is {first!r} in one run, {second!r} in the other"


@dataclass
class Comparison:
    steps: int = 0
    """Steps present in both runs."""
    fields_compared: int = 0
    differences: list[Difference] = field(default_factory=list)
    missing_steps: list[str] = field(default_factory=list)
    """Sentences naming steps one run has and the other lacks."""

    @property
    def identical(self) -> bool:
        # Nothing compared is no evidence of determinism: an empty or all-ignored log fails.
        return not self.differences and not self.missing_steps and self.fields_compared > 0

    def verdict(self) -> str:
        if self.identical:
            return f"identical: {self.fields_compared} values over {self.steps} steps"
        if self.missing_steps:
            return self.missing_steps[0]
        if self.differences:
            first = self.differences[0]
            more = len(self.differences) - 1
            return first.describe() + (f" (and {more} more differences)" if more else "")
        return "nothing to compare: no step has a field outside the wall-clock ones"


class LogError(ValueError):
    """A metrics file that cannot be compared (missing, not JSON lines of records)."""


def read_steps(path: Path) -> dict[int, dict[str, Any]]:
    """`path`'s records by step (the last line of a step wins)."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise LogError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    steps: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            # The wire writes NaN and Infinity as JSON's extension tokens: only the
            # standard library's decoder reads them; orjson first, it is the common case.
            record = _loads(line)
        except ValueError:
            raise LogError(f"{path}:{number}: not a JSON record") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise LogError(f"{path}:{number}: a record without an integer 'step'")
        steps[step] = record
    return steps


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        import json

        return json.loads(line)


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``{"loss": {"actor_loss": 1}}`` -> ``("loss.actor_loss", 1)``; lists stay whole."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def is_ignored(key: str, ignored: Iterable[str]) -> bool:
    return any(key == p or key.startswith((f"{p}.", f"{p}/")) for p in ignored)


def _same(first: Any, second: Any) -> bool:
    if isinstance(first, float) and isinstance(second, float):
        return first == second or (math.isnan(first) and math.isnan(second))
    return bool(first == second) and type(first) is type(second)


def compare_steps(
    first: dict[int, dict[str, Any]],
    second: dict[int, dict[str, Any]],
    ignored: Iterable[str] = WALL_CLOCK_FIELDS,
) -> Comparison:
    """Compare two runs' records by step, field by field, outside `ignored`."""
    ignored = tuple(ignored)
    result = Comparison()
    only_first = sorted(set(first) - set(second))
    only_second = sorted(set(second) - set(first))
    for steps, which in ((only_first, "the first"), (only_second, "the second")):
        if steps:
            listed = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
            result.missing_steps.append(f"{len(steps)} step(s) only in {which} run: {listed}")
    for step in sorted(set(first) & set(second)):
        result.steps += 1
        # "step" is what the records were matched by: equal by construction, no evidence.
        a = {k: v for k, v in flatten(first[step]) if k != "step" and not is_ignored(k, ignored)}
        b = {k: v for k, v in flatten(second[step]) if k != "step" and not is_ignored(k, ignored)}
        for key in sorted(a.keys() | b.keys()):
            result.fields_compared += 1
            if key not in a or key not in b or not _same(a[key], b[key]):
                result.differences.append(
                    Difference(step, key, a.get(key, ABSENT), b.get(key, ABSENT))
                )
    return result


def compare_metric_logs(
    first: Path, second: Path, ignored: Iterable[str] = WALL_CLOCK_FIELDS
) -> Comparison:
    """Compare two metrics JSONL files (`LogError` when one cannot be read)."""
    return compare_steps(read_steps(first), read_steps(second), ignored)
