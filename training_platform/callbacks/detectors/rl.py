"""The RL detectors on `findings.Detector`: NaN/Inf, KL explosion, gradient
explosion, entropy collapse and reward hacking (the loss ones are in `loss`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from training_platform.callbacks.detectors.findings import (
    Detector,
    Finding,
    as_float,
    extra_number,
    number,
)
from training_platform.callbacks.detectors.windows import RecentMedian, TwoWindowSums
from training_platform.callbacks.wire.schema import (
    ENTROPY_KEYS,
    NONFINITE_VALUES,
    RESPONSE_LENGTH_KEYS,
)

if TYPE_CHECKING:
    from training_platform.callbacks.detectors.config import AnomalyConfig

# Groups whose numbers are checked for NaN/Inf ("any value" of the record).
_NUMERIC_GROUPS: Final = (
    "loss", "reward", "kl", "gradient", "performance", "timing", "extra",
)  # fmt: skip


class NonFiniteDetector(Detector):
    """NaN or Inf in any number of the record (critical): the run is broken."""

    type = "nan_inf"

    def evaluate(self, step: int, record: Mapping[str, Any]) -> Finding | None:
        # Fast path, in C: a sum is finite iff every term is (barring overflow,
        # which the exact scan then clears). One sum over all groups.
        try:
            total = 0.0
            for group in _NUMERIC_GROUPS:
                values = record.get(group)
                if type(values) is dict:
                    total += sum(values.values())
                elif values is not None:
                    total = math.nan  # another kind of mapping: the scan judges it
            if total - total == 0.0:
                return None
        except (TypeError, OverflowError):  # a string, None or a huge int: scan
            pass
        return self._scan(record)

    @staticmethod
    def _scan(record: Mapping[str, Any]) -> Finding | None:
        bad: list[str] = []
        for group in _NUMERIC_GROUPS:
            values = record.get(group)
            if type(values) is not dict and not isinstance(values, Mapping):
                continue
            for name, value in values.items():
                if type(value) is str:
                    value = NONFINITE_VALUES.get(value, 0.0)
                # `v - v != 0.0` is true exactly for NaN and +-Inf, with no call.
                if type(value) is float and value - value != 0.0:
                    bad.append(f"{group}.{name}={value}")
        if not bad:
            return None
        shown = ", ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")
        return Finding("critical", f"non-finite values: {shown}")


class KLExplosionDetector(Detector):
    """`kl.mean` above `kl_threshold` (critical) or a spike far above its recent median."""

    type = "kl_explosion"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._history = RecentMedian(config.window, config.min_history, config.kl_spike_factor)

    def evaluate(self, step: int, record: Mapping[str, Any]) -> Finding | None:
        kls = record.get("kl")
        kl = kls.get("mean") if type(kls) is dict else number(record, "kl", "mean")
        if type(kl) is not float:
            kl = as_float(kl)
            if kl is None:
                return None
        if kl - kl != 0.0:  # NaN or Inf: the nan_inf detector's case
            return None
        config = self.config
        history = self._history
        found: Finding | None = None
        # The median only when a rule needs it: a healthy KL is below both.
        if kl > config.kl_threshold:
            median = history.median() if len(history) >= config.min_history else 0.0
            message = f"kl.mean {kl:.4g} > threshold {config.kl_threshold:g}"
            found = Finding("critical", message, distance=kl - median)
        elif (
            kl > history.quiet_below  # the quiet path: one comparison, no call
            and kl > config.kl_spike_min
            and len(history) >= config.min_history
            and history.exceeds(kl)
        ):
            median = history.median()
            times = kl / median if median > 0 else math.inf
            message = f"kl.mean {kl:.4g} is {times:.1f}x its recent median {median:.4g}"
            found = Finding("warning", message, distance=kl - median)
        history.append(kl)
        return found


class GradientExplosionDetector(Detector):
    """A grad norm far above its recent median, infinite, or above a hard limit."""

    type = "gradient_explosion"
    _FIELDS: Final = ("actor_norm", "critic_norm")

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._history = {
            name: RecentMedian(config.window, config.min_history, config.grad_spike_factor)
            for name in self._FIELDS
        }
        self._histories = tuple(self._history.items())
        # A norm below this is under the hard limit (inf: only an infinite
        # norm is critical).
        limit = config.grad_norm_limit
        self._quiet_limit = math.inf if limit is None else limit

    def evaluate(self, step: int, record: Mapping[str, Any]) -> list[Finding] | None:
        gradients = record.get("gradient")
        if type(gradients) is not dict and not isinstance(gradients, Mapping):
            return None
        config = self.config
        found: list[Finding] | None = None
        for name, history in self._histories:
            norm = gradients.get(name)
            if type(norm) is not float:
                norm = as_float(norm)
                if norm is None:
                    continue
            # The quiet path: below the hard limit and the spike bound, a
            # finite norm only joins the window (NaN fails both comparisons).
            if norm < self._quiet_limit and norm <= history.quiet_below:
                history.append(norm)
                continue
            if norm != norm:  # NaN: the nan_inf detector's case
                continue
            finding: Finding | None = None
            if norm == math.inf or (
                config.grad_norm_limit is not None and norm > config.grad_norm_limit
            ):
                median = history.median() if len(history) >= config.min_history else 0.0
                message = f"gradient.{name} {norm:.4g} exceeds the limit"
                finding = Finding("critical", message, f"gradient.{name}", norm - median)
            elif (
                norm > history.quiet_below  # the quiet path: one comparison
                and norm > config.grad_spike_min
                and len(history) >= config.min_history
                and history.exceeds(norm)
            ):
                median = history.median()
                times = norm / median if median > 0 else math.inf
                message = f"gradient.{name} {norm:.4g} is {times:.1f}x its recent median "
                message += f"{median:.4g}"
                finding = Finding("warning", message, f"gradient.{name}", norm - median)
            if norm != math.inf:
                history.append(norm)
            if finding is not None:
                found = [finding] if found is None else [*found, finding]
        return found


class EntropyCollapseDetector(Detector):
    """Policy entropy below a floor, or down by `entropy_drop_fraction` of its early level.

    With hysteresis: once collapsed, entropy must climb back above
    `entropy_recovery_fraction` of its early level (or the floor, whichever
    is higher) before the incident can end. An entropy that fell from 2.7
    to 0.1 and then hovers around the alarm line at 0.3-0.6 has not
    recovered: one incident, not one per crossing.
    """

    type = "entropy_collapse"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._early: list[float] = []
        self._baseline: float | None = None
        self._limit = -math.inf  # below this, entropy fell too far; set with the baseline
        self._recovered = -math.inf  # below this, a collapsed entropy has not recovered
        # Once the baseline is set: at least this, neither rule can hold (and,
        # while an incident is open, no recovery either).
        self._quiet_from = math.inf
        self._alarm_from = math.inf  # `_quiet_from` while no incident is open

    def evaluate(self, step: int, record: Mapping[str, Any]) -> Finding | None:
        entropy = extra_number(record, ENTROPY_KEYS)
        if entropy is None or entropy - entropy != 0.0:  # missing, NaN or Inf
            return None
        if entropy >= self._quiet_from:  # the quiet path: one comparison
            return None
        config = self.config
        if self._baseline is None:
            self._early.append(entropy)
            if len(self._early) >= config.entropy_baseline_steps:
                baseline = self._baseline = sorted(self._early)[len(self._early) // 2]
                if baseline > 0:
                    self._limit = (1.0 - config.entropy_drop_fraction) * baseline
                    self._recovered = config.entropy_recovery_fraction * baseline
                self._alarm_from = self._quiet_from = max(config.entropy_floor, self._limit)
        if entropy < config.entropy_floor:
            return self._collapsed(
                Finding("warning", f"entropy {entropy:.4g} < floor {config.entropy_floor:g}")
            )
        if entropy < self._limit:
            early = self._baseline
            assert early is not None
            return self._collapsed(
                Finding(
                    "warning",
                    f"entropy {entropy:.4g} fell {1 - entropy / early:.0%} below its "
                    f"early level {early:.4g}",
                )
            )
        if self.ongoing(step):
            # Between the alarm line and recovery: the open incident goes on
            # (no alert: same severity, no distance).
            return Finding("warning", f"entropy {entropy:.4g} has not recovered")
        self._quiet_from = self._alarm_from  # the incident ended: back to the alarm line
        return None

    def _collapsed(self, finding: Finding) -> Finding:
        self._quiet_from = max(self._alarm_from, self._recovered)
        return finding


class RewardHackingDetector(Detector):
    """Reward rising while KL and response length surge together (length exploit)."""

    type = "reward_hacking"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._windows = TwoWindowSums(config.hacking_window)

    def evaluate(self, step: int, record: Mapping[str, Any]) -> Finding | None:
        rewards, kls = record.get("reward"), record.get("kl")
        # `number()`, inlined for the usual dicts of floats.
        reward = rewards.get("mean") if type(rewards) is dict else None
        if type(reward) is not float:
            reward = number(record, "reward", "mean")
        kl = kls.get("mean") if type(kls) is dict else None
        if type(kl) is not float:
            kl = number(record, "kl", "mean")
        length = extra_number(record, RESPONSE_LENGTH_KEYS)
        if reward is None or kl is None or length is None:
            return None
        # `v - v` is 0.0 for a finite number and NaN otherwise: one test for three.
        if (reward - reward) + (kl - kl) + (length - length) != 0.0:
            return None
        if not self._windows.push(reward, kl, length):
            return None
        return self.verdict()

    def verdict(self) -> Finding | None:
        """The finding the two full windows make, else None (no state changes)."""
        # The means one at a time, each only once the rule still holds: a
        # healthy run is usually settled by the reward or KL.
        windows = self._windows
        size = windows.size
        old, new = windows.old, windows.new
        r_old, r_new = old[0] / size, new[0] / size
        if not r_new > r_old:
            return None
        config = self.config
        k_new = new[1] / size
        if not k_new > config.hacking_min_kl:
            return None
        k_old = old[1] / size
        if not k_new > config.hacking_kl_factor * k_old:
            return None
        n_old, n_new = old[2] / size, new[2] / size
        if not n_new > config.hacking_length_factor * n_old:
            return None
        return Finding(
            "warning",
            f"reward {r_old:.3g}->{r_new:.3g} while kl {k_old:.3g}->{k_new:.3g} and "
            f"response length {n_old:.4g}->{n_new:.4g} surge over {config.hacking_window} steps",
        )
