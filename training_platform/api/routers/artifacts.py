"""`/api/jobs/{job_id}/artifacts`: profiling traces and tables, listed and downloaded."""

from __future__ import annotations

import mimetypes
import posixpath
from collections.abc import Iterator

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from training_platform.api.deps import KnownJobId, SessionDep, SettingsDep
from training_platform.api.schemas import ErrorOut
from training_platform.core.artifacts import list_artifacts, open_artifact, step_of
from training_platform.core.jobs import get_job, make_reader
from training_platform.core.metrics_reader import MetricsReader
from training_platform.settings import Settings

router = APIRouter(prefix="/jobs/{job_id}/artifacts", tags=["artifacts"])


class ArtifactOut(BaseModel):
    path: str = Field(description="Relative to the job's profiles folder; use it to download.")
    size: int
    modified: float
    step: int | None = Field(description="The training step of a `step_N/` profile, else null.")


class ProfileRunOut(BaseModel):
    name: str = Field(examples=["step_10"])
    step: int
    files: list[ArtifactOut]


class ArtifactListOut(BaseModel):
    job_id: str
    root: str = Field(description="The profiles folder next to the metrics file.")
    profiles: list[ProfileRunOut] = Field(description="torch.profiler runs, one per step.")
    files: list[ArtifactOut] = Field(description="Every file, profiles included.")
    truncated: bool = Field(description="True when the listing was cut at 10,000 files.")


def _reader(session: Session, settings: Settings, job_id: str) -> MetricsReader:
    return make_reader(get_job(session, job_id), settings)


@router.get(
    "",
    response_model=ArtifactListOut,
    summary="List profiling artifacts",
    responses={404: {"model": ErrorOut}, 503: {"model": ErrorOut}},
)
def list_artifacts_route(
    job_id: KnownJobId, session: SessionDep, settings: SettingsDep
) -> ArtifactListOut:
    """Files under `{job_id}_profiles/` next to the job's metrics file (local or SSH).

    Profiles taken by torch.profiler on chosen steps sit in `step_N/`
    (`trace.json` for Perfetto / chrome://tracing, `op_stats.csv`); run-wide
    summaries such as `stage_times.json` sit at the top.
    """
    reader = _reader(session, settings, job_id)
    try:
        listing = list_artifacts(reader)
    finally:
        reader.close()
    files = [
        ArtifactOut(path=f.path, size=f.size, modified=f.modified, step=step_of(f.path))
        for f in listing.files
    ]
    runs: dict[str, ProfileRunOut] = {}
    for item in files:
        if item.step is not None:
            name = item.path.split("/", 1)[0]
            runs.setdefault(name, ProfileRunOut(name=name, step=item.step, files=[]))
            runs[name].files.append(item)
    return ArtifactListOut(
        job_id=job_id,
        root=listing.root,
        profiles=sorted(runs.values(), key=lambda run: run.step),
        files=files,
        truncated=listing.truncated,
    )


@router.get(
    "/{path:path}",
    summary="Download one artifact",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"},
        404: {"model": ErrorOut, "description": "Unknown job or file"},
        422: {"model": ErrorOut, "description": "A path that would leave the profiles folder"},
    },
)
def download_artifact(
    job_id: KnownJobId,
    session: SessionDep,
    settings: SettingsDep,
    path: str = Path(description="Relative path as listed, e.g. step_10/trace.json."),
) -> StreamingResponse:
    """Stream one file. Paths with `..`, absolute paths and symlinks are refused."""
    reader = _reader(session, settings, job_id)
    try:
        size, chunks = open_artifact(reader, path)
    except BaseException:
        reader.close()
        raise

    def stream() -> Iterator[bytes]:
        try:
            yield from chunks
        finally:
            reader.close()

    media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    name = posixpath.basename(path).replace('"', "")
    return StreamingResponse(
        stream(),
        media_type=media_type,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{name}"',
        },
    )
