"""JSONL -> SQL ingestion, side by side with the raw alternatives, in one run.

    .venv/bin/python benchmarks/bench_ingest.py [--records 200000] [--big-lines 1000000]

Prints records/s for:
  * SQLite: our end-to-end sync (read + parse + upsert + offset commit) vs raw
    `sqlite3.executemany` of the same, already-built rows (the floor), and vs
    SQLAlchemy ORM one-object-per-row (what a naive persister does);
  * PostgreSQL (when reachable): our sync vs psycopg `executemany` and `COPY`
    of pre-built rows;
  * incremental sync of 100 new lines into a 1k-line vs a 1M-line file.
The machine is shared and noisy: read the ratios, not the absolute numbers.
Each side runs `--rounds` times, interleaved with the others so that all see
the same machine, and the best run of each is compared (as `timeit` does: the
slower runs measure the neighbours); the per-round ratios are printed too.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from unittest.mock import patch

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_platform.callbacks.wire.lines import decode_line, encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.ingest import metrics_file as metrics_persister
from training_platform.ingest.metrics_file import sync_metrics_from_file
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.registry import discover_jobs
from training_platform.store.database import (
    make_engine,
    make_session_factory,
    migrate_to_head,
)
from training_platform.store.metric_rows import ROW_KEYS, record_to_params
from training_platform.store.models import TrainingMetric

JOB = "bench"
POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def realistic_line(step: int) -> bytes:
    """~20 scalars, as a PPO step logs them (contract.md's example record plus extras)."""
    return encode_record(
        build_record(
            step,
            {
                "loss": {"actor_loss": 2.5 - step * 1e-6, "critic_loss": 1.2, "total_loss": 3.7},
                "reward": {"mean": 0.5, "std": 0.1, "max": 0.7, "min": 0.3},
                "kl": {"mean": 0.1, "max": 0.15},
                "gradient": {"actor_norm": 1.5, "critic_norm": 0.8},
                "performance": {
                    "tokens_per_second": 1000.0,
                    "step_time": 2.5,
                    "gpu_memory_allocated": 40.5,
                },
                "timing": {"rollout": 1.2, "reward": 0.3, "update_actor": 0.7},
                "extra": {"actor/entropy": 0.91, "response_length/mean": 312.0},
            },
            timestamp=1_704_672_000.0 + step,
        )
    )


def write_jsonl(path: Path, start: int, count: int) -> None:
    with path.open("ab") as handle:
        for base in range(start, start + count, 10_000):
            stop = min(base + 10_000, start + count)
            handle.write(b"".join(realistic_line(step) for step in range(base, stop)))


def migrated(url: str) -> sessionmaker[Session]:
    engine = make_engine(url)
    migrate_to_head(engine)
    return make_session_factory(engine)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def our_sync(factory: sessionmaker[Session], directory: Path, *, rollups: bool = True) -> float:
    """Seconds for one end-to-end sync of the whole file into a fresh database.

    `rollups=False` skips the downsampling buckets: a measurement of where
    the time goes (issue 2's ingestion, before issue 5 added them to the
    transaction), never a mode of the product.
    """
    with factory.begin() as session:
        discover_jobs(session, directory)
    reader = LocalMetricsReader(JOB, directory)
    try:
        if rollups:
            return timed(lambda: sync_metrics_from_file(factory, JOB, reader))
        with patch.object(metrics_persister, "refresh_rollups", lambda *_, **__: None):
            return timed(lambda: sync_metrics_from_file(factory, JOB, reader))
    finally:
        reader.close()


def built_rows(path: Path) -> list[list[object]]:
    with path.open("rb") as handle:
        return [record_to_params(JOB, decode_line(line[:-1]), 0.0) for line in handle]


def insert_sql(marker: str) -> str:
    columns = ", ".join(f'"{key}"' for key in ROW_KEYS)
    return (
        f"INSERT INTO training_metrics ({columns}) VALUES ({', '.join([marker] * len(ROW_KEYS))})"
    )


def seed_job(session: Session) -> None:
    session.execute(
        text(
            "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected, created_at)"
            " VALUES (:j, 'local', false, 'pending', false, 0)"
        ),
        {"j": JOB},
    )


def bench_sqlite(work: Path, path: Path, records: int, rounds: int) -> None:
    rows = built_rows(path)
    ours: list[float] = []
    bare: list[float] = []  # without the rollups
    floors: list[float] = []
    for round_ in range(rounds):  # interleaved: both sides see the same machine
        ours.append(our_sync(migrated(f"sqlite:///{work / f'ours{round_}.db'}"), path.parent))
        bare.append(
            our_sync(migrated(f"sqlite:///{work / f'bare{round_}.db'}"), path.parent, rollups=False)
        )
        raw_factory = migrated(f"sqlite:///{work / f'raw{round_}.db'}")
        with raw_factory.begin() as session:
            seed_job(session)
        raw = sqlite3.connect(work / f"raw{round_}.db")
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=NORMAL")

        def raw_insert(raw: sqlite3.Connection = raw) -> None:
            with raw:
                raw.executemany(insert_sql("?"), rows)

        floors.append(timed(raw_insert))
        raw.close()
    floor = min(floors)

    orm_count = min(records, 20_000)
    orm_factory = migrated(f"sqlite:///{work / 'orm.db'}")
    with orm_factory.begin() as session:
        seed_job(session)

    def orm_insert() -> None:
        with orm_factory.begin() as session:
            for row in rows[:orm_count]:
                values = dict(zip(ROW_KEYS, row, strict=True))
                for key in ("timing", "extra", "other", "anomalies", "nonfinite"):
                    values[key] = None  # keep the ORM's JSON work out of its favour
                session.add(TrainingMetric(**values))

    orm = timed(orm_insert) * records / orm_count

    print(f"\nSQLite, {records:,} records, best of {rounds} interleaved rounds")
    report("ours: JSONL -> SQLite end to end", records, min(ours), floor)
    report("  the same without the rollups (not a mode)", records, min(bare), floor)
    report("raw sqlite3 executemany (pre-built rows)", records, floor, floor)
    report(f"SQLAlchemy ORM, 1 object/row ({orm_count:,})", records, orm, floor)
    print_rounds(ours, floors)


def print_rounds(ours: list[float], floors: list[float]) -> None:
    ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(ours, floors, strict=True))
    print(f"  per-round ours/floor: {ratios}")


