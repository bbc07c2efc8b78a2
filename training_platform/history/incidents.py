"""Incidents from stored anomaly rows: merged across sources, spans, episodes.

A detector alerts once per incident (its onset, or an escalation) and the
platform keeps on the alert's row the last step its condition held
(`anomalies.end_step`, `live/incident_extents.py`). This module turns the
rows of a page into what the API lists and the charts draw:

- one incident per (step, type): the trainer's callback and the platform run
  the same detectors, so most events are found twice;
- a span, `step` to `end_step`, and whether it may still be going on
  (`ongoing`: the run is running and the condition held recently enough,
  by the detectors' own rule, `findings.incident_quiet`);
- episodes: incidents that start together (each within `EPISODE_STEPS` of
  the previous one's onset) are parts of one episode, named by the step
  its first part started at. A KL blow-up at step 401 that collapses the
  entropy at 402 and truncates the completions at 403 is one episode of
  three parts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.findings import SEVERITY_RANK, incident_quiet
from training_platform.store.models import Anomaly

EPISODE_STEPS: Final = 10
"""Incidents whose onsets follow each other within this many steps are one episode."""

# Sources in the order an incident names them; the callback's comes first.
SOURCE_ORDER: Final = ("callback", "platform", "samples", "system")
ANOMALY_FIELDS: Final = (
    "step", "type", "severity", "message", "source", "created_at", "evidence", "end_step",
)  # fmt: skip


def anomaly_row(row: Anomaly) -> dict[str, Any]:
    """One stored row as the API shows it, `sources` naming its one source."""
    data = {name: getattr(row, name) for name in ANOMALY_FIELDS}
    data["sources"] = [row.source]
    if data["end_step"] is None:
        data["end_step"] = row.step
    return data


def merge_incidents(anomalies: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One incident per (step, type), in first-seen order, from per-source findings.

    An incident keeps the highest severity, the callback's message (it knows
    the trainer's context; else the longest), the earliest `created_at`, the
    furthest `end_step`, and names every source in `sources`; `source` stays
    (the shape of docs/contract.md) as the first of them.
    """
    incidents: dict[tuple[int, str], dict[str, Any]] = {}
    for anomaly in anomalies:
        key = (anomaly["step"], anomaly["type"])
        sources = anomaly.get("sources") or [anomaly["source"]]
        incident = incidents.get(key)
        if incident is None:
            incident = {name: anomaly.get(name) for name in ANOMALY_FIELDS}
            incident["sources"] = list(sources)
            if incident["end_step"] is None:
                incident["end_step"] = incident["step"]
            incidents[key] = incident
            continue
        _fold(incident, anomaly, sources)
    for incident in incidents.values():
        incident["sources"].sort(key=_source_rank)
        incident["source"] = incident["sources"][0]
    return list(incidents.values())


def mark_episodes(incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set `episode` on each incident (in place, listed in step order): the onset
    step of the first part of the episode it belongs to."""
    episode: int | None = None
    previous: int | None = None
    for incident in sorted(incidents, key=lambda incident: incident["step"]):
        step = incident["step"]
        if previous is None or step - previous > EPISODE_STEPS:
            episode = step
        incident["episode"] = episode
        previous = step
    return incidents


def mark_ongoing(
    incidents: list[dict[str, Any]], *, running: bool, latest_step: int | None
) -> list[dict[str, Any]]:
    """Set `ongoing` on each incident (in place): the run is running and its
    condition held recently enough that the detectors still hold it open."""
    config = AnomalyConfig()
    for incident in incidents:
        end = incident.get("end_step")
        if end is None:
            end = incident["step"]
        quiet = incident_quiet(incident["step"], end, config.cooldown, config.cooldown_max)
        incident["ongoing"] = bool(
            running and latest_step is not None and latest_step - end <= quiet
        )
    return incidents


def _fold(incident: dict[str, Any], anomaly: dict[str, Any], sources: list[str]) -> None:
    if _severity_rank(anomaly["severity"]) > _severity_rank(incident["severity"]):
        incident["severity"] = anomaly["severity"]
    message = anomaly.get("message") or ""
    current = incident.get("message") or ""
    from_callback = "callback" in sources and "callback" not in incident["sources"]
    longer_without_callback = "callback" not in incident["sources"] and len(message) > len(current)
    if message and (not current or from_callback or longer_without_callback):
        incident["message"] = message
    created = anomaly.get("created_at")
    if created is not None and (incident["created_at"] is None or created < incident["created_at"]):
        incident["created_at"] = created
    end = anomaly.get("end_step")
    if end is not None and end > incident["end_step"]:
        incident["end_step"] = end
    incident["sources"] += [source for source in sources if source not in incident["sources"]]


def _severity_rank(severity: str) -> int:
    return SEVERITY_RANK.get(severity, SEVERITY_RANK["warning"])


def _source_rank(source: str) -> int:
    return SOURCE_ORDER.index(source) if source in SOURCE_ORDER else len(SOURCE_ORDER)
