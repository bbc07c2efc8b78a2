"""`GET /api/instances`: the server processes on this database and the jobs each ingests."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from training_platform.api.deps import SessionDep, SettingsDep, SyncServiceDep
from training_platform.store.leases import holdings

router = APIRouter(tags=["operations"])


@router.get("/instances", summary="Server processes and their ingest leases")
def list_instances(
    session: SessionDep, settings: SettingsDep, service: SyncServiceDep
) -> dict[str, Any]:
    """Every server process that has heartbeated on this database (PostgreSQL; docs/platform.md,
    "Several processes"): when it last did (`alive`: within one lease period), and the
    jobs whose ingest lease it holds, with when each was last renewed. `unassigned`: jobs
    whose lease is free or has expired (another process takes them at its next round).
    With one process on SQLite no leases are kept: `leases` is false, the lists empty."""
    keeper = service.leases
    now, known, leases = holdings(session)
    period = settings.lease_seconds
    jobs_of: dict[str, list[dict[str, Any]]] = {}
    unassigned = []
    for lease in leases:
        if lease.holder is None or lease.expires_at <= now:
            unassigned.append(lease.job_id)
            continue
        jobs_of.setdefault(lease.holder, []).append(
            {
                "job_id": lease.job_id,
                "token": lease.token,
                "renewed_at": lease.renewed_at,
                "expires_in_s": round(lease.expires_at - now, 3),
            }
        )
    return {
        "leases": keeper is not None,
        "self": keeper.instance_id if keeper is not None else None,
        "lease_seconds": period,
        "now": now,
        "instances": [
            {
                "instance_id": instance.instance_id,
                "hostname": instance.hostname,
                "pid": instance.pid,
                "version": instance.version,
                "started_at": instance.started_at,
                "heartbeat_at": instance.heartbeat_at,
                "heartbeat_age_s": round(now - instance.heartbeat_at, 3),
                "alive": now - instance.heartbeat_at < period,
                "jobs": jobs_of.get(instance.instance_id, []),
            }
            for instance in known
        ],
        "unassigned": unassigned,
    }
