"""`{job_id}_status.json` onto the job row (docs/contract.md: part of the persister's API)."""

from __future__ import annotations

import math
import time
from typing import Any, TypeGuard

from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from training_platform.callbacks.wire.schema import INT64_MAX, STATUS_VALUES
from training_platform.errors import JobNotFoundError
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.stall import StallWatch, review_stall
from training_platform.store.models import STATUS_FIELDS, Job
from training_platform.store.storable import STATUS_TEXT_CHARS, storable_text


def _finite_number(value: Any) -> TypeGuard[float]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float's range
        return False


def sync_anomaly_from_status_file(session: Session, job: Job, reader: MetricsReader) -> bool:
    """Copy status, steps and the anomaly flag from `{job_id}_status.json` onto the job.

    Returns True when anything changed. A missing or unreadable status file
    changes nothing (the reader logs why). A field no column can hold (a step
    beyond BIGINT) is ignored, text is made storable (see `store/storable.py`):
    the other fields still update.
    """
    status = reader.read_status()
    if not status:
        return False
    changes: dict[str, Any] = {}
    value = status.get("status")
    if isinstance(value, str) and value in STATUS_VALUES:
        changes["status"] = value
    for key in ("current_step", "total_steps"):
        number = status.get(key)
        if isinstance(number, int) and not isinstance(number, bool) and 0 <= number <= INT64_MAX:
            changes[key] = number
    if isinstance(status.get("anomaly_detected"), bool):
        changes["anomaly_detected"] = status["anomaly_detected"]
    reason = status.get("anomaly_reason")
    if reason is None:
        changes["anomaly_reason"] = None
    elif isinstance(reason, str):
        changes["anomaly_reason"] = storable_text(reason, STATUS_TEXT_CHARS)
    for key in ("started_at", "updated_at"):
        number = status.get(key)
        if _finite_number(number):
            changes[key] = float(number)
    changed = False
    for key, value in changes.items():
        if getattr(job, key) != value:
            setattr(job, key, value)
            changed = True
    return changed


def sync_status(
    factory: sessionmaker[Session],
    job: Job,
    reader: MetricsReader,
    stall: StallWatch | None,
    started: bool = False,
    tool_status: str | None = None,
) -> tuple[Job, bool]:
    """Copy the status file onto `job` (as loaded by the sync service, detached), with
    the stalled verdict, and commit; returns the job and whether its status changed.

    A run logged by another tool (`job.format` not "platform") has no status
    file: `started` (this sync stored records) makes a pending one running,
    and the stall rule takes it from there; where the tool keeps a status of
    its own (MLflow), `tool_status` is it, and it wins (a running run the
    stall rule found silent stays stalled until it logs again).

    Costs no database round trip when nothing changed: the job is attached
    without a SELECT and only a change is flushed (UPDATE of the changed
    columns). Raises `JobNotFoundError` when the job was deleted meanwhile.
    """
    with factory() as session:
        job = session.merge(job, load=False)
        before = _status_fields(job)
        sync_anomaly_from_status_file(session, job, reader)
        if started and job.format != "platform" and job.status == "pending":
            job.status = "running"
            job.started_at = job.started_at or time.time()
        # The tool's own word (MLflow's run status) wins over records coming and going.
        news = _tool_news(job, tool_status)
        if news is not None:
            job.status = news
            job.started_at = job.started_at or time.time()
        if stall is not None:
            review_stall(stall, session, job)
        # Compared as a whole, not as "did the file change anything": the
        # stall review may put back what the file undid (a stalled run whose
        # file still says running).
        changed = _status_fields(job) != before
        try:
            session.commit()
        except StaleDataError as exc:  # the job was deleted meanwhile
            raise JobNotFoundError(f"job {job.job_id!r} not found") from exc
        return job, changed


def _tool_news(job: Job, tool_status: str | None) -> str | None:
    """The tool's status when it is news for `job` (a stalled run it says runs stays
    stalled: the stall rule undoes that when records come again)."""
    if tool_status is None or job.format == "platform" or tool_status == job.status:
        return None
    return None if (tool_status, job.status) == ("running", "stalled") else tool_status


def _status_fields(job: Job) -> tuple[Any, ...]:
    return tuple(getattr(job, name) for name in STATUS_FIELDS)
