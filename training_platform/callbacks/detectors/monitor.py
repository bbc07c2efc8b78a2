"""Anomaly detectors over the stream of records, shared by the trainer and the platform.

`AnomalyMonitor.check(record)` runs every detector on one record (docs/contract.md's
nested shape) and returns the anomalies it raises, each
``{"type", "severity", "message"}``. Feed records in step order; the monitor
keeps the little state each detector needs (recent medians, each loss's start
level, early entropy). It works from records alone, so the platform can replay
stored runs through the same code, and tolerates missing groups, ``None`` and
NaN values.

One incident is one alert: once a detector fires it stays quiet while its
condition keeps recurring (within `cooldown` steps, or twice the incident's
age: `findings.incident_quiet`), unless the incident gets
worse: more severe (a KL spike that then crosses the hard threshold is
reported again, as critical) or `realert_factor` times further from normal
(a grad norm of 1309 one step after a 6.4 warning, over a median of 0.2).
Incidents are per subject: a critic loss spike is not hidden by an actor
loss spike a few steps earlier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from training_platform.callbacks.base import report_failure
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.findings import (
    SEVERITY_RANK,
    Anomaly,
    Detector,
    Finding,
)
from training_platform.callbacks.detectors.loss import (
    LossPlateauDetector,
    LossSpikeDetector,
)
from training_platform.callbacks.detectors.loss_start import LossNotDecreasingDetector
from training_platform.callbacks.detectors.quiet_path import fused_check
from training_platform.callbacks.detectors.rl import (
    EntropyCollapseDetector,
    GradientExplosionDetector,
    KLExplosionDetector,
    NonFiniteDetector,
    RewardHackingDetector,
)

DETECTORS: Final[tuple[type[Detector], ...]] = (
    NonFiniteDetector,
    KLExplosionDetector,
    LossPlateauDetector,
    LossSpikeDetector,
    LossNotDecreasingDetector,
    GradientExplosionDetector,
    EntropyCollapseDetector,
    RewardHackingDetector,
)


class AnomalyMonitor:
    """Runs every enabled detector over records fed in step order."""

    @classmethod
    def with_shorthands(
        cls, config: AnomalyConfig | None, kl_threshold: float = 1.0, loss_patience: int = 50
    ) -> AnomalyMonitor:
        """A monitor for `config` (the defaults when None) with `PlatformCallback`'s two
        shorthand arguments applied where they differ from their defaults."""
        config = config or AnomalyConfig()
        if kl_threshold != 1.0:
            config = replace(config, kl_threshold=kl_threshold)
        if loss_patience != 50:
            config = replace(config, loss_patience=loss_patience)
        return cls(config)

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

    def extents(self, since: int | None = None) -> list[tuple[str, int, int]]:
        """(type, step of the alert, last step its condition held) for each incident
        whose condition held at `since` or later (every incident when None)."""
        return [
            (detector.type, alerted_at, last_seen)
            for detector in self.detectors
            for alerted_at, last_seen in detector.extents()
            if since is None or last_seen >= since
        ]

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
