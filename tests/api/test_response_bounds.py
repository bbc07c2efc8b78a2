"""Every metrics history response is bounded in rows and bytes (issue 12 §2).

`?max_points=N` with 5,000 < N <= 20,000 used to ignore the cap (a count that
stops at 5,001 was compared with N) and return every row; a page of records
had no byte bound at all.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, text
from sqlalchemy.orm import Session, sessionmaker

from tests.api.test_artifacts_api import make_profiles
from tests.fixtures_sshd import SSHD
from training_platform.api.main import create_app
from training_platform.api.routers.artifacts import DEFAULT_LISTED
from training_platform.api.routers.monitoring import (
    DEFAULT_ANOMALIES,
    MAX_ANOMALIES,
    MAX_PAGE,
    MAX_POINTS,
)
from training_platform.callbacks.wire.schema import MAX_STEP
from training_platform.history.history_page import history_page
from training_platform.history.series.stored.refresh import refresh_rollups
from training_platform.ingest.artifacts import MAX_FILES
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory
from training_platform.store.metric_rows import ROW_KEYS
from training_platform.store.models import Anomaly, Job

JOB = "big"
TIGHT_BYTES = 4 << 20  # the setting's minimum: the bounds bite on a modest run
TIGHT_SERIES = 8
_POSITION = {key: index for index, key in enumerate(ROW_KEYS)}
_NUMERIC = ("actor_loss", "critic_loss", "total_loss", "reward_mean", "kl_mean", "step_time")


@pytest.fixture
def factory(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings.database_url)
    with make_session_factory(engine).begin() as session:
        session.add(Job(job_id=JOB, created_at=time.time()))
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def tight_client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    tight = settings.model_copy(
        update={"history_max_response_bytes": TIGHT_BYTES, "history_max_series": TIGHT_SERIES}
    )
    with TestClient(create_app(tight)) as client:
        yield client


def ingest(factory: sessionmaker[Session], records: list[dict[str, Any]]) -> None:
    """Through the persister's own upsert (rows, rollups, anomalies), in one transaction."""
    with factory() as session:
        upsert_metrics(session, job_id=JOB, records=records, received_at=1.0)
        session.commit()


def record(step: int, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "step": step,
        "timestamp": 1.7e9 + step,
        "loss": {"actor_loss": (step % 97) / 7, "critic_loss": 1.0, "total_loss": 2.0},
        "reward": {"mean": (step % 13) / 3},
    }
    if extra:
        body["extra"] = extra
    return body


def history(client: TestClient, **params: Any) -> Any:
    return client.get(f"/api/monitoring/{JOB}/metrics", params=params)


