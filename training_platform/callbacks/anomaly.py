"""Anomaly detectors over the stream of records, shared by the trainer and the platform.

`AnomalyMonitor.check(record)` runs every detector on one record (docs/contract.md's
nested shape) and returns the anomalies it raises, each
``{"type", "severity", "message"}``. Feed records in step order; the monitor
keeps the little state each detector needs (recent medians, best loss, early
entropy). It works from records alone, so the platform can replay stored runs
through the same code, and tolerates missing groups, ``None`` and NaN values.

One incident is one alert: once a detector fires it stays quiet while its
condition keeps recurring within `cooldown` steps, unless the incident gets
worse: more severe (a KL spike that then crosses the hard threshold is
reported again, as critical) or `realert_factor` times further from normal
(a grad norm of 1309 one step after a 6.4 warning, over a median of 0.2).
Incidents are per subject: a critic loss spike is not hidden by an actor
loss spike a few steps earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from training_platform.callbacks.base import report_failure
from training_platform.callbacks.detectors import (
    SEVERITY_RANK,
    Anomaly,
    Detector,
    EntropyCollapseDetector,
    Finding,
    GradientExplosionDetector,
    KLExplosionDetector,
    NonFiniteDetector,
    RewardHackingDetector,
    number,
)
from training_platform.callbacks.loss_detectors import (
    LOSS_FIELDS,
    LossPlateauDetector,
    LossSpikeDetector,
)
from training_platform.callbacks.quiet_path import fused_check

DETECTORS: Final[tuple[type[Detector], ...]] = (
    NonFiniteDetector,
    KLExplosionDetector,
    LossPlateauDetector,
    LossSpikeDetector,
    GradientExplosionDetector,
    EntropyCollapseDetector,
    RewardHackingDetector,
)


@dataclass
class AnomalyConfig:
    """Detector thresholds. Steps are counted in records fed to the monitor."""

    cooldown: int = 20
    """An incident ends once its condition has been clear for this many steps;
    until then the detector stays quiet, so a flapping condition is one alert ..."""
    realert_factor: float = 10.0
    """... unless it gets more severe, or a value lands this many times further
    from its baseline (e.g. the recent median) than the one last alerted."""
    disabled: frozenset[str] = field(default_factory=frozenset)
    """Anomaly types to skip, e.g. ``{"entropy_collapse"}``."""

    kl_threshold: float = 1.0
    """`kl.mean` above this is a critical `kl_explosion` (RLHF runs sit at 0.01-0.3)."""
    kl_spike_factor: float = 10.0
    """`kl.mean` this many times its recent median is a `kl_explosion` warning ..."""
    kl_spike_min: float = 0.1
    """... if it is also above this (early KL is ~0, where any growth is a big ratio)."""

    loss_patience: int = 50
    """`loss_plateau`: a loss frozen (within `loss_min_delta`) this many steps,
    or one that clearly fell and then stopped, judged on blocks of half this
    many values. See `loss_detectors` for the rules."""
    loss_min_delta: float = 1e-4
    """A loss moving less than this is frozen (and must fall more than this to fall)."""
    loss_trend_drop: float = 0.1
    """A loss is watched for a plateau once the median of its last `window`
    values is this fraction (and 1.25 sigmas of its noise) below its early
    level, the median of its first `window` values, when that is clearly
    positive (above two sigmas of their noise)."""
    loss_spike_factor: float = 10.0
    """`loss_spike`: |loss| at least this many times its typical magnitude (the
    larger of the |median| of its last `min_history` values and the sigma of
    its last 2 x `window`, 1.4826 x MAD), for each loss on its own ..."""
    loss_spike_min: float = 0.01
    """... and at least this large (a loss that is ~0 by construction, in float
    noise, must not spike from 1e-9 to 1e-7)."""
    loss_spike_warmup: int = 20
    """Values of each loss ignored by the spike rule (early losses are large and falling)."""

    grad_spike_factor: float = 10.0
    """`gradient_explosion`: a grad norm this many times its recent median."""
    grad_spike_min: float = 0.0
    """... and at least this large (raise it when healthy norms sit near zero)."""
    grad_norm_limit: float | None = None
    """Optional hard limit: a grad norm above it is a critical explosion."""

    window: int = 50
    """Steps of history behind the recent medians (KL, grad norms, losses)."""
    min_history: int = 10
    """Values needed before a relative (median-based) rule may fire."""

    entropy_floor: float = 0.01
    """`entropy_collapse`: policy entropy (nats) below this ..."""
    entropy_drop_fraction: float = 0.9
    """... or below (1 - this) times its early level."""
    entropy_baseline_steps: int = 10
    """Records whose median entropy is the early level."""

    hacking_window: int = 20
    """`reward_hacking`: compares the mean of the last window with the one before."""
    hacking_kl_factor: float = 2.0
    """KL must grow at least this much between the windows ..."""
    hacking_min_kl: float = 0.05
    """... and end above this level ..."""
    hacking_length_factor: float = 1.3
    """... while the response length grows this much and the reward rises."""

    @property
    def early_records(self) -> int:
        """How many of a run's first records set early baselines (entropy, loss levels)."""
        return max(self.entropy_baseline_steps, self.window)