def bench_postgres(path: Path, records: int, rounds: int) -> None:
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        print(f"\nPostgreSQL skipped: not reachable at {POSTGRES_URL} ({exc.__class__.__name__})")
        return
    names = [f"tp_bench_{uuid.uuid4().hex[:8]}" for _ in range(3 * rounds)]
    with admin.connect() as connection:
        for name in names:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    urls = [make_url(POSTGRES_URL).set(database=n).render_as_string(False) for n in names]
    try:
        rows = built_rows(path)
        times: dict[str, list[float]] = {"ours": [], "executemany": [], "copy": []}
        for round_ in range(rounds):  # interleaved: all three see the same machine
            for label, url in zip(times, urls[3 * round_ : 3 * round_ + 3], strict=True):
                if label == "ours":
                    ours_factory = migrated(url)
                    times[label].append(our_sync(ours_factory, path.parent))
                    ours_factory.kw["bind"].dispose()
                    continue
                factory = migrated(url)
                with factory.begin() as session:
                    seed_job(session)
                engine = factory.kw["bind"]
                with engine.connect() as connection:
                    cursor = connection.connection.driver_connection.cursor()
                    if label == "executemany":
                        elapsed = timed(partial(cursor.executemany, insert_sql("%s"), rows))
                    else:
                        columns = ", ".join(f'"{key}"' for key in ROW_KEYS)

                        def copy(c=cursor, columns=columns) -> None:
                            with c.copy(f"COPY training_metrics ({columns}) FROM STDIN") as stream:
                                for row in rows:
                                    stream.write_row(row)

                        elapsed = timed(copy)
                    connection.connection.driver_connection.commit()
                    times[label].append(elapsed)
                engine.dispose()
        best = {label: min(values) for label, values in times.items()}
        print(f"\nPostgreSQL, {records:,} records, best of {rounds} interleaved rounds")
        report("ours: JSONL -> PostgreSQL end to end", records, best["ours"], best["copy"])
        report("psycopg executemany (pre-built rows)", records, best["executemany"], best["copy"])
        report("psycopg COPY (pre-built rows)", records, best["copy"], best["copy"])
        print_rounds(times["ours"], times["copy"])
    finally:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def bench_incremental(work: Path, big_lines: int, rounds: int = 15) -> None:
    print(f"\nIncremental sync of 100 new lines (SQLite), median of {rounds}, interleaved")
    setups = []
    for size in (1_000, big_lines):
        directory = work / f"inc_{size}"
        directory.mkdir()
        path = directory / f"{JOB}_metrics.jsonl"
        write_jsonl(path, 0, size)
        factory = migrated(f"sqlite:///{work / f'inc_{size}.db'}")
        our_sync(factory, directory)  # catch up once
        setups.append((size, path, factory, LocalMetricsReader(JOB, directory)))
    # Alternate the two files round by round, so both see the same machine
    # (this one is shared: its speed drifts by tens of percent within a minute).
    samples: dict[int, list[float]] = {size: [] for size, *_ in setups}
    for round_ in range(rounds):
        for size, path, factory, reader in setups:
            write_jsonl(path, size + 100 * round_, 100)
            samples[size].append(timed(partial(sync_metrics_from_file, factory, JOB, reader)))
    for *_, reader in setups:
        reader.close()
    small, big = (statistics.median(samples[size]) for size, *_ in setups)
    print(f"  {'1k-line file':<40} {small * 1000:8.2f} ms")
    print(f"  {f'{big_lines:,}-line file':<40} {big * 1000:8.2f} ms")
    print(f"  ratio big/small: {big / small:.2f}x (target <= 1.5x)")


def report(label: str, records: int, seconds: float, floor: float) -> None:
    print(f"  {label:<48} {records / seconds:>10,.0f} rec/s   {seconds / floor:5.2f}x floor")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--big-lines", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best is kept")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        path = work / "data" / f"{JOB}_metrics.jsonl"
        write_jsonl(path, 0, args.records)
        print(f"{args.records:,} realistic lines, {path.stat().st_size / 1e6:.0f} MB")
        bench_sqlite(work, path, args.records, args.rounds)
        bench_postgres(path, args.records, args.rounds)
        bench_incremental(work, args.big_lines)


if __name__ == "__main__":
    main()
