"""The client's errors: each names the job or the parameter, and maps a server's `code`."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base of every error the client raises; `code` is the server's, when it sent one."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class RunNotFoundError(ClientError, LookupError):
    """No run with that job id on the server (or in the database)."""


class InvalidParameterError(ClientError, ValueError):
    """A parameter the server refused (an unknown field, a range that ends before it starts)."""


class MissingExtraError(ClientError, ImportError):
    """An optional package is missing here or on the server; the message names the install."""


class AuthenticationError(ClientError, PermissionError):
    """The server wants a token (`Client(url, token=...)`), or refused the one given."""


class ServerUnavailableError(ClientError, ConnectionError):
    """The server could not be reached, or kept answering 5xx, after the retries."""


_BY_CODE: dict[str, type[ClientError]] = {
    "job_not_found": RunNotFoundError,
    "invalid_parameter": InvalidParameterError,
    "validation_error": InvalidParameterError,
    "invalid_job_id": InvalidParameterError,
    "extra_not_installed": MissingExtraError,
    "unauthorized": AuthenticationError,
}


def error_from_answer(status: int, body: Any, what: str) -> ClientError:
    """The exception for an error answer (`{"detail": ..., "code": ...}`) to `what`."""
    code = body.get("code") if isinstance(body, dict) else None
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI's validation errors: name each parameter
        detail = "; ".join(
            f"{'.'.join(str(part) for part in error.get('loc', ())[1:])}: {error.get('msg')}"
            for error in detail
            if isinstance(error, dict)
        )
    error_type = _BY_CODE.get(code or "")
    if error_type is None:
        error_type = ServerUnavailableError if status >= 500 else ClientError
    return error_type(f"{what}: {detail} (HTTP {status})", status=status, code=code)
