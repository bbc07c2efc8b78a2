"""The client's source read straight from a database (`Client(database_url=...)`).

The same answers as the server's, through the same code (the export writers,
the downsampled history), without a server: it needs the `server` install
(SQLAlchemy and the drivers), and says so when it is missing. This is the
one module of the client that imports the platform, and only when used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from training_platform.client.errors import (
    ClientError,
    InvalidParameterError,
    MissingExtraError,
    RunNotFoundError,
)
from training_platform.client.frames import installed

_NEEDED = ("sqlalchemy", "pydantic")  # the store imports both


class LocalSource:
    def __init__(self, database_url: str) -> None:
        missing = [module for module in _NEEDED if not installed(module)]
        if missing:
            raise MissingExtraError(
                f"reading a database directly needs {', '.join(missing)}: "
                "pip install 'training-platform[server]' (or give Client a server's url)"
            )
        from training_platform.store.database import make_engine, make_session_factory

        self.engine = make_engine(database_url)
        self.sessions = make_session_factory(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        from training_platform import errors

        try:
            yield
        except errors.JobNotFoundError as exc:
            raise RunNotFoundError(f"{what}: {exc}", code="job_not_found") from None
        except (errors.InvalidParameterError, errors.InvalidJobIdError) as exc:
            raise InvalidParameterError(f"{what}: {exc}", code="invalid_parameter") from None
        except errors.MissingExtraError as exc:
            raise MissingExtraError(f"{what}: {exc}", code="extra_not_installed") from None
        except errors.PlatformError as exc:
            raise ClientError(f"{what}: {exc}") from None

    def _known(self, job_id: str) -> None:
        from training_platform.store.jobs import get_job

        with self.sessions() as session:
            get_job(session, job_id)

    def runs(
        self, *, project: str | None, tags: Sequence[str], statuses: Sequence[str]
    ) -> list[dict[str, Any]]:
        from training_platform.store.jobs import page_jobs

        with self._errors("the runs list"), self.sessions() as session:
            summaries, _ = page_jobs(
                session,
                limit=2**31,
                project=project,
                tags=tags,
                statuses=statuses,
            )
            return [_job_dict(summary) for summary in summaries]

    def run(self, job_id: str) -> dict[str, Any]:
        from training_platform.store.jobs import summarize_jobs

        with self._errors(f"run {job_id!r}"), self.sessions() as session:
            self._known(job_id)
            return _job_dict(summarize_jobs(session, job_id)[0])

    def export(
        self,
        job_id: str,
        kind: str,
        fmt: str,
        *,
        fields: Sequence[str] | None,
        start_step: int | None,
        end_step: int | None,
    ) -> bytes:
        from training_platform.history.export.files import start_export

        with self._errors(f"the {kind} of run {job_id!r}"):
            self._known(job_id)
            export = start_export(
                self.sessions,
                job_id=job_id,
                kind=kind,  # type: ignore[arg-type]
                fmt=fmt,  # type: ignore[arg-type]
                start_step=start_step,
                end_step=end_step,
                fields=fields,
            )
            return b"".join(export.body)

    def downsampled(
        self,
        job_id: str,
        *,
        fields: Sequence[str] | None,
        start_step: int | None,
        end_step: int | None,
        max_points: int,
    ) -> dict[str, Any]:
        from training_platform.history.field_names import resolve_fields
        from training_platform.history.series.answer import downsampled_history

        names = resolve_fields(fields)  # flat names (`kl_max`), answered as asked
        with self._errors(f"the history of run {job_id!r}"):
            self._known(job_id)
            with self.sessions() as session:
                body = downsampled_history(
                    session,
                    job_id=job_id,
                    start_step=start_step,
                    end_step=end_step,
                    max_points=max_points,
                    fields=names.read,
                )
        return names.rename_answer(body)


def _job_dict(summary: Any) -> dict[str, Any]:
    """The fields of `GET /api/jobs/{id}` the client reads (the rest are the server's)."""
    from training_platform.store.run_meta import shown_name, shown_tags

    job, run = summary.job, summary.run
    return {
        "job_id": job.job_id,
        "status": job.status,
        "current_step": job.current_step,
        "total_steps": job.total_steps,
        "metrics_count": summary.metrics_count,
        "latest_step": summary.latest_step,
        "anomaly_count": summary.anomaly_count,
        "health": summary.health,
        "started_at": job.started_at,
        "updated_at": job.updated_at,
        "created_at": job.created_at,
        "project": run.project if run is not None else None,
        "name": shown_name(job, run),
        "tags": shown_tags(job, run),
        "notes": job.notes,
        "config": run.config if run is not None else None,
    }
