"""System samples on the platform side: ingest and bytes per sample, and the 30-day query.

Run: ``python benchmarks/bench_system.py`` (SQLite and, when reachable, the
local PostgreSQL; about five minutes). ``--samples``, ``--days``, ``--gpus``,
``--only sqlite|postgresql`` change it.

1. **Ingest and storage**: ``--samples`` samples of one host with ``--gpus``
   GPUs, written by the trainer side's own encoder, synced end to end (read,
   decode, layout, minute blocks, minute and hour rollups) by the platform;
   side by side with the floor of one ``executemany`` of the same samples,
   decoded beforehand, a row each with their values packed as float32, and
   with what the same samples cost as JSON lines. Bytes per sample in the
   database (SQLite: file growth; PostgreSQL: the tables' total relation
   size, both after a VACUUM: blocks rewritten as a minute fills leave free
   pages behind that the database reuses), and per metric record of a typical
   PPO step stored the platform's way, so "a month of system samples" can be
   set against "the run's metrics".
2. **The 30-day query**: a run of ``--days`` days at one sample a second and
   ``--gpus`` GPUs (2.6 million samples for 30 days) loaded in bulk (minute
   blocks and rollups as ingestion makes them: loading that many through
   the sync would take this machine a quarter of an hour), then
   `GET .../system` as the dashboard asks it (the query and its JSON body): the whole run, the last
   day and the last hour, at ``max_points=2000``; median of 5 runs each. The
   goal: 100 ms, like the metric history's.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ingest import realistic_line

from training_platform.callbacks.system.sample import build_sample, encode_sample
from training_platform.history.system_query import ANSWER_JSON, system_history
from training_platform.ingest.host_files import HostFiles
from training_platform.ingest.registry import discover_jobs
from training_platform.ingest.sync_service import SyncService
from training_platform.ingest.system_file import SYSTEM
from training_platform.ingest.system_lines import decode_system_line
from training_platform.settings import Settings
from training_platform.store.database import (
    make_engine,
    make_session_factory,
    migrate_to_head,
)
from training_platform.store.models import (
    Job,
    SystemLayout,
    SystemRollup,
)
from training_platform.store.system_blocks import BLOCK_SECONDS
from training_platform.store.system_values import (
    ROLLUP_WIDTHS,
    layout_digest,
    ordered_values,
    pack_block,
    pack_stats,
)

POSTGRES = os.environ.get("TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
JOB = "bench"
SYSTEM_TABLES = ("system_blocks", "system_rollups", "system_layouts")


def sample_line(i: int, gpus: int, t0: float) -> bytes:
    """One sample as a busy 8-GPU node gives it: utilisation, power, clocks and
    rates that move every sample (seeded noise), memory and limits that hardly do."""
    rng = random.Random(i)
    groups = {
        "cpu": {"percent": round(rng.uniform(600, 900), 1), "count": 64, "load1": 7.1},
        "memory": {"used_gib": round(81.2 + rng.random(), 2), "total_gib": 503.6, "percent": 16.1},
        "disk": {"used_percent": 71.0, "read_mib_s": round(rng.expovariate(0.1), 2)},
        "network": {
            "recv_mib_s": round(rng.uniform(100, 180), 2),
            "sent_mib_s": round(rng.uniform(80, 120), 2),
        },
    }
    devices = [
        {
            "index": g,
            "name": "NVIDIA H200",
            "utilization": float(rng.choice((0, 35, 97, 100, 100, 98))),
            "memory_used_gib": round(120.0 + rng.random() * 4, 2),
            "memory_total_gib": 139.8,
            "power_w": round(rng.uniform(150, 700), 1),
            "power_limit_w": 700.0,
            "temperature_c": float(55 + (i // 60 + g) % 15),
            "throttle": [],
        }
        for g in range(gpus)
    ]
    return encode_sample(
        build_sample(timestamp=t0 + i, host="gpu-node-1", step=i // 10, groups=groups, gpus=devices)
    )


def database(kind: str, directory: Path) -> tuple[str, Callable[[], None]]:
    """A fresh, migrated database's URL and how to drop it."""
    if kind == "sqlite":
        path = directory / f"{uuid.uuid4().hex}.db"
        return f"sqlite:///{path}", lambda: None
    name = f"bench_system_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return url, drop


