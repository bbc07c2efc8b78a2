"""Importing an MLflow run: ours against reading its rows with one SQL query.

    .venv/bin/python benchmarks/bench_mlflow_import.py [--rows 1000000] [--keys 20]

MLflow (`mlflow-skinny`, in the dev extra) creates a SQLite tracking store and
a run and logs its first steps itself; the rest of the `--rows` metric rows
(`--keys` keys a step) are then inserted into MLflow's own `metrics` table in
the same layout (MLflow's own writer takes minutes per million rows). Side by
side in one run:

- **one SQL query**: `SELECT key, value, timestamp, step, is_nan FROM metrics
  WHERE run_uuid = ?`, every row fetched into Python (sqlite3): the floor;
- **ours**: what `training-platform import mlflow.db` does: the run registered
  as an MLflow job in a fresh SQLite platform database and read to its end by
  the server's sync service (rows by `rowid`, grouped into one record per
  step, stored with their rollups, each batch its own exactly-once transaction;
  a worker process reads the next batch while one is stored, so the ratio
  depends on a second core being free).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tensorboard_read import import_into_fresh_database

WRITE_RUN = """
import mlflow, sys
mlflow.set_tracking_uri(sys.argv[1])
mlflow.set_experiment("bench")
with mlflow.start_run(run_name="bench") as run:
    mlflow.log_params({"lr": 1e-5})
    for step in range(3):
        mlflow.log_metrics({f"group{k % 4}/series{k}": 0.1 * step for k in range(int(sys.argv[2]))},
                           step=step)
    print(run.info.run_id)
"""


def make_store(directory: Path, rows: int, keys: int) -> tuple[Path, str]:
    path = directory / "mlflow.db"
    env = {**os.environ, "GIT_PYTHON_REFRESH": "quiet"}
    out = subprocess.run(
        [sys.executable, "-c", WRITE_RUN, f"sqlite:///{path}", str(keys)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout  # fmt: skip
    run_id = out.split()[-1]
    with sqlite3.connect(path) as connection:
        steps = rows // keys
        stamp = int(time.time() * 1000)
        connection.executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)"
            " VALUES (?, ?, ?, ?, ?, 0)",
            (
                (f"group{k % 4}/series{k}", 0.001 * step * (k + 1), stamp + step, run_id, step)
                for step in range(3, steps)
                for k in range(keys)
            ),
        )
    return path, run_id


def one_query(path: Path, run_id: str) -> int:
    with sqlite3.connect(path) as connection:
        return len(
            connection.execute(
                "SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = ?",
                (run_id,),
            ).fetchall()
        )


def ours(path: Path, run_id: str) -> tuple[int, float]:
    return import_into_fresh_database(format="mlflow", tracking_uri=f"sqlite:///{path}", run=run_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        path, run_id = make_store(Path(scratch), args.rows, args.keys)
        print(f"{args.rows:,} metric rows ({args.keys} keys a step) in MLflow's SQLite store "
              f"(made in {time.perf_counter() - started:.1f} s)")  # fmt: skip
        floor = None
        for name, read in (("one SQL query, rows into Python", one_query),
                           ("ours: import (records stored)", ours)):  # fmt: skip
            started = time.perf_counter()
            count = read(path, run_id)
            elapsed = time.perf_counter() - started
            if isinstance(count, tuple):  # (rows, seconds the import itself took)
                count, elapsed = count
            floor = floor or elapsed
            print(f"{name:<36} {elapsed:8.2f} s  {args.rows / elapsed:>11,.0f} rows/s  "
                  f"speed {floor / elapsed:5.2f}x the query's  ({count:,} out)")  # fmt: skip


if __name__ == "__main__":
    main()
