"""Reading metric history and anomalies back out (REST, playback, backfill)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from training_platform.callbacks.detectors.findings import SEVERITY_RANK
from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import Anomaly, TrainingMetric


def list_metrics(
    session: Session,
    *,
    job_id: str,
    start_step: int | None = None,
    end_step: int | None = None,
    limit: int | None = None,
    nonfinite_as_strings: bool = False,
) -> list[dict[str, Any]]:
    """Records of a job in step order, `start_step` and `end_step` inclusive."""
    query = select(TrainingMetric).where(TrainingMetric.job_id == job_id)
    if start_step is not None:
        query = query.where(TrainingMetric.step >= start_step)
    if end_step is not None:
        query = query.where(TrainingMetric.step <= end_step)
    query = query.order_by(TrainingMetric.step)
    if limit is not None:
        query = query.limit(limit)
    return [
        row_to_record(row, nonfinite_as_strings=nonfinite_as_strings)
        for row in session.scalars(query)
    ]


def list_anomalies(
    session: Session,
    *,
    job_id: str,
    start_step: int | None = None,
    end_step: int | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[Anomaly]:
    """The stored rows, one per (step, type, source), in step order."""
    query = select(Anomaly).where(Anomaly.job_id == job_id)
    if start_step is not None:
        query = query.where(Anomaly.step >= start_step)
    if end_step is not None:
        query = query.where(Anomaly.step <= end_step)
    if source is not None:
        query = query.where(Anomaly.source == source)
    query = query.order_by(Anomaly.step, Anomaly.id)
    if limit is not None:
        query = query.limit(limit)
    return list(session.scalars(query))


@dataclass(frozen=True)
class AnomalyPage:
    rows: list[Anomaly]
    next_start_step: int | None  # where the next page starts; None: nothing remains
    truncated: bool  # one step alone had more than `limit` rows: the rest of it is left out


def anomaly_page(
    session: Session,
    *,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    source: str | None,
    limit: int,
) -> AnomalyPage:
    """At most `limit` stored rows, whole steps only, so incidents never split across pages."""
    rows = list_anomalies(
        session,
        job_id=job_id,
        start_step=start_step,
        end_step=end_step,
        source=source,
        limit=limit + 1,
    )
    if len(rows) <= limit:
        return AnomalyPage(rows, None, False)
    next_step = rows[limit].step
    whole = [row for row in rows[:limit] if row.step != next_step]
    if whole:
        return AnomalyPage(whole, next_step, False)
    # One step has more rows than the page holds (a tiny `limit`): serve what
    # fits and move on, saying so, rather than answering the same page forever.
    return AnomalyPage(rows[:limit], next_step + 1, True)


# Sources in the order an incident names them; the callback's comes first.
SOURCE_ORDER: Final = ("callback", "platform", "samples")
ANOMALY_FIELDS: Final = ("step", "type", "severity", "message", "source", "created_at", "evidence")


def anomaly_row(row: Anomaly) -> dict[str, Any]:
    """One stored row as the API shows it, `sources` naming its one source."""
    data = {name: getattr(row, name) for name in ANOMALY_FIELDS}
    data["sources"] = [row.source]
    return data


def merge_incidents(anomalies: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One incident per (step, type), in first-seen order, from per-source findings.

    The trainer's callback and the platform run the same detectors, so most
    events are found twice. An incident keeps the highest severity, the
    callback's message (it knows the trainer's context; else the longest),
    the earliest `created_at`, and names every source in `sources`; `source`
    stays (the shape of docs/contract.md) as the first of them.
    """
    incidents: dict[tuple[int, str], dict[str, Any]] = {}
    for anomaly in anomalies:
        key = (anomaly["step"], anomaly["type"])
        sources = anomaly.get("sources") or [anomaly["source"]]
        incident = incidents.get(key)
        if incident is None:
            incident = {name: anomaly.get(name) for name in ANOMALY_FIELDS}
            incident["sources"] = list(sources)
            incidents[key] = incident
            continue
        _fold(incident, anomaly, sources)
    for incident in incidents.values():
        incident["sources"].sort(key=_source_rank)
        incident["source"] = incident["sources"][0]
    return list(incidents.values())


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
    incident["sources"] += [source for source in sources if source not in incident["sources"]]


def _severity_rank(severity: str) -> int:
    return SEVERITY_RANK.get(severity, SEVERITY_RANK["warning"])


def _source_rank(source: str) -> int:
    return SOURCE_ORDER.index(source) if source in SOURCE_ORDER else len(SOURCE_ORDER)