class AnomalyMonitor:
    """Runs every enabled detector over records fed in step order."""

    def __init__(self, config: AnomalyConfig | None = None) -> None:
        self.config = config or AnomalyConfig()
        self.detectors: list[Detector] = [
            cls(self.config) for cls in DETECTORS if cls.type not in self.config.disabled
        ]
        self._reported: set[tuple[int, str]] = set()
        self._fuse()

    def _fuse(self) -> None:
        # Every detector but the NaN scan in one function (`quiet_path`), for
        # the full default set: the same findings at a fraction of the cost
        # of one call per detector. Bound to this list of detectors: a
        # replaced list (or a disabled detector) goes one detector at a time.
        scan_first = bool(self.detectors) and type(self.detectors[0]) is NonFiniteDetector
        self._fused_for = self.detectors
        fused = fused_check(self.detectors[1:], self._exact, self._alert) if scan_first else None
        self._fused = fused

    def check(self, record: Mapping[str, Any], *, finite: bool = False) -> list[Anomaly]:
        """The anomalies `record` raises (usually none). Never raises on odd input.

        `finite`: the caller knows every number of the record is finite (the
        callback's training thread checked it while merging the metrics), so
        the NaN/Inf scan, stateless, is skipped: it would find nothing.
        """
        step = record.get("step")
        if type(step) is not int:
            step = _as_step(step)
        found: list[Anomaly] = []
        detectors = self.detectors
        fused = self._fused
        if fused is not None and detectors is self._fused_for:
            if not finite:
                self._exact(detectors[0], step, record, found)
            try:
                fused(step, record, found)
            except Exception:  # a bug of the fused path: the detectors go on one by one
                report_failure(self._reported, self, "check")
                self._fused = None
            return found
        if finite and detectors and type(detectors[0]) is NonFiniteDetector:
            detectors = detectors[1:]  # `DETECTORS` lists it first
        for detector in detectors:
            self._exact(detector, step, record, found)
        return found

    def _exact(
        self, detector: Detector, step: int, record: Mapping[str, Any], found: list[Anomaly]
    ) -> None:
        """Run `detector` on its own exact path, appending its anomaly to `found`."""
        try:
            # `evaluate`, then `alert` only on a finding: `Detector.check` in
            # two, saving a call per detector on the quiet path.
            findings = detector.evaluate(step, record)
            if findings is None:
                return
            anomaly = detector.alert(step, findings)
        except Exception:  # a detector bug must not cost the record or the run
            report_failure(self._reported, detector, "check")
            return
        if anomaly is not None:
            found.append(anomaly)

    def _alert(
        self,
        detector: Detector,
        step: int,
        findings: Finding | list[Finding],
        found: list[Anomaly],
    ) -> None:
        """Append the anomaly `detector`'s findings raise (if any) to `found`."""
        try:
            anomaly = detector.alert(step, findings)
        except Exception:  # a detector bug must not cost the record or the run
            report_failure(self._reported, detector, "check")
            return
        if anomaly is not None:
            found.append(anomaly)

    def reset(self) -> None:
        """Forget all history (e.g. before replaying a run from its first record)."""
        self.detectors = [type(d)(self.config) for d in self.detectors]
        self._fuse()


def _as_step(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def is_alert(anomaly: Mapping[str, Any], at_least: str = "warning") -> bool:
    """Whether `anomaly` is at least as severe as `at_least`."""
    rank = SEVERITY_RANK.get(str(anomaly.get("severity")), 1)
    return rank >= SEVERITY_RANK[at_least]


__all__ = [
    "DETECTORS",
    "LOSS_FIELDS",
    "SEVERITY_RANK",
    "Anomaly",
    "AnomalyConfig",
    "AnomalyMonitor",
    "Detector",
    "EntropyCollapseDetector",
    "Finding",
    "GradientExplosionDetector",
    "KLExplosionDetector",
    "LossPlateauDetector",
    "LossSpikeDetector",
    "NonFiniteDetector",
    "RewardHackingDetector",
    "is_alert",
    "number",
]
