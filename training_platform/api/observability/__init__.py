"""Operations: `GET /metrics` (Prometheus), `GET /livez`, `GET /readyz` (docs/platform.md).

- `prometheus.py`: the app's own registry, the request/WebSocket middleware
  and the `/metrics` route;
- `collectors.py`: what is read from existing state at scrape time (ingest
  per job, the database pool), so no hot path pays for a scrape;
- `readiness.py`: the liveness and readiness checks.

The log format (`PLATFORM_LOG_FORMAT`) is set where the server configures
logging: `training_platform/logging_setup.py`.
"""

from __future__ import annotations

from fastapi import FastAPI

from training_platform.api.observability.prometheus import install_metrics
from training_platform.api.observability.readiness import install_probes


def install_observability(app: FastAPI) -> None:
    """The probes and `/metrics`; call after the other middleware (it times them too)."""
    install_probes(app)
    install_metrics(app)
