"""The detectors' shared vocabulary: findings, anomalies, severities and the
`Detector` base (one alert per incident), below every detector.

Each `Detector.evaluate` reads one record (docs/contract.md §2's nested shape)
and says whether its condition holds now; `Detector.check` turns that into at
most one alert per incident. Thresholds come from `config.AnomalyConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from training_platform.callbacks.wire.schema import NONFINITE_VALUES

if TYPE_CHECKING:
    from training_platform.callbacks.detectors.config import AnomalyConfig

Anomaly = dict[str, str]

SEVERITY_RANK: Final = {"info": 0, "warning": 1, "critical": 2}


def number(record: Mapping[str, Any], group: str, name: str) -> float | None:
    """The value of `group.name` as a float, or None when missing or not a number."""
    values = record.get(group)
    # `type(...) is dict` first: an ABC isinstance check is slow (docs/benchmarks.md, Callback).
    if type(values) is not dict and not isinstance(values, Mapping):
        return None
    value = values.get(name)
    return value if type(value) is float else as_float(value)


def as_float(value: Any) -> float | None:
    kind = type(value)
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
    if kind is str:
        return NONFINITE_VALUES.get(value)
    return None


def extra_number(record: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    extra = record.get("extra")
    if type(extra) is not dict and not isinstance(extra, Mapping):
        return None
    for key in keys:
        value = extra.get(key)
        if value is None:
            continue  # most keys of the list are some other trainer's
        if type(value) is float:
            return value
        value = as_float(value)
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


def incident_quiet(opened_at: int, last_seen: int, cooldown: int, longest: int) -> int:
    """How long an incident's condition must stay clear before the incident ends.

    Twice as long as the incident has lasted so far, at least `cooldown` and
    at most `longest`: a condition that keeps coming back over hundreds of
    steps (gradient spikes every 40 steps once a policy has blown up, an
    entropy hovering around its threshold) is one incident, not a new one
    whenever a rolling baseline forgets the fault; a one-off ends after
    `cooldown`. A `cooldown` of 0 or less turns incidents off (every finding
    is an alert). The same rule ends incidents on both sides, and in the
    API's view of stored rows (`history/incidents.py`).
    """
    if cooldown <= 0:
        return cooldown
    return max(cooldown, min(2 * (last_seen - opened_at), longest))


class _Incident:
    __slots__ = ("alerted_at", "distance", "last_seen", "opened_at", "severity")

    def __init__(self, step: int, severity: int, distance: float | None) -> None:
        self.opened_at = self.last_seen = self.alerted_at = step
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

    def ongoing(self, step: int, subject: str = "") -> bool:
        """Whether `subject`'s incident is still open at `step` (its condition was
        seen recently enough, by `incident_quiet`)."""
        incident = self._incidents.get(subject)
        return incident is not None and self._continues(incident, step)

    def extents(self) -> list[tuple[int, int]]:
        """(step of the latest alert, last step its condition was seen) per incident,
        open or ended: how far each stored alert row reaches."""
        return [(incident.alerted_at, incident.last_seen) for incident in self._incidents.values()]

    def _continues(self, incident: _Incident, step: int) -> bool:
        config = self.config
        quiet = incident_quiet(
            incident.opened_at, incident.last_seen, config.cooldown, config.cooldown_max
        )
        return 0 <= step - incident.last_seen <= quiet

    def alert(self, step: int, found: Finding | list[Finding]) -> Anomaly | None:
        """The alert `found` (this step's findings) raises, else None.

        `AnomalyMonitor` calls `evaluate`, and this only when something was
        found: the quiet path of a record is one call per detector.

        An incident (per subject) lasts while its condition keeps recurring
        within `incident_quiet` steps (`cooldown`, growing with the incident's
        age): a value hovering around a threshold is one incident, not one
        alert per crossing. It alerts again when it gets
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
        if incident is None or not self._continues(incident, step):
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
        incident.alerted_at = step
        if finding.distance is not None:
            incident.distance = finding.distance
        return finding.severity, message
