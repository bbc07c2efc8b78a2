"""The client's source over HTTP: the REST API, its export endpoints, paging done here."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any, Final

from training_platform.client.http import Http

JOBS_PAGE: Final = 500  # the jobs list's largest page


def _quoted(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")


class RemoteSource:
    """Answers from a running server (`Client(url, token=...)`)."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def runs(
        self, *, project: str | None, tags: Sequence[str], statuses: Sequence[str]
    ) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = []
        while True:
            page = self.http.get_json(
                "/api/jobs",
                {
                    "project": project,
                    "tag": list(tags) or None,
                    "status": list(statuses) or None,
                    "limit": JOBS_PAGE,
                    "offset": len(jobs),
                },
                what="the runs list",
            )["jobs"]
            jobs.extend(page)
            if len(page) < JOBS_PAGE:
                return jobs

    def run(self, job_id: str) -> dict[str, Any]:
        info: dict[str, Any] = self.http.get_json(
            f"/api/jobs/{_quoted(job_id)}", what=f"run {job_id!r}"
        )
        return info

    def export(
        self,
        job_id: str,
        kind: str,
        fmt: str,
        *,
        fields: Sequence[str] | None,
        start_step: int | None,
        end_step: int | None,
    ) -> bytes:
        path = "metrics/anomalies" if kind == "anomalies" else kind
        body, _ = self.http.get(
            f"/api/monitoring/{_quoted(job_id)}/{path}/export",
            {
                "format": fmt,
                "fields": ",".join(fields) if fields else None,
                "start_step": start_step,
                "end_step": end_step,
            },
            what=f"the {kind} of run {job_id!r}",
        )
        return body

    def downsampled(
        self,
        job_id: str,
        *,
        fields: Sequence[str] | None,
        start_step: int | None,
        end_step: int | None,
        max_points: int,
    ) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get_json(
            f"/api/monitoring/{_quoted(job_id)}/metrics",
            {
                "max_points": max_points,
                "fields": ",".join(fields) if fields else None,
                "start_step": start_step,
                "end_step": end_step,
            },
            what=f"the history of run {job_id!r}",
        )
        return body
