"""The FastAPI application: `create_app(settings)`, and `app` for uvicorn.

`training_platform.api.main:app` is built on first access (module
`__getattr__`), from the environment, so importing this module has no side
effects and tests build their own app from explicit settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from training_platform import __version__
from training_platform.api.deps import require_token
from training_platform.api.errors import install_error_handlers
from training_platform.api.routers import artifacts, jobs, monitoring
from training_platform.core.database import make_engine, make_session_factory, prepare_schema
from training_platform.core.sync_service import SyncService
from training_platform.settings import Settings

logger = logging.getLogger(__name__)


async def _poll_forever(service: SyncService, interval: float) -> None:
    """Background discovery + sync; one job's trouble never stops the loop."""
    while True:
        try:
            await run_in_threadpool(service.poll_once)
        except Exception:
            logger.exception("background sync round failed")
        await asyncio.sleep(interval)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        poller: asyncio.Task[None] | None = None
        try:
            await run_in_threadpool(prepare_schema, engine, auto_migrate=settings.auto_migrate)
            app.state.engine = engine
            app.state.session_factory = make_session_factory(engine)
            app.state.sync_service = SyncService(app.state.session_factory, settings)
            if settings.poll_interval > 0:
                poller = asyncio.create_task(
                    _poll_forever(app.state.sync_service, settings.poll_interval)
                )
            yield
        finally:
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller
            service = getattr(app.state, "sync_service", None)
            if service is not None:
                await run_in_threadpool(service.close)
            engine.dispose()

    app = FastAPI(
        title="training_platform",
        version=__version__,
        summary="Monitoring for LLM reinforcement-learning training runs.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_error_handlers(app)
    api = APIRouter(prefix="/api", dependencies=[Depends(require_token)])
    api.include_router(jobs.router)
    api.include_router(monitoring.router)
    api.include_router(artifacts.router)
    app.include_router(api)

    @app.get("/healthz", tags=["health"], summary="Liveness")
    def healthz() -> dict[str, str]:
        """Always open (no token): for load balancers and compose health checks."""
        return {"status": "ok"}

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return create_app()
    raise AttributeError(name)