def stored_bytes(factory: sessionmaker[Session], url: str, tables: tuple[str, ...]) -> int:
    """The tables' size once compacted (SQLite: the whole file; PostgreSQL: theirs)."""
    engine = factory.kw["bind"]
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        if url.startswith("sqlite"):
            connection.execute(text("VACUUM"))
            connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))  # into the file
            path = make_url(url).database
            assert path is not None
            return os.path.getsize(path)
        total = 0
        for table in tables:
            connection.execute(text(f"VACUUM FULL {table}"))
            total += connection.execute(
                text(f"SELECT pg_total_relation_size('{table}')")
            ).scalar_one()
        return int(total)


def ingest(kind: str, directory: Path, samples: int, gpus: int) -> dict[str, float]:
    url, drop = database(kind, directory)
    engine = make_engine(url)
    try:
        migrate_to_head(engine)
        factory = make_session_factory(engine)
        metrics_dir = directory / f"run-{kind}"
        metrics_dir.mkdir()
        (metrics_dir / f"{JOB}_metrics.jsonl").write_bytes(b"")
        t0 = time.time() - samples - 60
        lines = [sample_line(i, gpus, t0) for i in range(samples)]
        (metrics_dir / f"{JOB}_system.jsonl").write_bytes(b"".join(lines))
        with factory.begin() as session:
            discover_jobs(session, metrics_dir)
        settings = Settings(database_url=url, metrics_dir=metrics_dir)
        service = SyncService(factory, settings, line_kinds=[SYSTEM], host_files=HostFiles())
        before = stored_bytes(factory, url, SYSTEM_TABLES)
        start = time.perf_counter()
        service.sync_job(JOB)
        ours = time.perf_counter() - start
        service.close()
        ours_bytes = stored_bytes(factory, url, SYSTEM_TABLES) - before
        floor, floor_bytes = _floor(factory, url, lines)
        metric_bytes = _metric_row_bytes(factory, url, metrics_dir)
        return {
            "ours_s": ours,
            "floor_s": floor,
            "bytes": ours_bytes / samples,
            "floor_bytes": floor_bytes / samples,
            "json_bytes": sum(map(len, lines)) / samples,
            "metric_bytes": metric_bytes,
        }
    finally:
        engine.dispose()
        drop()


def _floor(factory: sessionmaker[Session], url: str, lines: list[bytes]) -> tuple[float, int]:
    """One executemany of the samples (decoded beforehand), a row each, float32-packed."""
    decoded = [decode_system_line(line.rstrip(b"\n")) for line in lines]
    series = sorted(decoded[-1]["values"])
    rows = [
        (1, d["timestamp"], d["step"], ordered_values(series, d["values"]).tobytes())
        for d in decoded
    ]
    sqlite = url.startswith("sqlite")
    with factory.begin() as session:
        session.execute(
            text(
                "CREATE TABLE floor_samples (layout_id INTEGER NOT NULL, timestamp FLOAT NOT NULL,"
                " step BIGINT, vals " + ("BLOB" if sqlite else "BYTEA") + " NOT NULL,"
                " PRIMARY KEY (layout_id, timestamp))" + (" WITHOUT ROWID" if sqlite else "")
            )
        )
    before = stored_bytes(factory, url, ("floor_samples",))
    with factory() as session:
        connection = session.connection().connection.dbapi_connection
        assert connection is not None
        cursor = connection.cursor()
        mark = "?" if sqlite else "%s"
        start = time.perf_counter()
        cursor.executemany(f"INSERT INTO floor_samples VALUES ({', '.join([mark] * 4)})", rows)
        connection.commit()
        seconds = time.perf_counter() - start
    return seconds, stored_bytes(factory, url, ("floor_samples",)) - before


