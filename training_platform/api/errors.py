"""The one table from domain errors to HTTP statuses, and the handlers using it.

Every error body has the same shape: ``{"detail": ..., "code": "..."}``.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from training_platform.errors import (
    ArtifactNotFoundError,
    HostKeyError,
    InvalidJobIdError,
    InvalidParameterError,
    InvalidSourceError,
    JobConflictError,
    JobNotFoundError,
    MetricsSourceError,
    MissingExtraError,
    PlatformError,
    RecordError,
    SourceRefusedError,
    StorageError,
)
from training_platform.store.storage_errors import storage_error

logger = logging.getLogger(__name__)

# Most specific first: HostKeyError and SourceRefusedError are also MetricsSourceErrors.
ERROR_STATUS: list[tuple[type[PlatformError], int, str]] = [
    (JobNotFoundError, 404, "job_not_found"),
    (ArtifactNotFoundError, 404, "artifact_not_found"),
    (InvalidJobIdError, 422, "invalid_job_id"),
    (InvalidSourceError, 422, "invalid_source"),
    (InvalidParameterError, 422, "invalid_parameter"),
    (RecordError, 422, "invalid_record"),
    (JobConflictError, 409, "job_conflict"),
    (SourceRefusedError, 409, "source_refused"),
    (HostKeyError, 502, "ssh_host_key_rejected"),
    (MetricsSourceError, 503, "metrics_source_unavailable"),
    (StorageError, 503, "storage_unavailable"),
    (MissingExtraError, 501, "extra_not_installed"),
]

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
}


def status_for(exc: PlatformError) -> tuple[int, str]:
    for error_type, status, code in ERROR_STATUS:
        if isinstance(exc, error_type):
            return status, code
    return 500, "internal_error"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PlatformError)
    async def _platform_error(_request: Request, exc: PlatformError) -> JSONResponse:
        status, code = status_for(exc)
        if status >= 500 and status not in (501, 502, 503):
            logger.error("unmapped platform error: %r", exc)
        return JSONResponse({"detail": str(exc), "code": code}, status_code=status)

    @app.exception_handler(OperationalError)
    async def _storage_error(_request: Request, exc: OperationalError) -> JSONResponse:
        # A full disk or a database gone away is a condition, not a bug: 503, so
        # clients try again (before: a 500 from any route that wrote, syncs first).
        error = storage_error(exc)
        if error is None:  # bad SQL, not a condition of the storage: a bug, a 500
            raise exc
        logger.warning("storage unavailable: %s", error)
        status, code = status_for(error)
        return JSONResponse({"detail": str(error), "code": code}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {key: error[key] for key in ("loc", "msg", "type") if key in error}
            for error in exc.errors()
        ]
        return JSONResponse({"detail": errors, "code": "validation_error"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return JSONResponse(
            {"detail": exc.detail, "code": code},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )
