"""Dependencies shared by the routers: settings, sessions, the sync service, auth."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import JOB_ID_PATTERN
from training_platform.errors import JobNotFoundError
from training_platform.ingest.sync_service import SyncService
from training_platform.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    """A session per request; routes that write commit explicitly."""
    with request.app.state.session_factory() as session:
        yield session


def get_sync_service(request: Request) -> SyncService:
    service: SyncService = request.app.state.sync_service
    return service


_bearer = HTTPBearer(auto_error=False, description="The server's PLATFORM_API_TOKEN.")


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """When an API token is configured, demand `Authorization: Bearer <token>`."""
    expected = request.app.state.settings.api_token
    if not expected:
        return
    # compare_digest: the comparison time must not leak how much of it matched.
    if credentials is None or not secrets.compare_digest(
        credentials.credentials.encode(), expected.encode()
    ):
        raise HTTPException(
            status_code=401,
            detail="missing or invalid API token",
            headers={"WWW-Authenticate": "Bearer"},
        )


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SyncServiceDep = Annotated[SyncService, Depends(get_sync_service)]
JobIdPath = Annotated[
    str,
    Path(
        pattern=JOB_ID_PATTERN.pattern,
        max_length=128,
        description="The job id (1-128 characters from A-Z a-z 0-9 . _ -).",
    ),
]


def known_job_id(job_id: JobIdPath, sync_service: SyncServiceDep) -> str:
    """The path's job id once the job is known, else 404.

    A job whose files just appeared in the metrics directory is discovered
    here rather than answered 404 until the next background round. The check
    holds no pooled connection of the request's: discovery, a sync on request
    or a download take connections of their own, and a request holding one
    across them let as many concurrent requests as the pool holds wait on
    each other until the pool's timeout (then every route answered 500).
    """
    if not sync_service.is_known(job_id):
        raise JobNotFoundError(f"job {job_id!r} not found")
    return job_id


KnownJobId = Annotated[str, Depends(known_job_id)]