def _metric_row_bytes(factory: sessionmaker[Session], url: str, metrics_dir: Path) -> float:
    """Bytes per metric record (a PPO step of ~20 scalars), stored the platform's way."""
    count = 20_000
    path = metrics_dir / f"{JOB}_metrics.jsonl"
    path.write_bytes(b"".join(realistic_line(step) for step in range(count)))
    tables = ("training_metrics", "metric_rollups", "rollup_columns")
    before = stored_bytes(factory, url, tables)
    settings = Settings(database_url=url, metrics_dir=metrics_dir)
    service = SyncService(factory, settings)
    service.sync_job(JOB)
    service.close()
    return (stored_bytes(factory, url, tables) - before) / count


def load_month(factory: sessionmaker[Session], days: int, gpus: int) -> tuple[float, float]:
    """`days` of one sample a second, in bulk: packed rows and their rollups."""
    decoded = decode_system_line(sample_line(0, gpus, time.time() - 10).rstrip(b"\n"))
    series = sorted(decoded["values"])
    end = math.floor(time.time() / 3600) * 3600.0  # whole hours: chunks hold whole minutes
    t0 = end - days * 86_400
    with factory.begin() as session:
        session.add(Job(job_id=JOB, source="local", metrics_dir="/nonexistent", created_at=t0))
        session.flush()
        layout = SystemLayout(
            job_id=JOB, host="gpu-node-1", digest=layout_digest(series), series=series
        )
        session.add(layout)
        session.flush()
        layout_id = layout.id
    total = days * 86_400
    chunk = 36_000  # ten hours: whole minutes and hours
    stats: dict[tuple[int, int], list[Any]] = {}
    with factory() as session:
        connection = session.connection().connection.dbapi_connection
        assert connection is not None
        cursor = connection.cursor()
        mark = "?" if factory.kw["bind"].dialect.name == "sqlite" else "%s"
        statement = (
            "INSERT INTO system_blocks (layout_id, minute, sample_count, data) "
            f"VALUES ({', '.join([mark] * 4)})"
        )
        base_row = ordered_values(series, decoded["values"])
        rng = np.random.default_rng(0)
        noisy = [  # what moves every sample on a busy node (see sample_line)
            (series.index(name), low, high)
            for name, low, high in (
                ("cpu.percent", 600.0, 900.0),
                ("network.recv_mib_s", 100.0, 180.0),
                ("network.sent_mib_s", 80.0, 120.0),
                *((f"gpus.{g}.utilization", 0.0, 100.0) for g in range(gpus)),
                *((f"gpus.{g}.power_w", 150.0, 700.0) for g in range(gpus)),
            )
        ]
        for base in range(0, total, chunk):
            index = np.arange(base, min(base + chunk, total))
            matrix = np.tile(base_row, (len(index), 1))
            for column, low, high in noisy:
                matrix[:, column] = np.round(rng.uniform(low, high, len(index)), 1)
            times = t0 + index
            steps = index // 10
            minutes = np.floor(times / BLOCK_SECONDS).astype(np.int64)
            firsts = np.flatnonzero(np.r_[True, minutes[1:] != minutes[:-1]])
            ends = np.r_[firsts[1:], len(index)]
            rows = [
                (
                    layout_id,
                    int(minutes[a]),
                    int(b - a),
                    pack_block(times[a:b], steps[a:b], matrix[a:b]),
                )
                for a, b in zip(firsts, ends, strict=True)
            ]
            cursor.executemany(statement, rows)
            connection.commit()
            for width in ROLLUP_WIDTHS:  # as ingestion widens them, a bucket at a time
                buckets = np.floor(times / width).astype(np.int64)
                firsts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
                lows = np.fmin.reduceat(matrix, firsts, axis=0)
                highs = np.fmax.reduceat(matrix, firsts, axis=0)
                ends = np.r_[firsts[1:], len(index)]
                for n, first in enumerate(firsts):
                    key = (width, int(buckets[first]))
                    entry = stats.setdefault(key, [0, float(times[first]), None, None])
                    entry[0] += int(ends[n] - first)
                    entry[2] = int(steps[ends[n] - 1])
                    if entry[3] is None:
                        entry[3] = (lows[n], highs[n])
                    else:
                        entry[3] = (np.fmin(entry[3][0], lows[n]), np.fmax(entry[3][1], highs[n]))
    with factory.begin() as session:
        session.execute(
            insert(SystemRollup),
            [
                {
                    "layout_id": layout_id,
                    "width": width,
                    "bucket": bucket,
                    "sample_count": count,
                    "first_timestamp": first,
                    "last_step": step,
                    "stats": pack_stats(*merged),
                }
                for (width, bucket), (count, first, step, merged) in stats.items()
            ],
        )
    return t0, end


