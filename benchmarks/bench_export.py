"""Exporting a long run (20 series per step) as CSV and Parquet: time and memory.

    .venv/bin/python benchmarks/bench_export.py [--steps 200000 | --steps 1000000]
        [--database-url sqlite:///bench_export.db | postgresql+psycopg://...] [--chunk 2000]

Builds (once; kept in the database and reused) a run of `--steps` records, each
with the 14 numeric columns of docs/contract.md §2 and 6 extras (20 series; a
NaN every 1,000 steps), then prints side by side:

  * our export (`history/export/`, what `GET .../metrics/export` streams and
    `training-platform export` writes): the column pass (the JSON groups'
    shapes only), then chunked keyset reads built column by column and encoded
    as they come; wall time, and the peak of Python allocations while it runs
    (tracemalloc, a separate run: the server's growth for one export, the
    bytes sent being dropped);
  * the floor: one SQL query for every row, written straight by pyarrow
    (Parquet) or csv.writer (CSV), holding the whole run in memory;
  * `Client(database_url=...).run(...).history()` into pandas against
    `pandas.read_parquet` of the exported file.

The machine is shared (2 cores) and noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_platform.callbacks.wire.records import build_record
from training_platform.client import Client
from training_platform.history.export.files import start_export
from training_platform.history.export.sources import CHUNK_ROWS
from training_platform.store.database import make_engine, make_session_factory, migrate_to_head
from training_platform.store.metric_rows import METRIC_COLUMNS, record_to_row
from training_platform.store.models import Job, TrainingMetric

JOB = "bench_export"
BATCH = 20_000
EXTRAS = ("actor/entropy", "response_length/mean", "actor/clipfrac", "lr", "critic/vf", "kl/x")


def _record(step: int) -> dict[str, Any]:
    value = math.nan if step % 1000 == 999 else 1.0 / (step + 1)
    groups = {
        "loss": {"actor_loss": value, "critic_loss": 0.5, "total_loss": 1.5 + value},
        "reward": {"mean": step * 1e-6, "std": 0.1, "max": 1.0, "min": -1.0},
        "kl": {"mean": 0.01, "max": 0.02},
        "gradient": {"actor_norm": 1.2, "critic_norm": 0.7},
        "performance": {"tokens_per_second": 1e4 + step, "step_time": 0.5,
                        "gpu_memory_allocated": 40.0},
        "extra": {name: step * 0.001 + index for index, name in enumerate(EXTRAS)},
    }  # fmt: skip
    return build_record(step, groups, timestamp=1.7e9 + step)


def build(factory: sessionmaker[Session], steps: int) -> None:
    with factory() as session:
        stored = session.scalar(select(func.count()).where(TrainingMetric.job_id == JOB)) or 0
        if stored == steps:
            return
        session.query(TrainingMetric).filter(TrainingMetric.job_id == JOB).delete()
        if session.get(Job, JOB) is None:
            session.add(Job(job_id=JOB, created_at=0.0))
        session.commit()
    began = time.perf_counter()
    for start in range(0, steps, BATCH):
        rows = [
            record_to_row(JOB, _record(step), 1.0)
            for step in range(start, min(steps, start + BATCH))
        ]
        with factory() as session:
            session.execute(insert(TrainingMetric), rows)
            session.commit()
        print(
            f"  built {start + len(rows):,}/{steps:,} ({time.perf_counter() - began:.0f} s)",
            end="\r",
        )
    print()


def ours(factory: sessionmaker[Session], fmt: Any, chunk: int) -> int:
    export = start_export(factory, job_id=JOB, kind="metrics", fmt=fmt, chunk_rows=chunk)
    return sum(len(piece) for piece in export.body)


_FLOOR_COLUMNS = (
    TrainingMetric.step,
    TrainingMetric.timestamp,
    *(getattr(TrainingMetric, name) for name in METRIC_COLUMNS),
    TrainingMetric.extra,
)


def floor(factory: sessionmaker[Session], fmt: str) -> int:
    """One query, every row in memory, written straight (extras flattened, NaN as stored: null)."""
    with factory() as session:
        rows = (
            session.connection()
            .execute(
                select(*_FLOOR_COLUMNS)
                .where(TrainingMetric.job_id == JOB)
                .order_by(TrainingMetric.step)
            )
            .all()
        )
    names = ["step", "timestamp", *METRIC_COLUMNS]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    for extra in EXTRAS:
        columns[f"extra.{extra}"] = [(row[-1] or {}).get(extra) for row in rows]
    if fmt == "parquet":
        sink = io.BytesIO()
        pq.write_table(pa.table(columns), sink, compression="zstd")
        return sink.tell()
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(list(columns))
    writer.writerows(zip(*columns.values(), strict=True))
    return len(out.getvalue())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


def peak_mib(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


class PeakRss:
    """The process's resident set, sampled every 10 ms while a block runs: its growth
    over the start counts what tracemalloc does not see (pyarrow's buffers, the
    drivers' and SQLite's own memory)."""

    def __enter__(self) -> PeakRss:
        self.start = self.peak = _rss_mib()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, _rss_mib())

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mib())

    @property
    def growth(self) -> float:
        return self.peak - self.start


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


CASES = ("ours-csv", "floor-csv", "ours-parquet", "floor-parquet")


def run_case(factory: sessionmaker[Session], case: str, chunk: int) -> dict[str, float]:
    """One case in this (fresh) process: time, bytes, and the resident set's growth."""
    for fmt in ("csv", "parquet"):  # imports (pyarrow's take a second or two) out of the figures
        body = start_export(factory, job_id=JOB, kind="metrics", fmt=fmt, end_step=1000).body
        sum(len(piece) for piece in body)
    who, fmt = case.split("-")
    with PeakRss() as rss:
        seconds, size = timed(lambda: ours(factory, fmt, chunk) if who == "ours" else floor(
            factory, fmt))  # fmt: skip
    return {"seconds": seconds, "bytes": size, "rss": rss.growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--chunk", type=int, default=CHUNK_ROWS)
    parser.add_argument("--skip-memory", action="store_true", help="no tracemalloc runs (slow)")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # one case, in a child
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="bench-export-")
    url = args.database_url or f"sqlite:///{scratch}/bench_export.db"
    engine = make_engine(url)
    migrate_to_head(engine)
    factory = make_session_factory(engine)
    build(factory, args.steps)
    if args.case is not None:
        print(json.dumps(run_case(factory, args.case, args.chunk)))
        return
    print(f"\n== {args.steps:,} steps x 20 series, {url.split('@')[-1]}, chunk {args.chunk:,}")
    print(f"{'':<28}{'time':>9}{'MB out':>9}{'RSS +MiB':>10}{'py peak MiB':>13}")
    for case in CASES:
        # Each case in a process of its own: one case's freed memory is not the next one's.
        child = subprocess.run(
            [sys.executable, __file__, "--steps", str(args.steps), "--database-url", url,
             "--chunk", str(args.chunk), "--case", case],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        figures = json.loads(child.stdout.splitlines()[-1])
        who, fmt = case.split("-")
        peak = "-"
        if not args.skip_memory and who == "ours":
            peak = f"{peak_mib(partial(ours, factory, fmt, args.chunk)):.0f}"
        label = f"ours ({fmt}, streamed)" if who == "ours" else f"floor ({fmt}, one query)"
        print(
            f"{label:<28}{figures['seconds']:>8.1f}s{figures['bytes'] / 1e6:>9.1f}"
            f"{figures['rss']:>10.0f}{peak:>13}"
        )
    path = Path(scratch) / "run.parquet"
    export = start_export(factory, job_id=JOB, kind="metrics", fmt="parquet")
    with path.open("wb") as handle:
        for piece in export.body:
            handle.write(piece)
    with Client(database_url=url) as client:
        seconds, frame = timed(lambda: client.run(JOB).history())
    print(
        f"{'run.history() -> pandas':<28}{seconds:>8.1f}s  ({frame.shape[0]:,} x {frame.shape[1]})"
    )
    seconds, frame = timed(lambda: pd.read_parquet(path))
    shape = f"({frame.shape[0]:,} x {frame.shape[1]})"
    print(f"{'read_parquet(export file)':<28}{seconds:>8.1f}s  {shape}")
    engine.dispose()
    _ = orjson  # the records' JSON is orjson's, like the platform's


if __name__ == "__main__":
    main()
