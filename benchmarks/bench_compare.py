"""Ten 1M-step runs side by side, 2,000 points each: `GET /api/compare` server time.

    .venv/bin/python benchmarks/bench_compare.py [--runs 10] [--steps 1000000]
        [--points 2000] [--sqlite-url sqlite:///bench_history.db] [--skip-postgres]

Uses the 1M-step run of `bench_history.py` (built there when missing, ~25
series per step) and copies its rows and rollup buckets to `--runs` - 1 more
jobs (once; kept for the next run). Then prints, per database, best and
median of several:

  * `GET /api/compare?jobs=<runs>&max_points=2000&fields=...` for the two
    series a comparison chart shows (loss and reward), and for every series;
  * the same with `x=time` and with `smoothing=0.9` (over the buckets here:
    1M records are beyond the exact-smoothing limit);
  * the alternative a client has without it: one `/metrics?max_points=` call
    per run, back to back (what a dashboard would do), and the ratio.

The goal (issue 15): <= 150 ms for 10 runs x 1M steps x 2,000 points on SQLite.
The machine is shared and noisy: read the best times and the ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_history
from bench_history import POSTGRES_URL, ensure_run, ms, timed

from training_platform.api.main import create_app
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory, migrate_to_head
from training_platform.store.models import Job

FIELDS = "loss.actor_loss,reward.mean"


def clone_runs(url: str, runs: int) -> list[str]:
    """The bench_history run and `runs - 1` copies of it (made once)."""
    engine = make_engine(url)
    factory = make_session_factory(engine)
    source = bench_history.JOB
    ids = [source, *(f"bench_compare_{i}" for i in range(1, runs))]
    with factory() as session:
        known = set(session.scalars(select(Job.job_id).where(Job.job_id.in_(ids))))
    for job_id in ids[1:]:
        if job_id in known:
            continue
        began = time.perf_counter()
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected,"
                    " created_at) VALUES (:j, 'local', false, 'completed', false, :t)"
                ),
                {"j": job_id, "t": time.time()},
            )
            for table in ("training_metrics", "metric_rollups"):
                columns = [
                    row[1] if engine.dialect.name == "sqlite" else row[0]
                    for row in connection.execute(
                        text(f"PRAGMA table_info({table})")
                        if engine.dialect.name == "sqlite"
                        else text(
                            "SELECT column_name FROM information_schema.columns"
                            " WHERE table_name = :t ORDER BY ordinal_position"
                        ),
                        {"t": table},
                    )
                ]
                others = ", ".join(c for c in columns if c != "job_id")
                connection.execute(
                    text(
                        f"INSERT INTO {table} (job_id, {others}) "
                        f"SELECT :j, {others} FROM {table} WHERE job_id = :s"
                    ),
                    {"j": job_id, "s": source},
                )
        print(f"  copied the run to {job_id} ({time.perf_counter() - began:.0f} s)")
    engine.dispose()
    return ids


def bench(name: str, url: str, runs: int, steps: int, points: int, repeat: int) -> None:
    print(f"\n== {name}: {url.split('@')[-1]}")
    engine = make_engine(url)
    migrate_to_head(engine)
    ensure_run(make_session_factory(engine), steps)
    engine.dispose()
    ids = clone_runs(url, runs)
    settings = Settings(database_url=url, poll_interval=0, metrics_dir=Path("/nonexistent"))
    jobs = ",".join(ids)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        cases = (
            (
                f"{runs} runs, 2 series",
                f"/api/compare?jobs={jobs}&max_points={points}&fields={FIELDS}",
            ),
            (f"{runs} runs, every series", f"/api/compare?jobs={jobs}&max_points={points}"),
            (
                f"{runs} runs, 2 series, x=time",
                f"/api/compare?jobs={jobs}&max_points={points}&fields={FIELDS}&x=time",
            ),
            (
                f"{runs} runs, 2 series, smoothing=0.9",
                f"/api/compare?jobs={jobs}&max_points={points}&fields={FIELDS}&smoothing=0.9",
            ),
        )
        results = {}
        for label, path in cases:
            answer = client.get(path)  # warm: connection pool, caches
            assert answer.status_code == 200, answer.text
            best, median, response = timed(partial(client.get, path), repeat)
            body = response.json()
            counts = {entry["count"] for entry in body["jobs"]}
            results[label] = best
            print(
                f"GET /api/compare, {label}: best {ms(best)}, median {ms(median)}"
                f"  ({len(body['jobs'])} runs x {max(counts)} points, "
                f"{len(response.content) // 1024} KiB)"
            )

        def one_by_one() -> None:
            for job_id in ids:
                client.get(f"/api/monitoring/{job_id}/metrics?max_points={points}&fields={FIELDS}")

        one_by_one()
        best, median, _ = timed(one_by_one, repeat)
        ours = results[f"{runs} runs, 2 series"]
        print(
            f"alternative: {runs} x GET /metrics?max_points={points}, back to back: "
            f"best {ms(best)}, median {ms(median)}  (compare: {best / ours:.2f}x faster)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--points", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sqlite-url", default="sqlite:///./bench_history.db")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    bench("SQLite", args.sqlite_url, args.runs, args.steps, args.points, args.repeat)
    if not args.skip_postgres:
        try:
            bench("PostgreSQL", args.postgres_url, args.runs, args.steps, args.points, args.repeat)
        except Exception as exc:  # a missing server is reported, not fatal
            print(f"PostgreSQL skipped: {exc.__class__.__name__}: {exc}")


if __name__ == "__main__":
    main()
