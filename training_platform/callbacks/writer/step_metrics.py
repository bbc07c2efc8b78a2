"""What the training thread does with one step's metrics before handing them on.

`merge_metrics` snapshots a trainer's metrics into plain Python numbers (the
trainer may reuse a tensor in place once the hook returns), reduces what has
one sensible scalar (a 0-d or one-element tensor or array, a numpy scalar, a
one-element list) and drops what has none (a string, a multi-element tensor),
logging one warning per key. It also tells the caller whether the step holds
a NaN or an infinity, so that the callback can put that anomaly on disk before
the hook returns, and whether every value is known to be a finite float (or
int), so that the writer thread need not scan the record for NaN/Inf or for
types a second time.
`StepBuffer` holds a callback's open step and the last one it handed on.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Callable, Mapping
from typing import Any, Final

from training_platform.callbacks.wire.schema import INT64_MAX, NONFINITE_VALUES, to_scalar

logger = logging.getLogger(__name__)

_FLOATS: Final = frozenset((float,))
_PLAIN: Final = frozenset((float, int))
_DROP: Final = object()


class OpenStep:
    """Metrics gathered for a step that has not been written yet."""

    __slots__ = ("alarming", "anomalies", "ended_at", "finite", "ints", "metrics", "step")

    def __init__(self, step: int) -> None:
        self.step = step
        self.metrics: dict[str, Any] = {}
        self.anomalies: list[Mapping[str, Any]] = []
        self.ended_at: float | None = None
        # A NaN/Inf value or an explicit anomaly: the step is written before
        # the hook returns, so the status file says so at once.
        self.alarming = False
        # Every value merged is a float or int known to be finite (also once
        # `wire` turns an int beyond 64 bits into a float): the writer then
        # skips its NaN/Inf scan. False whenever that was not checked cheaply.
        self.finite = True
        # Some value merged is an int, its 64-bit range unchecked (with `finite`,
        # the writer's flat record builder checks only that, not the types).
        self.ints = False


def scalar_value(value: Any) -> Any:
    """`value` as a metric: a Python number, bool or None, or `_DROP` when it
    has no single sensible number (a string, a tensor of several elements)."""
    kind = type(value)
    if kind is float or kind is int or kind is bool or value is None:
        return value
    if kind is str:
        # The wire format's spellings of non-finite numbers are numbers; every
        # other string is not a metric.
        return value if value in NONFINITE_VALUES else _DROP
    scalar = to_scalar(value)  # `.item()`: numpy scalars, 0-d/one-element tensors and arrays
    if scalar is not value:
        return scalar if type(scalar) in (float, int, bool) else _DROP
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return scalar_value(value[0])
    if isinstance(value, numbers.Real):
        return float(value)
    return _DROP


def _is_nonfinite(value: Any) -> bool:
    return type(value) is float and value - value != 0.0  # NaN or +-Inf, without a call


class MetricsMerger:
    """Merges metrics into a step, warning once per key about dropped values."""

    __slots__ = ("_dropped", "job_id")

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._dropped: set[str] = set()

    def merge(self, into: OpenStep, metrics: Mapping[str, Any]) -> None:
        """Copy `metrics` into `into`: groups merge field by field, values become
        plain numbers now, and an ``"anomalies"`` list goes to its anomalies."""
        target = into.metrics
        values = metrics.values()
        # The common case, in C: all floats; or floats and ints (`OpenStep.ints`).
        plain = _FLOATS.issuperset(map(type, values))
        if not plain and _PLAIN.issuperset(map(type, values)):
            plain = into.ints = True
        if plain:
            target.update(metrics)
            try:
                # From 0.0: every int is converted to a float as it is added,
                # so one too large for a float (inf in the record) raises too.
                total = sum(values, 0.0)
            except OverflowError:  # an int beyond a float: rare, look closer
                into.alarming |= any(map(_is_nonfinite, values))
                into.finite = False
                return
            if total - total != 0.0:  # some value is NaN or +-Inf
                into.alarming = True
                into.finite = False
            return
        # Groups, tensors, strings ("NaN" too): the writer scans this record.
        into.finite = False
        for key, value in metrics.items():
            kind = type(value)
            if kind is float or kind is int:
                target[key] = value
                into.alarming |= _is_nonfinite(value)
            elif isinstance(value, Mapping):
                group = target.get(key)
                if type(group) is not dict:
                    group = target[key] = {}
                for name, item in value.items():
                    self._put(group, name, item, f"{key}.{name}", into)
            elif key == "anomalies" and isinstance(value, list):
                found = [a for a in value if isinstance(a, Mapping)]
                into.anomalies.extend(found)
                into.alarming |= bool(found)
            else:
                self._put(target, key, value, key, into)

    def _put(
        self, target: dict[str, Any], name: str, value: Any, label: str, into: OpenStep
    ) -> None:
        scalar = value if type(value) is float else scalar_value(value)
        if scalar is _DROP:
            if label not in self._dropped:
                self._dropped.add(label)
                logger.warning(
                    "job %s: metric %r dropped: %s is not one number (a string, or a tensor "
                    "of several elements); further values of this key are dropped silently",
                    self.job_id,
                    label,
                    _describe_value(value),
                )
            return
        target[name] = scalar
        into.alarming |= _is_nonfinite(scalar)


def _describe_value(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


class StepBuffer:
    """The step being gathered (`open`) and the last one handed to the writer (`last`).

    Hooks merge metrics into the open step; `take` closes it for writing.
    Metrics that arrive late for the step just handed on make an amended copy
    of it (`amend`): the platform keeps the newest line of a step.
    """

    __slots__ = ("_clock", "_merger", "epoch", "last", "open")

    def __init__(self, job_id: str, clock: Callable[[], float]) -> None:
        self._merger = MetricsMerger(job_id)
        self._clock = clock
        self.open: OpenStep | None = None
        self.last: OpenStep | None = None
        self.epoch: int | None = None  # set by the loop; added to each step's metrics

    def merge(self, into: OpenStep, metrics: Mapping[str, Any]) -> None:
        self._merger.merge(into, metrics)

    def newest_step(self) -> int | None:
        """The open step, else the last one: safe from another thread (the system
        sampler's) without a lock, as it reads each attribute once."""
        newest = self.open or self.last
        return None if newest is None else newest.step

    def take(self) -> OpenStep | None:
        """The open step, closed for writing (end time and epoch stamped), or None."""
        open_step = self.open
        if open_step is None:
            return None
        self.open = None
        if open_step.ended_at is None:
            open_step.ended_at = self._clock()
        if self.epoch is not None and "epoch" not in open_step.metrics:
            open_step.metrics["epoch"] = self.epoch
            # An epoch that is not a small int (never from the adapters): scan.
            open_step.finite &= type(self.epoch) is int and abs(self.epoch) <= INT64_MAX
        self.last = open_step
        return open_step

    def amend(self, metrics: Mapping[str, Any]) -> OpenStep:
        """`last` with late `metrics` merged, as a new step that becomes `last`.

        Detectors do not see it twice; its first line's anomalies are carried
        over. The union is a fresh copy: the writer thread may still be
        reading the dicts it was handed before.
        """
        last = self.last
        assert last is not None
        amended = OpenStep(last.step)
        amended.metrics = {k: dict(v) if type(v) is dict else v for k, v in last.metrics.items()}
        amended.anomalies = list(last.anomalies)
        amended.ended_at = last.ended_at
        amended.finite, amended.ints = last.finite, last.ints  # of the values copied
        self._merger.merge(amended, metrics)
        self.last = amended
        return amended
