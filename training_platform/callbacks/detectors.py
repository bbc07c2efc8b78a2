"""The detectors behind `AnomalyMonitor`: each a small stateful object over records.

Each `Detector.evaluate` reads one record (docs/contract.md §2's nested shape) and says
whether its condition holds now; `Detector.check` turns that into at most one
alert per incident. Thresholds come from `anomaly.AnomalyConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from training_platform.callbacks.detector_windows import RecentMedian, TwoWindowSums
from training_platform.callbacks.wire import ENTROPY_KEYS, NONFINITE_VALUES, RESPONSE_LENGTH_KEYS

if TYPE_CHECKING:
    from training_platform.callbacks.anomaly import AnomalyConfig

Anomaly = dict[str, str]

SEVERITY_RANK: Final = {"info": 0, "warning": 1, "critical": 2}
# Groups whose numbers are checked for NaN/Inf ("any value" of the record).
_NUMERIC_GROUPS: Final = (
    "loss", "reward", "kl", "gradient", "performance", "timing", "extra",
)  # fmt: skip


def number(record: Mapping[str, Any], group: str, name: str) -> float | None:
    """The value of `group.name` as a float, or None when missing or not a number."""
    values = record.get(group)
    # `type(...) is dict` first: an ABC isinstance check is slow (docs/benchmarks.md, Callback).
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
        return NONFINITE_VALUES.get(value)
    return None


def _extra(record: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    extra = record.get("extra")
    if type(extra) is not dict and not isinstance(extra, Mapping):
        return None
    for key in keys:
        value = extra.get(key)
        if value is None:
            continue  # most keys of the list are some other trainer's
        if type(value) is float:
            return value
        value = _as_float(value)
        if value is not None:
            return value
    return None


class Finding(NamedTuple):
    """What `Detector.evaluate` reports while its condition holds."""

    severity: str
    message: str
    subject: str = ""
    """What it is about (e.g. ``"loss.actor_loss"``): each subject has its own
    incident, so a critic spike does not hide behind an actor spike's cooldown."""
    distance: float | None = None
    """How far the value is from its baseline, in the value's units; None when
    the condition has no size (NaN, a plateau). Within an incident, a finding
    `realert_factor` times further than the one last alerted alerts again."""


class _Incident:
    __slots__ = ("distance", "last_seen", "opened_at", "severity")

    def __init__(self, step: int, severity: int, distance: float | None) -> None:
        self.opened_at = self.last_seen = step
        self.severity = severity
        self.distance = distance


class Detector:
    """One detector: `evaluate` says whether its condition holds now; `check`
    turns conditions into alerts, one per incident."""

    type: str = ""

    def __init__(self, config: AnomalyConfig) -> None:
        self.config = config
        self._incidents: dict[str, _Incident] = {}

    def evaluate(self, step: int, record: Mapping[str, Any]) -> Finding | list[Finding] | None:
        """The finding(s) while the condition holds, else None. Updates state."""
        raise NotImplementedError

    def check(self, step: int, record: Mapping[str, Any]) -> Anomaly | None:
        """An alert when an incident starts or gets worse, else None."""
        found = self.evaluate(step, record)
        return None if found is None else self.alert(step, found)

    def alert(self, step: int, found: Finding | list[Finding]) -> Anomaly | None:
        """The alert `found` (this step's findings) raises, else None.

        `AnomalyMonitor` calls `evaluate`, and this only when something was
        found: the quiet path of a record is one call per detector.

        An incident (per subject) lasts while its condition keeps recurring
        within `cooldown` steps: a value hovering around a threshold is one
        incident, not one alert per crossing. It alerts again when it gets
        more severe, or when a value lands `realert_factor` times further
        from the baseline than the one last alerted (a grad norm of 1309
        after a 6.4 warning, both over a median of 0.2). Several subjects
        alerting at one step make one anomaly: one row per step and type.
        """
        if not isinstance(found, list):
            alert = self._alert(step, found)
            if alert is None:
                return None
            return {"type": self.type, "severity": alert[0], "message": alert[1]}
        alerts = [a for a in (self._alert(step, f) for f in found) if a is not None]
        if not alerts:
            return None
        severity = max((a[0] for a in alerts), key=SEVERITY_RANK.__getitem__)
        return {"type": self.type, "severity": severity, "message": "; ".join(a[1] for a in alerts)}

    def _alert(self, step: int, finding: Finding) -> tuple[str, str] | None:
        rank = SEVERITY_RANK[finding.severity]
        incident = self._incidents.get(finding.subject)
        if incident is None or not 0 <= step - incident.last_seen <= self.config.cooldown:
            self._incidents[finding.subject] = _Incident(step, rank, finding.distance)
            return finding.severity, finding.message
        incident.last_seen = step
        message = finding.message
        if rank <= incident.severity:
            distance, before = finding.distance, incident.distance
            if (
                distance is None
                or before is None
                or before == math.inf
                or distance <= before  # also when `before` is 0: no re-alert per step
                or distance < self.config.realert_factor * before
            ):
                return None
            times = distance / before if before > 0 else math.inf
            message += (
                f" ({times:.3g}x further from normal than the alert of this incident"
                f" opened at step {incident.opened_at})"
            )
        incident.severity = max(rank, incident.severity)
        if finding.distance is not None:
            incident.distance = finding.distance
        return finding.severity, message


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
            kl = _as_float(kl)
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
                norm = _as_float(norm)
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
    """Policy entropy below a floor, or down by `entropy_drop_fraction` of its early level."""

    type = "entropy_collapse"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._early: list[float] = []
        self._baseline: float | None = None
        self._limit = -math.inf  # below this, entropy fell too far; set with the baseline
        # Once the baseline is set: at least this, neither rule can hold.
        self._quiet_from = math.inf

    def evaluate(self, step: int, record: Mapping[str, Any]) -> Finding | None:
        entropy = _extra(record, ENTROPY_KEYS)
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
                self._quiet_from = max(config.entropy_floor, self._limit)
        if entropy < config.entropy_floor:
            return Finding("warning", f"entropy {entropy:.4g} < floor {config.entropy_floor:g}")
        if entropy < self._limit:
            early = self._baseline
            assert early is not None
            return Finding(
                "warning",
                f"entropy {entropy:.4g} fell {1 - entropy / early:.0%} below its "
                f"early level {early:.4g}",
            )
        return None


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
        length = _extra(record, RESPONSE_LENGTH_KEYS)
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