def test_max_points_above_5000_is_still_a_cap(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    ingest(factory, [record(step) for step in range(12_000)])

    capped = history(client, max_points=6_000).json()
    exact = history(client, max_points=12_000).json()

    assert capped["downsampled"] is True  # it used to be all 12,000 rows
    assert capped["count"] == len(capped["steps"]) <= 6_000
    for columns in capped["series"].values():
        assert all(len(column) <= 6_000 for column in columns.values())
    assert max(capped["series"]["loss.actor_loss"]["max"]) == 96 / 7  # spikes kept
    assert exact["downsampled"] is False and exact["count"] == 12_000
    assert history(client, max_points=11_999).json()["downsampled"] is True


def test_a_page_of_large_records_ends_at_the_byte_cap_and_pages_on(
    tight_client: TestClient, factory: sessionmaker[Session]
) -> None:
    blob = "x" * 60_000
    ingest(factory, [record(step, blob=blob) for step in range(150)])  # ~9 MB of records

    seen: list[int] = []
    start: int | None = 0
    pages = 0
    while start is not None:
        response = history(tight_client, start_step=start, limit=MAX_PAGE)
        assert response.status_code == 200
        assert len(response.content) <= TIGHT_BYTES
        page = response.json()
        assert page["count"] == len(page["metrics"]) > 0
        assert page["truncated"] is (page["next_start_step"] is not None)
        seen += [metric["step"] for metric in page["metrics"]]
        start = page["next_start_step"]
        pages += 1
    assert seen == list(range(150))  # every record exactly once, in order
    assert pages >= 3


def test_a_record_larger_than_a_page_is_sent_as_a_stub(factory: sessionmaker[Session]) -> None:
    ingest(factory, [record(0), record(1, blob="y" * 50_000), record(2)])

    with factory() as session:
        page = history_page(
            session, job_id=JOB, start_step=None, end_step=None, limit=10, max_bytes=30_000
        )

    assert len(page.records) == 3 and page.next_start_step is None
    assert b'"truncated":true' in page.records[1] and b"yyy" not in page.records[1]
    assert page.size <= 30_000


def test_a_run_with_too_many_series_answers_the_first_and_names_the_rest(
    tight_client: TestClient, factory: sessionmaker[Session]
) -> None:
    keys = {f"k{i:02d}": float(i) for i in range(20)}
    ingest(factory, [record(step, **keys) for step in range(50)])

    body = history(tight_client, max_points=100).json()

    assert len(body["series"]) == TIGHT_SERIES
    assert body["truncated"] is True
    assert body["series_omitted_count"] == 4 + 20 - TIGHT_SERIES
    assert set(body["series"]).isdisjoint(body["series_omitted"])
    rest = history(tight_client, max_points=100, fields="extra.k19").json()
    assert list(rest["series"]) == ["extra.k19"] and rest["truncated"] is False


def _build_run_in_bulk(factory: sessionmaker[Session], steps: int) -> None:
    """`steps` rows in one INSERT ... SELECT, then their rollups as the persister builds them.

    Through the normal ingestion a 1M-step run takes minutes here; the rows
    come from SQL and the rollups from `refresh_rollups` with the rows as the
    persister would have written them (only the numeric columns set).
    """
    with factory() as session:
        dialect = session.get_bind().dialect.name
    numbers = (
        "WITH RECURSIVE n(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM n WHERE s + 1 < :n) "
        "SELECT s FROM n"
        if dialect == "sqlite"
        else "SELECT generate_series(0, :n - 1) AS s"
    )
    with factory.begin() as session:
        session.execute(
            text(
                "INSERT INTO training_metrics (job_id, step, timestamp, "
                + ", ".join(_NUMERIC)
                + ", has_anomaly, received_at) SELECT :job, s, 1.7e9 + s, (s % 97) / 7.0, "
                "s / 3.0, s / 7.0, (s % 13) / 3.0, s / 11.0, s / 13.0, false, 1.0 "
                f"FROM ({numbers}) AS g"
            ),
            {"n": steps, "job": JOB},
        )
    template: list[Any] = [None] * len(ROW_KEYS)
    step_at = _POSITION["step"]
    a, b, c, d, e, f = (_POSITION[column] for column in _NUMERIC)
    for start in range(0, steps, 100_000):
        rows = []
        for step in range(start, min(steps, start + 100_000)):
            row = template.copy()
            row[step_at] = step
            row[a], row[b], row[c] = (step % 97) / 7.0, step / 3.0, step / 7.0
            row[d], row[e], row[f] = (step % 13) / 3.0, step / 11.0, step / 13.0
            rows.append(row)
        with factory.begin() as session:
            refresh_rollups(
                session, job_id=JOB, records=[{"step": r[step_at]} for r in rows], rows=rows
            )


def _check(response: Any, params: dict[str, Any]) -> None:
    start, end = params.get("start_step"), params.get("end_step")
    if start is not None and end is not None and start > end:
        assert response.status_code == 422, params
        return
    assert response.status_code == 200, (params, response.text[:300])
    assert len(response.content) <= TIGHT_BYTES, params
    body = response.json()
    if "max_points" not in params:
        assert body["count"] == len(body["metrics"]) <= params["limit"], params
        return
    points = params["max_points"]
    assert body["count"] == len(body["steps"]) <= points, params
    assert len(body["series"]) <= TIGHT_SERIES, params
    for columns in body["series"].values():
        assert all(len(column) == body["count"] for column in columns.values()), params


@pytest.mark.slow
def test_every_parameter_combination_at_its_limits_is_bounded(
    tight_client: TestClient, factory: sessionmaker[Session], database_url: str
) -> None:
    # 1M steps on SQLite; 200k on PostgreSQL, where building and querying the
    # run here takes several minutes more (the bounds do not depend on it).
    steps = 1_000_000 if database_url.startswith("sqlite") else 200_000
    _build_run_in_bulk(factory, steps)
    overview = history(tight_client, max_points=2).json()
    assert (overview["start_step"], overview["end_step"]) == (0, steps - 1)
    middle = steps // 2
    edges = [None, 0, middle, steps - 1, MAX_STEP]
    ranges = list(itertools.product(edges, edges))
    # A full page costs seconds (it reads until the byte cap): the ranges that matter.
    full_page_ranges = [(None, None), (0, MAX_STEP), (middle, None), (steps - 1, MAX_STEP)]
    cases: list[dict[str, Any]] = [
        *({"limit": 1, "start_step": a, "end_step": b} for a, b in ranges),
        *({"limit": MAX_PAGE, "start_step": a, "end_step": b} for a, b in full_page_ranges),
        *(
            {"max_points": points, "start_step": a, "end_step": b}
            for points in (2, 5_001, MAX_POINTS)
            for a, b in ranges
        ),
        *(
            {"max_points": MAX_POINTS, "fields": fields, "start_step": a}
            for fields in ("loss", "loss.actor_loss,reward,extra")
            for a in (None, middle)
        ),
    ]
    for case in cases:
        params = {key: value for key, value in case.items() if value is not None}
        _check(history(tight_client, **params), params)
    if steps < 640_000:
        return
    # 640k steps at 20,000 points: level-0 buckets of 32 steps, 20,000 of them:
    # ~9 MB for the six series, so the cap leaves some out and says which.
    params = {"max_points": MAX_POINTS, "start_step": 0, "end_step": 639_999}
    response = history(tight_client, **params)
    _check(response, params)
    wide = response.json()
    assert wide["downsampled"] and wide["count"] == MAX_POINTS
    assert wide["truncated"] is True and 0 < len(wide["series"]) < len(_NUMERIC)
    assert wide["series_omitted_count"] == len(_NUMERIC) - len(wide["series"])


def add_anomalies(factory: sessionmaker[Session], steps: range, per_step: int) -> None:
    """`per_step` stored rows at each step: types in pairs, found by both sources."""
    rows = [
        {
            "job_id": JOB,
            "step": step,
            "type": f"kind_{index // 2}",
            "severity": "warning",
            "message": f"at {step}",
            "source": ("callback", "platform")[index % 2],
            "created_at": 1.7e9 + step,
        }
        for step in steps
        for index in range(per_step)
    ]
    with factory.begin() as session:
        session.execute(insert(Anomaly), rows)


def anomalies(client: TestClient, **params: Any) -> Any:
    return client.get(f"/api/monitoring/{JOB}/metrics/anomalies", params=params)


def test_anomalies_are_capped_and_page_by_whole_steps(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    add_anomalies(factory, range(7_000), per_step=2)  # 14,000 rows, 7,000 incidents

    first = anomalies(client).json()  # the default answer, same shape as before plus paging
    assert len(first["anomalies"]) * 2 <= DEFAULT_ANOMALIES  # it used to be all 7,000
    assert first["next_start_step"] == first["anomalies"][-1]["step"] + 1
    assert first["truncated"] is False
    assert all(item["sources"] == ["callback", "platform"] for item in first["anomalies"])

    seen: list[int] = []
    start: int | None = 0
    while start is not None:
        page = anomalies(client, start_step=start, limit=MAX_ANOMALIES, raw=True).json()
        assert 0 < len(page["anomalies"]) <= MAX_ANOMALIES
        seen += [item["step"] for item in page["anomalies"]]
        start = page["next_start_step"]
    assert sorted(seen) == [step for step in range(7_000) for _ in range(2)]  # exactly once

    assert anomalies(client, limit=MAX_ANOMALIES + 1).status_code == 422
    assert anomalies(client, limit=0).status_code == 422


def test_a_step_larger_than_the_page_is_cut_and_says_so(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    add_anomalies(factory, range(3), per_step=6)

    page = anomalies(client, limit=4, raw=True).json()
    assert [item["step"] for item in page["anomalies"]] == [0] * 4
    assert page["truncated"] is True and page["next_start_step"] == 1
    whole = anomalies(client, start_step=1, limit=7, raw=True).json()
    assert len(whole["anomalies"]) == 6 and whole["next_start_step"] == 2
    assert whole["truncated"] is False


def test_the_artifact_listing_is_capped(client: TestClient, metrics_dir: Path) -> None:
    (metrics_dir / "many_metrics.jsonl").write_bytes(b'{"step": 0, "timestamp": 1.0}\n')
    root = metrics_dir / "many_profiles"
    for step in range(1_200):
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / "trace.json").write_bytes(b"{}")

    default = client.get("/api/jobs/many/artifacts").json()
    assert len(default["files"]) == DEFAULT_LISTED and default["truncated"] is True
    assert len(default["profiles"]) == DEFAULT_LISTED  # it used to list all 1,200
    small = client.get("/api/jobs/many/artifacts", params={"limit": 5}).json()
    assert len(small["files"]) == 5 and small["truncated"] is True
    exact = client.get("/api/jobs/many/artifacts", params={"limit": 1_200}).json()
    assert len(exact["files"]) == 1_200 and exact["truncated"] is False  # all fit: not cut
    full = client.get("/api/jobs/many/artifacts", params={"limit": MAX_FILES}).json()
    assert len(full["files"]) == 1_200 and full["truncated"] is False
    assert (
        client.get("/api/jobs/many/artifacts", params={"limit": MAX_FILES + 1}).status_code == 422
    )


def test_the_artifact_listing_of_an_ssh_job_is_capped(ssh_client: TestClient, sshd: SSHD) -> None:
    make_profiles(sshd.remote_dir, "remote1")  # 5 files
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    def listing(limit: int) -> Any:
        return ssh_client.get("/api/jobs/remote1/artifacts", params={"limit": limit}).json()

    assert len(listing(5)["files"]) == 5 and listing(5)["truncated"] is False
    cut = listing(4)
    assert len(cut["files"]) == 4 and cut["truncated"] is True
