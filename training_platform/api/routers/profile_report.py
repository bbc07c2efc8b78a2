"""`GET /api/jobs/{job_id}/profile/report`: the profile report of any job, local or SSH.

The files are read through the artifact reader (`ingest/artifacts.py`): the
same symlink and path rules as the downloads, the same SSH connection
settings. A trace larger than `MAX_TRACE_BYTES` is not read (the report says
it skipped it), and the others are streamed, so the server never holds a
large trace in memory.

A report reads every trace of the profile (up to 8 x 64 MiB), so it goes
through the app's `ReportCache` (`profile_report/report_cache.py`): the
profile is listed first (path, size and mtime of each file, one SFTP walk
for an SSH job), and an unchanged profile answers from memory; concurrent
requests share one computation; at most `PLATFORM_PROFILE_REPORTS_AT_ONCE`
run at once; and a computation whose clients have all gone stops.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from training_platform.api.deps import KnownJobId, SessionDep, SettingsDep
from training_platform.api.schemas import ErrorOut
from training_platform.callbacks.profiling.stats import finite_or_none
from training_platform.errors import ArtifactNotFoundError, InvalidParameterError
from training_platform.ingest.artifacts import MAX_FILES, list_artifacts, open_artifact
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.registry import make_reader
from training_platform.ingest.ssh_reader import SSHMetricsReader
from training_platform.profile_report.report import TraceScans, build_report
from training_platform.profile_report.report_cache import ClientGone, ReportCache, ReportKey
from training_platform.profile_report.source import ProfileFile
from training_platform.settings import Settings
from training_platform.store.jobs import get_job

router = APIRouter(prefix="/jobs/{job_id}/profile", tags=["artifacts"])

MAX_TRACE_BYTES = 64 << 20  # larger traces are skipped (and said so): open them in Perfetto
MAX_PROFILES = 8
CLIENT_CLOSED_REQUEST = 499  # as nginx logs it: nobody reads this answer


class ArtifactProfileSource:
    """A job's `{job_id}_profiles/` through the platform's artifact reader (local or SSH)."""

    def __init__(self, reader: MetricsReader) -> None:
        self.reader = reader
        self.label = f"{reader.job_id}_profiles"
        self.truncated = False

    def files(self) -> list[ProfileFile]:
        listing = list_artifacts(self.reader, MAX_FILES)
        self.truncated = listing.truncated
        return [ProfileFile(file.path, file.size, file.modified) for file in listing.files]

    def open(self, path: str) -> Iterator[bytes]:
        try:
            # One SSH connection for the whole report (the job closes the
            # reader), not one per file.
            artifact = open_artifact(self.reader, path, keep_reader=True)
        except (ArtifactNotFoundError, InvalidParameterError) as exc:
            # Gone since the listing, or refused: a problem of this file, not of the request.
            raise OSError(str(exc)) from None
        return _stream(artifact)


def _stream(artifact: Any) -> Iterator[bytes]:
    try:
        yield from artifact
    finally:
        artifact.close()


class _ReportJob:
    """One report of a listed profile, as the cache runs it: JSON bytes, the reader closed."""

    def __init__(
        self, source: ArtifactProfileSource, files: list[ProfileFile], scans: TraceScans
    ) -> None:
        self.source = source
        self.files = files
        self.scans = scans

    def run(self, stop: threading.Event) -> bytes:
        report = build_report(
            self.source,
            max_trace_bytes=MAX_TRACE_BYTES,
            max_profiles=MAX_PROFILES,
            files=self.files,
            should_stop=stop.is_set,
            scans=self.scans,
        )
        if self.source.truncated:
            report["notes"].append(f"the profile has more than {MAX_FILES:,} files: listing cut")
        report["profile"] = self.source.label
        # Encoded once: every later answer is these bytes (never a shared dict to mutate).
        text = json.dumps(finite_or_none(report), ensure_ascii=False, separators=(",", ":"))
        return text.encode()

    def close(self) -> None:
        self.source.reader.close()


def _report_cache(request: Request, settings: Settings) -> ReportCache[bytes]:
    """The app's cache, made on first use (on the event loop: no race between two requests)."""
    state = request.app.state
    cache: ReportCache[bytes] | None = getattr(state, "profile_reports", None)
    if cache is None:
        cache = state.profile_reports = ReportCache(max_running=settings.profile_reports_at_once)
    return cache


def _open_reader(session: Session, job_id: str, settings: Settings) -> MetricsReader:
    try:
        return make_reader(get_job(session, job_id), settings)
    finally:
        session.close()  # an SSH read can take a while: give the connection back first


def _list(source: ArtifactProfileSource) -> list[ProfileFile]:
    try:
        return source.files()
    except BaseException:
        source.reader.close()
        raise


def _where(reader: MetricsReader) -> tuple[str, ...]:
    """The profile's identity: the job and where its files are (host and folder)."""
    if isinstance(reader, SSHMetricsReader):
        return (reader.job_id, "ssh", reader.target.address, reader.remote_dir)
    return (reader.job_id, "local", str(getattr(reader, "directory", "")))


@router.get(
    "/report",
    summary="Profile report",
    response_class=JSONResponse,
    responses={
        200: {"description": "The report (docs/profiling.md, `profile-report`)"},
        404: {"model": ErrorOut},
        503: {"model": ErrorOut},
    },
)
async def get_profile_report(
    job_id: KnownJobId, request: Request, session: SessionDep, settings: SettingsDep
) -> Response:
    """Checks, stage breakdown, throughput, memory, top operators and recommendations.

    Built from `{job_id}_profiles/` as `training-platform profile-report` builds
    it; a job without a profile answers 200 with `ok: false` and the problem.
    Traces over 64 MiB are skipped (named in `notes`); at most the newest 8
    `step_N/` profiles are read. The report is kept until a file of the
    profile changes (`generated_at` says when it was built).
    """
    reader = await run_in_threadpool(_open_reader, session, job_id, settings)
    source = ArtifactProfileSource(reader)
    files = await run_in_threadpool(_list, source)
    key = ReportKey(
        profile=_where(reader),
        files=tuple((file.path, file.size, file.modified) for file in files),
        options=(MAX_TRACE_BYTES, MAX_PROFILES),
    )
    cache = _report_cache(request, settings)
    # A trace scanned under another cap is another scan: the cap is part of its key.
    scans = cache.scans.for_profile((key.profile, MAX_TRACE_BYTES))
    try:
        body = await cache.get(key, _ReportJob(source, files, scans), request.is_disconnected)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return Response(body, media_type="application/json")
