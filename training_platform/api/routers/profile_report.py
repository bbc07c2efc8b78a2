"""`GET /api/jobs/{job_id}/profile/report`: the profile report of any job, local or SSH.

The files are read through the artifact reader (`ingest/artifacts.py`): the
same symlink and path rules as the downloads, the same SSH connection
settings. A trace larger than `MAX_TRACE_BYTES` is not read (the report says
it skipped it), and the others are streamed, so the server never holds a
large trace in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from training_platform.api.deps import KnownJobId, SessionDep, SettingsDep
from training_platform.api.schemas import ErrorOut
from training_platform.callbacks.stats import finite_or_none
from training_platform.errors import ArtifactNotFoundError, InvalidParameterError
from training_platform.ingest.artifacts import MAX_FILES, list_artifacts, open_artifact
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.registry import make_reader
from training_platform.profile_report.report import build_report
from training_platform.profile_report.source import ProfileFile
from training_platform.store.jobs import get_job

router = APIRouter(prefix="/jobs/{job_id}/profile", tags=["artifacts"])

MAX_TRACE_BYTES = 64 << 20  # larger traces are skipped (and said so): open them in Perfetto
MAX_PROFILES = 8


class ArtifactProfileSource:
    """A job's `{job_id}_profiles/` through the platform's artifact reader (local or SSH)."""

    def __init__(self, reader: MetricsReader) -> None:
        self.reader = reader
        self.label = f"{reader.job_id}_profiles"
        self.truncated = False

    def files(self) -> list[ProfileFile]:
        listing = list_artifacts(self.reader, MAX_FILES)
        self.truncated = listing.truncated
        return [ProfileFile(file.path, file.size) for file in listing.files]

    def open(self, path: str) -> Iterator[bytes]:
        try:
            # One SSH connection for the whole report (the route closes the
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
def get_profile_report(
    job_id: KnownJobId, session: SessionDep, settings: SettingsDep
) -> JSONResponse:
    """Checks, stage breakdown, throughput, memory, top operators and recommendations.

    Built from `{job_id}_profiles/` as `training-platform profile-report` builds
    it; a job without a profile answers 200 with `ok: false` and the problem.
    Traces over 64 MiB are skipped (named in `notes`); at most the newest 8
    `step_N/` profiles are read.
    """
    try:
        reader = make_reader(get_job(session, job_id), settings)
    finally:
        session.close()  # an SSH read can take a while: give the connection back first
    try:
        source = ArtifactProfileSource(reader)
        report = build_report(source, max_trace_bytes=MAX_TRACE_BYTES, max_profiles=MAX_PROFILES)
    finally:
        reader.close()
    if source.truncated:
        report["notes"].append(f"the profile has more than {MAX_FILES:,} files: listing cut")
    report["profile"] = source.label
    return JSONResponse(finite_or_none(report))
