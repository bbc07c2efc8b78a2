"""`/api/jobs/{job_id}/artifacts`: profiling traces and tables, listed and downloaded."""

from __future__ import annotations

import mimetypes
import posixpath
from typing import Annotated, Any
from urllib.parse import quote

import anyio
from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from training_platform.api.deps import KnownJobId, SessionDep, SettingsDep
from training_platform.api.schemas import ErrorOut
from training_platform.ingest.artifacts import (
    MAX_FILES,
    ArtifactStream,
    list_artifacts,
    open_artifact,
    step_of,
)
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.registry import make_reader
from training_platform.settings import Settings
from training_platform.store.jobs import get_job

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
    truncated: bool = Field(
        description="True when the listing was cut at `limit` files (10,000 at most)."
    )


DEFAULT_LISTED = 1_000


def _reader(session: Session, settings: Settings, job_id: str) -> MetricsReader:
    """The job's reader; the session is closed here, its connection back in the pool.

    What follows (an SSH listing, a download to a client that reads slowly or
    never) can take any time: holding a pooled connection through it let a
    few stalled downloads starve every other route.
    """
    try:
        return make_reader(get_job(session, job_id), settings)
    finally:
        session.close()


@router.get(
    "",
    response_model=ArtifactListOut,
    summary="List profiling artifacts",
    responses={404: {"model": ErrorOut}, 503: {"model": ErrorOut}},
)
def list_artifacts_route(
    job_id: KnownJobId,
    session: SessionDep,
    settings: SettingsDep,
    limit: Annotated[
        int, Query(ge=1, le=MAX_FILES, description="Files listed at most; more: `truncated`.")
    ] = DEFAULT_LISTED,
) -> ArtifactListOut:
    """Files under `{job_id}_profiles/` next to the job's metrics file (local or SSH).

    Profiles taken by torch.profiler on chosen steps sit in `step_N/`
    (`trace.json` for Perfetto / chrome://tracing, `op_stats.csv`); run-wide
    summaries such as `stage_times.json` sit at the top. At most `limit` files
    (10,000 whatever is asked): past it the walk stops, `truncated: true`.
    """
    reader = _reader(session, settings, job_id)
    try:
        listing = list_artifacts(reader, limit)
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
        404: {"model": ErrorOut, "description": "Unknown job or file (or not a regular file)"},
        422: {"model": ErrorOut, "description": "A path that would leave the profiles folder"},
    },
)
def download_artifact(
    job_id: KnownJobId,
    session: SessionDep,
    settings: SettingsDep,
    path: str = Path(description="Relative path as listed, e.g. step_10/trace.json."),
) -> StreamingResponse:
    """Stream one regular file. `..`, absolute paths, symlinks and FIFOs are refused."""
    reader = _reader(session, settings, job_id)
    try:
        artifact = open_artifact(reader, path)
    except BaseException:
        reader.close()
        raise

    media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    return _ArtifactResponse(
        artifact,
        media_type=media_type,
        headers={
            "Content-Length": str(artifact.size),
            "Content-Disposition": content_disposition(posixpath.basename(path)),
        },
    )


class _ArtifactResponse(StreamingResponse):
    """Streams an artifact and closes it however the response ends.

    A client that goes away mid-download ends the response without the body
    iterator ever finishing: its own cleanup would then wait for the garbage
    collector, holding the file (or SSH connection) until it runs.
    """

    def __init__(self, artifact: ArtifactStream, **kwargs: Any) -> None:
        super().__init__(iter(artifact), **kwargs)
        self.artifact = artifact

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Shielded: a server shutting down still releases it; in a thread:
            # closing an SSH connection is network I/O.
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(self.artifact.close)


def content_disposition(name: str) -> str:
    """`attachment` with the file's name, any Unicode name included (RFC 6266 + 5987).

    Header values are Latin-1 on the wire: `filename` gets an ASCII stand-in
    for old clients, `filename*` the exact name percent-encoded as UTF-8.
    """
    fallback = "".join(char if " " <= char <= "~" and char not in '"\\%' else "_" for char in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
