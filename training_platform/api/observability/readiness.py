"""Liveness and readiness: `GET /livez`, `GET /readyz` (and the older `GET /healthz`).

- **Liveness** (`/livez`, and `/healthz` as it always was): the process and
  its event loop answer. Nothing else is looked at: a database outage must
  not get every server process restarted.
- **Readiness** (`/readyz`): 200 when this process can serve, else 503 with
  each failed check named, for a load balancer to route around it:
  - `database`: a `SELECT 1` answers within `CHECK_TIMEOUT` seconds;
  - `schema`: the database is at the Alembic head this version needs;
  - `background_sync`: the background sync task runs (when
    `PLATFORM_POLL_INTERVAL` > 0; with 0 it is "disabled", not a failure);
  - `started`: the app's lifespan has started (the services exist).

All are open without the API token (they say nothing about the data) and
never answer 500: an unexpected error is a failed check. One database check
runs at a time: probes arriving while one is in flight wait for it, so an
unreachable database (whose connect may hang far longer than the timeout)
never piles up worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from functools import lru_cache
from typing import Any, Final

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text
from starlette.concurrency import run_in_threadpool

from training_platform.store.database import current_revision, head_revision

logger = logging.getLogger(__name__)

CHECK_TIMEOUT: Final = 2.0  # seconds for the database checks together
OK: Final = "ok"


@lru_cache(maxsize=1)
def schema_head() -> str | None:
    """The Alembic head of this version (read from the migration scripts once)."""
    return head_revision()


def database_checks(engine: Engine, head: str | None) -> dict[str, str]:
    """`database` and `schema` against `head` (worker thread; may block as long as the
    driver does)."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        return {"database": f"failed: {_short(exc)}", "schema": "unknown: no database"}
    try:
        current = current_revision(engine)
    except Exception as exc:
        return {"database": OK, "schema": f"failed: {_short(exc)}"}
    if current != head:
        return {"database": OK, "schema": f"at revision {current or 'none'}, needs {head}"}
    return {"database": OK, "schema": OK}


def _short(exc: BaseException) -> str:
    """The error's first line, bounded (a driver's message may hold a whole query)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


class Readiness:
    """The checks of one app; the database part shared by concurrent probes."""

    def __init__(self, timeout: float = CHECK_TIMEOUT) -> None:
        self.timeout = timeout
        self._in_flight: asyncio.Future[dict[str, str]] | None = None

    async def checks(self, app: FastAPI) -> dict[str, str]:
        """Check name -> "ok", "disabled" or what is wrong."""
        engine: Engine | None = getattr(app.state, "engine", None)
        hub: Any = getattr(app.state, "live_hub", None)
        if engine is None or hub is None:
            return {"started": "not yet: the server is starting (or stopping)"}
        results = await self._database(engine)
        if app.state.settings.poll_interval <= 0:
            results["background_sync"] = "disabled"
        else:
            results["background_sync"] = OK if hub.polling() else "not running"
        return results

    async def _database(self, engine: Engine) -> dict[str, str]:
        # The head is read from the migration scripts once per process, outside the
        # timeout: loading them is this version's cost, not the database's answer.
        cached = schema_head.cache_info().currsize > 0
        head = schema_head() if cached else await run_in_threadpool(schema_head)
        if self._in_flight is None or self._in_flight.done():
            self._in_flight = asyncio.ensure_future(
                run_in_threadpool(database_checks, engine, head)
            )
        try:
            # shield: a probe that gives up leaves the check running for the next one.
            return dict(await asyncio.wait_for(asyncio.shield(self._in_flight), self.timeout))
        except TimeoutError:
            return {
                "database": f"failed: no answer within {self.timeout:g} s",
                "schema": "unknown: no database",
            }


def is_ready(checks: dict[str, str]) -> bool:
    return all(value in (OK, "disabled") for value in checks.values())


def install_probes(app: FastAPI) -> None:
    """`GET /livez` and `GET /readyz`, outside `/api` (no token)."""
    readiness = Readiness()
    app.state.readiness = readiness
    router = APIRouter(tags=["health"])

    @router.get("/livez", summary="Liveness")
    async def livez() -> dict[str, str]:
        """The process and its event loop answer (async: served on the loop itself)."""
        return {"status": "ok"}

    @router.get("/readyz", summary="Readiness", responses={503: {"description": "Not ready"}})
    async def readyz(request: Request) -> JSONResponse:
        """200 when the database answers, the schema is at head and the background sync
        runs (if configured); 503 naming each failed check."""
        try:
            checks = await readiness.checks(request.app)
        except Exception as exc:  # never a 500: an unexpected error is a failed check
            logger.exception("readiness check failed")
            checks = {"readiness": f"failed: {_short(exc)}"}
        ready = is_ready(checks)
        failed = sorted(name for name, value in checks.items() if value not in (OK, "disabled"))
        body = {"status": "ok" if ready else "unavailable", "checks": checks, "failed": failed}
        return JSONResponse(body, status_code=200 if ready else 503)

    app.include_router(router)
