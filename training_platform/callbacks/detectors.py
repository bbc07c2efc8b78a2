"""The detectors behind `AnomalyMonitor`: each a small stateful object over records.

Each `Detector.evaluate` reads one record (DESIGN.md's nested shape) and says
whether its condition holds now; `Detector.check` turns that into at most one
alert per incident. Thresholds come from `anomaly.AnomalyConfig`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from training_platform.callbacks.wire import ENTROPY_KEYS, RESPONSE_LENGTH_KEYS

if TYPE_CHECKING:
    from training_platform.callbacks.anomaly import AnomalyConfig

Anomaly = dict[str, str]

SEVERITY_RANK: Final = {"info": 0, "warning": 1, "critical": 2}
_NONFINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Groups whose numbers are checked for NaN/Inf ("any value" of the record).
_NUMERIC_GROUPS: Final = (
    "loss", "reward", "kl", "gradient", "performance", "timing", "extra",
)  # fmt: skip


def number(record: Mapping[str, Any], group: str, name: str) -> float | None:
    """The value of `group.name` as a float, or None when missing or not a number."""
    values = record.get(group)
    # `type(...) is dict` first: an ABC isinstance check costs ~0.4 µs per call.
    if type(values) is not dict and not isinstance(values, Mapping):
        return None
    value = values.get(name)
    return value if type(value) is float else _as_float(value)


def _as_float(value: Any) -> float | None:
    kind = type(value)
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
    if kind is str:
        return _NONFINITE.get(value)
    return None


def _extra(record: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    extra = record.get("extra")
    if type(extra) is not dict and not isinstance(extra, Mapping):
        return None
    for key in keys:
        value = _as_float(extra.get(key))
        if value is not None:
            return value
    return None


def _finite(value: float | None) -> bool:
    return value is not None and value - value == 0.0


class _Recent:
    """The last `size` values and their median, re-sorted every `size // 10`
    appends: the median of 50 steps barely moves in 5, and sorting on every
    step would be the most expensive thing the detectors do."""

    __slots__ = ("_every", "_median", "_stale", "values")

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self._every = max(1, size // 10)
        self._median = 0.0
        self._stale = self._every

    def __len__(self) -> int:
        return len(self.values)

    def append(self, value: float) -> None:
        self.values.append(value)
        self._stale += 1

    def median(self) -> float:
        if self._stale >= self._every:
            ordered = sorted(self.values)
            self._median = ordered[len(ordered) // 2]
            self._stale = 0
        return self._median


class _TwoWindows:
    """Means of the last `size` values and of the `size` before them, O(1) per value."""

    __slots__ = ("_count", "_new", "_new_sum", "_old", "_old_sum", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._new: deque[float] = deque()
        self._old: deque[float] = deque()
        self._new_sum = self._old_sum = 0.0
        self._count = 0

    def push(self, value: float) -> None:
        self._new.append(value)
        self._new_sum += value
        if len(self._new) > self.size:
            moved = self._new.popleft()
            self._new_sum -= moved
            self._old.append(moved)
            self._old_sum += moved
            if len(self._old) > self.size:
                self._old_sum -= self._old.popleft()
        self._count += 1
        if self._count % 1024 == 0:  # re-add now and then: running sums drift
            self._new_sum, self._old_sum = sum(self._new), sum(self._old)

    def full(self) -> bool:
        return len(self._old) == self.size

    def means(self) -> tuple[float, float]:
        """(older window, newer window)."""
        return self._old_sum / self.size, self._new_sum / self.size


class Detector:
    """One detector: `evaluate` says whether its condition holds now; `check`
    turns conditions into alerts, one per incident."""

    type: str = ""

    def __init__(self, config: AnomalyConfig) -> None:
        self.config = config
        self._severity = -1
        self._last_seen: int | None = None

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        """(severity, message) while the condition holds, else None. Updates state."""
        raise NotImplementedError

    def check(self, step: int, record: Mapping[str, Any]) -> Anomaly | None:
        """An alert when an incident starts or gets more severe, else None.

        An incident lasts while its condition keeps recurring within
        `cooldown` steps: a value hovering around a threshold is one incident,
        not one alert per crossing.
        """
        found = self.evaluate(step, record)
        if found is None:
            return None
        severity, message = found
        rank = SEVERITY_RANK[severity]
        ongoing = (
            self._last_seen is not None and 0 <= step - self._last_seen <= self.config.cooldown
        )
        self._last_seen = step
        if ongoing and rank <= self._severity:
            return None
        self._severity = rank
        return {"type": self.type, "severity": severity, "message": message}


class NonFiniteDetector(Detector):
    """NaN or Inf in any number of the record (critical): the run is broken."""

    type = "nan_inf"

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        bad: list[str] = []
        for group in _NUMERIC_GROUPS:
            values = record.get(group)
            if type(values) is not dict and not isinstance(values, Mapping):
                continue
            try:
                # Fast path, all in C: a sum is finite iff every term is (barring
                # overflow, which the exact scan below then clears).
                total = sum(values.values())
                if total - total == 0.0:
                    continue
            except TypeError:  # a string or None among the values: scan them
                pass
            for name, value in values.items():
                if type(value) is str:
                    value = _NONFINITE.get(value, 0.0)
                # `v - v != 0.0` is true exactly for NaN and +-Inf, with no call.
                if type(value) is float and value - value != 0.0:
                    bad.append(f"{group}.{name}={value}")
        if not bad:
            return None
        shown = ", ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")
        return "critical", f"non-finite values: {shown}"


class KLExplosionDetector(Detector):
    """`kl.mean` above `kl_threshold` (critical) or a spike far above its recent median."""

    type = "kl_explosion"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._history = _Recent(config.window)

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        kl = number(record, "kl", "mean")
        if not _finite(kl):
            return None
        assert kl is not None
        config = self.config
        found: tuple[str, str] | None = None
        if kl > config.kl_threshold:
            found = "critical", f"kl.mean {kl:.4g} > threshold {config.kl_threshold:g}"
        elif len(self._history) >= config.min_history and kl > config.kl_spike_min:
            median = self._history.median()
            if kl > config.kl_spike_factor * median:
                found = (
                    "warning",
                    (
                        f"kl.mean {kl:.4g} is {kl / median if median > 0 else math.inf:.1f}x "
                        f"its recent median {median:.4g}"
                    ),
                )
        self._history.append(kl)
        return found


class LossPlateauDetector(Detector):
    """No new best `loss.total_loss` (by `loss_min_delta`) for `loss_patience` steps."""

    type = "loss_plateau"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._best = math.inf
        self._best_step = -1
        self._since_best = 0

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        loss = number(record, "loss", "total_loss")
        if not _finite(loss):
            return None if self._since_best < self.config.loss_patience else self._message()
        assert loss is not None
        if loss < self._best - self.config.loss_min_delta:
            self._best, self._best_step, self._since_best = loss, step, 0
            return None
        self._since_best += 1
        return self._message() if self._since_best >= self.config.loss_patience else None

    def _message(self) -> tuple[str, str]:
        return "warning", (
            f"loss.total_loss has not improved by {self.config.loss_min_delta:g} for "
            f"{self._since_best} steps (best {self._best:.4g} at step {self._best_step})"
        )


class LossSpikeDetector(Detector):
    """|total_loss| above `loss_spike_factor` x the largest seen after warm-up."""

    type = "loss_spike"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._seen = 0
        self._largest = 0.0

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        loss = number(record, "loss", "total_loss")
        if not _finite(loss):
            return None
        assert loss is not None
        self._seen += 1
        size = abs(loss)
        if self._seen <= self.config.loss_spike_warmup:
            return None
        limit = self.config.loss_spike_factor * self._largest
        if self._largest > 0 and size > limit:
            # A spike is not folded into the largest: the next one is judged
            # against the healthy scale, not against the spike.
            return "critical", (
                f"loss.total_loss {loss:.4g} > {self.config.loss_spike_factor:g}x the largest "
                f"loss after warm-up ({self._largest:.4g})"
            )
        self._largest = max(self._largest, size)
        return None


class GradientExplosionDetector(Detector):
    """A grad norm far above its recent median, infinite, or above a hard limit."""

    type = "gradient_explosion"
    _FIELDS: Final = ("actor_norm", "critic_norm")

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._history = {name: _Recent(config.window) for name in self._FIELDS}

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        config = self.config
        worst: tuple[str, str] | None = None
        for name in self._FIELDS:
            norm = number(record, "gradient", name)
            if norm is None or norm != norm:  # missing, or NaN (the nan_inf detector's case)
                continue
            history = self._history[name]
            found: tuple[str, str] | None = None
            if norm == math.inf or (
                config.grad_norm_limit is not None and norm > config.grad_norm_limit
            ):
                found = "critical", f"gradient.{name} {norm:.4g} exceeds the limit"
            elif len(history) >= config.min_history and norm > config.grad_spike_min:
                median = history.median()
                if norm > config.grad_spike_factor * median:
                    found = (
                        "warning",
                        (
                            f"gradient.{name} {norm:.4g} is "
                            f"{norm / median if median > 0 else math.inf:.1f}x its recent median "
                            f"{median:.4g}"
                        ),
                    )
            if norm != math.inf:
                history.append(norm)
            if found and (worst is None or SEVERITY_RANK[found[0]] > SEVERITY_RANK[worst[0]]):
                worst = found
        return worst


class EntropyCollapseDetector(Detector):
    """Policy entropy below a floor, or down by `entropy_drop_fraction` of its early level."""

    type = "entropy_collapse"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._early: list[float] = []
        self._baseline: float | None = None

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        entropy = _extra(record, ENTROPY_KEYS)
        if not _finite(entropy):
            return None
        assert entropy is not None
        config = self.config
        if self._baseline is None:
            self._early.append(entropy)
            if len(self._early) >= config.entropy_baseline_steps:
                self._baseline = sorted(self._early)[len(self._early) // 2]
        if entropy < config.entropy_floor:
            return "warning", f"entropy {entropy:.4g} < floor {config.entropy_floor:g}"
        if self._baseline is not None and self._baseline > 0:
            limit = (1.0 - config.entropy_drop_fraction) * self._baseline
            if entropy < limit:
                return "warning", (
                    f"entropy {entropy:.4g} fell {1 - entropy / self._baseline:.0%} below its "
                    f"early level {self._baseline:.4g}"
                )
        return None


class RewardHackingDetector(Detector):
    """Reward rising while KL and response length surge together (length exploit)."""

    type = "reward_hacking"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        window = config.hacking_window
        self._reward, self._kl, self._length = (_TwoWindows(window) for _ in range(3))

    def evaluate(self, step: int, record: Mapping[str, Any]) -> tuple[str, str] | None:
        reward = number(record, "reward", "mean")
        kl = number(record, "kl", "mean")
        length = _extra(record, RESPONSE_LENGTH_KEYS)
        if not (_finite(reward) and _finite(kl) and _finite(length)):
            return None
        assert reward is not None and kl is not None and length is not None
        self._reward.push(reward)
        self._kl.push(kl)
        self._length.push(length)
        if not self._reward.full():
            return None
        r_old, r_new = self._reward.means()
        k_old, k_new = self._kl.means()
        n_old, n_new = self._length.means()
        config = self.config
        window = config.hacking_window
        if (
            r_new > r_old
            and k_new > config.hacking_min_kl
            and k_new > config.hacking_kl_factor * k_old
            and n_new > config.hacking_length_factor * n_old
        ):
            return "warning", (
                f"reward {r_old:.3g}->{r_new:.3g} while kl {k_old:.3g}->{k_new:.3g} and "
                f"response length {n_old:.4g}->{n_new:.4g} surge over {window} steps"
            )
        return None


DETECTORS: Final[tuple[type[Detector], ...]] = (
    NonFiniteDetector,
    KLExplosionDetector,
    LossPlateauDetector,
    LossSpikeDetector,
    GradientExplosionDetector,
    EntropyCollapseDetector,
    RewardHackingDetector,
)