def query(kind: str, directory: Path, days: int, gpus: int) -> dict[str, float]:
    url, drop = database(kind, directory)
    engine = make_engine(url)
    try:
        migrate_to_head(engine)
        factory = make_session_factory(engine)
        start = time.perf_counter()
        t0, end = load_month(factory, days, gpus)
        loaded = time.perf_counter() - start
        if kind == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(text("VACUUM ANALYZE"))
        figures = {"load_s": loaded}
        ranges = (("whole run", t0), ("last day", end - 86_400), ("last hour", end - 3600))
        for name, since in ranges:
            times = []
            for _ in range(5):
                started = time.perf_counter()
                with factory() as session:
                    answer = system_history(
                        session, job_id=JOB, start=since, end=end, max_points=2000
                    )
                orjson.dumps(answer, option=ANSWER_JSON)  # the body the endpoint sends
                times.append(time.perf_counter() - started)
            host = answer["hosts"]["gpu-node-1"]
            figures[name] = statistics.median(times)
            figures[f"{name} points"] = host["count"]
            figures[f"{name} source"] = host["source"]  # type: ignore[assignment]
        return figures
    finally:
        engine.dispose()
        drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["sqlite", "postgresql"]
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for kind in kinds:
            figures = ingest(kind, directory, args.samples, args.gpus)
            print(f"\n{kind}: ingest {args.samples:,} samples, 1 host x {args.gpus} GPUs")
            print(
                f"  platform sync       {figures['ours_s']:7.2f} s  "
                f"{args.samples / figures['ours_s']:9,.0f} samples/s  "
                f"{figures['bytes']:6.0f} bytes/sample in the database"
            )
            print(
                f"  executemany (floor) {figures['floor_s']:7.2f} s  "
                f"{args.samples / figures['floor_s']:9,.0f} samples/s  "
                f"{figures['floor_bytes']:6.0f} bytes/sample  "
                f"(ours {figures['ours_s'] / figures['floor_s']:.1f}x the time)"
            )
            print(f"  the samples as JSON lines {figures['json_bytes']:6.0f} bytes/sample")
            print(f"  a metric record (PPO step, 20 scalars) {figures['metric_bytes']:6.0f} bytes")
            month = 30 * 86_400 * figures["bytes"] / 2**30
            print(f"  30 days at 1 s: {month:.2f} GiB of system samples")
            found = query(kind, directory, args.days, args.gpus)
            print(
                f"{kind}: {args.days} days at 1 s x {args.gpus} GPUs "
                f"({args.days * 86_400:,} samples) loaded in {found['load_s']:.0f} s"
            )
            for name in ("whole run", "last day", "last hour"):
                print(
                    f"  GET .../system {name:<10} max_points=2000: "
                    f"{found[name] * 1000:7.1f} ms  ({found[f'{name} points']} points "
                    f"from {found[f'{name} source']})"
                )


if __name__ == "__main__":
    main()
