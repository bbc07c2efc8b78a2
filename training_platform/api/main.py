"""The FastAPI application: `create_app(settings)`, and `app` for uvicorn.

`training_platform.api.main:app` is built on first access (module
`__getattr__`), from the environment, so importing this module has no side
effects and tests build their own app from explicit settings.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from training_platform import __version__
from training_platform.api.deps import require_token
from training_platform.api.errors import install_error_handlers
from training_platform.api.observability import install_observability
from training_platform.api.query_checks import check_query_params
from training_platform.api.routers import (
    artifacts,
    compare,
    dashboard,
    export,
    instances,
    jobs,
    live,
    monitoring,
    playback,
    profile_report,
    samples,
    system,
)
from training_platform.api.security import install_security
from training_platform.services import Services, build_services
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory, prepare_schema
from training_platform.store.sqlite_guard import sole_server

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        services: Services | None = None
        held = contextlib.ExitStack()
        try:
            held.enter_context(sole_server(settings.database_url))  # SQLite: one server
            await run_in_threadpool(prepare_schema, engine, auto_migrate=settings.auto_migrate)
            app.state.engine = engine
            app.state.session_factory = make_session_factory(engine)
            # One sync service for background and manual syncs alike, so each
            # feeds the live stream and the platform's diagnosis.
            services = build_services(app.state.session_factory, settings, serving=True)
            app.state.live_hub = services.hub
            app.state.sync_service = services.sync
            await services.hub.start()
            yield
        finally:
            if services is not None:
                await services.hub.stop()
                await run_in_threadpool(services.close)
            engine.dispose()
            held.close()

    app = FastAPI(
        title="training_platform",
        version=__version__,
        summary="Monitoring for LLM reinforcement-learning training runs.",
        lifespan=lifespan,
        # Served by the dashboard router from local files: FastAPI's own pages
        # load their scripts from a CDN and are blank offline.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    install_error_handlers(app)
    # Host check (DNS rebinding), security headers, no token in uvicorn's logs.
    install_security(app, settings)
    # /metrics (its middleware outermost: it times the others too), /livez, /readyz.
    install_observability(app)
    api = APIRouter(
        prefix="/api",
        dependencies=[Depends(require_token), Depends(check_query_params)],
    )
    api.include_router(jobs.router)
    api.include_router(compare.router)
    api.include_router(monitoring.router)
    api.include_router(samples.router)
    api.include_router(system.router)
    api.include_router(export.router)
    api.include_router(artifacts.router)
    api.include_router(profile_report.router)
    api.include_router(instances.router)
    app.include_router(api)
    # WebSockets check Origin and the token in their own handshake: the
    # router-wide require_token reads a Request, which a WebSocket is not.
    app.include_router(live.router, prefix="/api")
    app.include_router(playback.router, prefix="/api")
    # The page and its assets hold no data (no token): the page asks for the
    # token when /api answers 401.
    app.include_router(dashboard.router)

    @app.get("/healthz", tags=["health"], summary="Liveness")
    def healthz() -> dict[str, str]:
        """Liveness, as /livez: always open (no token), for load balancers and compose
        health checks. /readyz also checks the database (docs/platform.md, Operations)."""
        return {"status": "ok"}

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return create_app()
    raise AttributeError(name)
