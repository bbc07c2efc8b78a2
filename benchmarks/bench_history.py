"""History of a 1M-step run downsampled to 2,000 points per series: server time.

    .venv/bin/python benchmarks/bench_history.py [--steps 1000000] [--points 2000]
        [--sqlite-url sqlite:///bench_history.db] [--postgres-url postgresql://...]

Builds (once; kept in the given databases and reused on the next run) a run
with ~25 series per step (the groups of docs/contract.md §2, 6 stage timings, 3 extras),
ingested the way the platform does it: rows and their rollup buckets in one
transaction per batch. Then prints, per database:

  * our answer: `GET .../metrics?max_points=2000` through the ASGI app
    (routing, query, merge, JSON; best and median of several), and the query
    alone for a zoom into half the run and into 1,000 steps (exact);
  * the alternative we did not take: one SQL GROUP BY step bucket with
    MIN/MAX over the 14 numeric columns (timings and extras left out);
  * what rollups cost at ingestion: a 1-record batch (a live step) and a
    10,000-record batch, with and without refresh_rollups.

Anchor: MLflow's get-history reads the whole series and samples uniformly,
capped at 25k points. The machine is shared and noisy: read the best times
and the ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_platform.api.main import create_app
from training_platform.callbacks.wire.records import build_record
from training_platform.history.series.answer import downsampled_history
from training_platform.history.series.stored.refresh import refresh_rollups
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory, migrate_to_head
from training_platform.store.metric_rows import METRIC_COLUMNS
from training_platform.store.models import Job, TrainingMetric

JOB = "bench_history"
BATCH = 10_000
POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def record(step: int, rng: random.Random) -> dict[str, Any]:
    loss = 2.5 * math.exp(-step / 3e5) + rng.gauss(0, 0.05)
    return build_record(
        step,
        {
            "loss": {"actor_loss": loss, "critic_loss": 1.2 + rng.random(), "total_loss": loss + 1},
            "reward": {"mean": rng.random(), "std": 0.1, "max": 1 + rng.random(), "min": -1.0},
            "kl": {"mean": 0.1 * rng.random(), "max": 0.15},
            "gradient": {"actor_norm": 1.5 + rng.random(), "critic_norm": 0.8},
            "performance": {
                "tokens_per_second": 1000.0 + rng.random() * 10,
                "step_time": 2.5,
                "gpu_memory_allocated": 40.5,
            },
            "timing": {
                "rollout": 1.2,
                "reward": 0.3,
                "kl_penalty": 0.05,
                "gae": 0.02,
                "update_actor": 0.7,
                "update_critic": 0.2,
            },
            "extra": {
                "actor/entropy": rng.random(),
                "response_length/mean": 312.0,
                "actor/pg_clipfrac": 0.1,
            },
        },
        timestamp=1.7e9 + step,
    )


def ingest(factory: sessionmaker[Session], records: list[dict[str, Any]], rollups: bool) -> None:
    with factory() as session:
        upsert_metrics(session, job_id=JOB, records=records, received_at=time.time())
        if rollups:
            refresh_rollups(session, job_id=JOB, records=records)
        session.commit()


def ensure_run(factory: sessionmaker[Session], steps: int) -> None:
    with factory() as session:
        if session.get(Job, JOB) is None:
            session.add(Job(job_id=JOB, created_at=time.time()))
            session.commit()
        have = session.scalar(
            select(func.max(TrainingMetric.step)).where(TrainingMetric.job_id == JOB)
        )
    start = 0 if have is None else have + 1
    if start >= steps:
        return
    rng = random.Random(start)
    began = time.perf_counter()
    for first in range(start, steps, BATCH):
        ingest(factory, [record(s, rng) for s in range(first, min(steps, first + BATCH))], True)
        done = min(steps, first + BATCH)
        print(f"  built {done:,}/{steps:,} steps ({time.perf_counter() - began:.0f} s)", end="\r")
    print()


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), result


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def bench(name: str, url: str, steps: int, points: int, repeat: int) -> None:
    print(f"\n== {name}: {url.split('@')[-1]}")
    engine = make_engine(url)
    migrate_to_head(engine)
    factory = make_session_factory(engine)
    ensure_run(factory, steps)
    settings = Settings(database_url=url, poll_interval=0, metrics_dir=Path("/nonexistent"))
    # An IP address as Host: the server answers it without an allowed-hosts setting.
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        path = f"/api/monitoring/{JOB}/metrics?max_points={points}"
        client.get(path)  # warm: connection pool, caches
        best, median, response = timed(lambda: client.get(path), repeat)
        body = response.json()
    print(
        f"GET ?max_points={points} over {steps:,} steps: best {ms(best)}, median {ms(median)}"
        f"  ({body['count']} points x {len(body['series'])} series, "
        f"{len(response.content) // 1024} KiB)"
    )

    def query(lo: int | None, hi: int | None) -> dict[str, Any]:
        with factory() as session:
            return downsampled_history(
                session, job_id=JOB, start_step=lo, end_step=hi, max_points=points
            )

    for label, lo, hi in (
        ("query only, whole run", None, None),
        ("query only, zoom into half", steps // 4, steps // 4 * 3),
        ("query only, zoom into 1,000 steps (exact)", steps // 2, steps // 2 + 999),
    ):
        best, median, body = timed(partial(query, lo, hi), repeat)
        kind = "buckets" if body["downsampled"] else "exact"
        print(f"{label}: best {ms(best)}, median {ms(median)}  ({body['count']} {kind})")

    width = math.ceil(steps / points)
    aggregates = ", ".join(f"MIN({c}), MAX({c})" for c in METRIC_COLUMNS)
    sql = text(
        f"SELECT step / :w, {aggregates} FROM training_metrics "
        "WHERE job_id = :job GROUP BY step / :w"
    )
    with engine.connect() as connection:
        best, median, _ = timed(
            lambda: connection.execute(sql, {"w": width, "job": JOB}).fetchall(),
            max(1, repeat // 3),
        )
    print(
        "alternative: SQL GROUP BY over all rows (14 columns only): "
        f"best {ms(best)}, median {ms(median)}"
    )

    rng = random.Random(7)
    tail = steps + 10**7  # far beyond the run, so nothing is overwritten
    for size in (1, BATCH):
        costs = {}
        for rollups in (False, True):
            batch = [record(tail + i, rng) for i in range(size)]
            tail += size + FANOUT_GAP
            best, _, _ = timed(partial(ingest, factory, batch, rollups), 1)
            costs[rollups] = best
        print(
            f"ingest a {size:,}-record batch: rows only {ms(costs[False])}, rows + rollups "
            f"{ms(costs[True])}"
        )
    with factory() as session:  # leave the run as it was built
        session.execute(
            text("DELETE FROM training_metrics WHERE job_id = :job AND step >= :s"),
            {"job": JOB, "s": steps},
        )
        session.execute(
            text("DELETE FROM metric_rollups WHERE job_id = :job AND last_step >= :s"),
            {"job": JOB, "s": steps},
        )
        session.commit()
    engine.dispose()


FANOUT_GAP = 10**6  # batches far apart: each starts in fresh buckets at every level


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--points", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--sqlite-url", default="sqlite:///./bench_history.db")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--job", help="Job id of the run (built when missing).")
    args = parser.parse_args()
    if args.job:
        global JOB
        JOB = args.job
    bench("SQLite", args.sqlite_url, args.steps, args.points, args.repeat)
    if not args.skip_postgres:
        try:
            bench("PostgreSQL", args.postgres_url, args.steps, args.points, args.repeat)
        except Exception as exc:  # a missing server is reported, not fatal
            print(f"PostgreSQL skipped: {exc.__class__.__name__}: {exc}")


if __name__ == "__main__":
    main()
