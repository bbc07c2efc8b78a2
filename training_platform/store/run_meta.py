"""What is known about a run besides its numbers: its run file, and what the dashboard set.

`run_files` holds the run file's last good version, `jobs.name/tags/notes`
what `PATCH /api/jobs/{job_id}` set, `job_tags` both origins' tags for the
`?tag=` filter. Helpers only add/flush: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from sqlalchemy import ColumnElement, delete, exists, func, insert, or_, select
from sqlalchemy.orm import Session

from training_platform.store.models import Job, JobTag, RunFile
from training_platform.store.storable import storable_text

RUN_TAGS: Final = "run"
USER_TAGS: Final = "user"
MAX_TAGS: Final = 64
TAG_CHARS: Final = 64


def clean_tags(tags: Iterable[Any]) -> list[str]:
    """Tags as stored: text, trimmed, without commas (they separate `?tag=` lists
    in links), at most `TAG_CHARS` each, distinct, in order, at most `MAX_TAGS`."""
    out: dict[str, None] = {}
    for tag in tags:
        if not isinstance(tag, str):
            continue
        text = storable_text(tag.replace(",", " ").strip(), TAG_CHARS).strip()
        if text:
            out.setdefault(text)
        if len(out) == MAX_TAGS:
            break
    return list(out)


def replace_tags(session: Session, job_id: str, origin: str, tags: Sequence[str]) -> None:
    """Make `tags` the job's tags of `origin` (``run`` or ``user``)."""
    session.execute(delete(JobTag).where(JobTag.job_id == job_id, JobTag.origin == origin))
    if tags:
        session.execute(
            insert(JobTag), [{"job_id": job_id, "origin": origin, "tag": tag} for tag in tags]
        )


def shown_tags(job: Job, run: RunFile | None) -> list[str]:
    if job.tags is not None:
        return list(job.tags)
    return list(run.tags or []) if run is not None else []


def shown_name(job: Job, run: RunFile | None) -> str | None:
    return job.name if job.name is not None else (run.name if run is not None else None)


def run_filters(
    *, project: str | None, tags: Sequence[str], query: str | None
) -> list[ColumnElement[bool]]:
    """WHERE clauses over `jobs` for `?project=`, `?tag=` (each one) and `?q=`."""
    where: list[ColumnElement[bool]] = []
    if project is not None:
        where.append(exists().where(RunFile.job_id == Job.job_id, RunFile.project == project))
    for tag in tags:
        # The shown tags only: the user's when set, else the run file's.
        where.append(
            or_(
                Job.tags.is_not(None)
                & exists().where(
                    JobTag.job_id == Job.job_id, JobTag.origin == USER_TAGS, JobTag.tag == tag
                ),
                Job.tags.is_(None)
                & exists().where(
                    JobTag.job_id == Job.job_id, JobTag.origin == RUN_TAGS, JobTag.tag == tag
                ),
            )
        )
    if query is not None:
        pattern = query.lower()
        run_name = select(RunFile.name).where(RunFile.job_id == Job.job_id).scalar_subquery()
        name = func.coalesce(Job.name, run_name, "")
        where.append(
            or_(
                func.lower(Job.job_id).contains(pattern, autoescape=True),
                func.lower(name).contains(pattern, autoescape=True),
            )
        )
    return where


def run_files_of(session: Session, job_ids: Sequence[str]) -> dict[str, RunFile]:
    if not job_ids:
        return {}
    rows = session.scalars(select(RunFile).where(RunFile.job_id.in_(list(job_ids))))
    return {row.job_id: row for row in rows}
