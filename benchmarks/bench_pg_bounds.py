"""What one PostgreSQL bounds for several server processes: notifications and rows.

    .venv/bin/python benchmarks/bench_pg_bounds.py [--notifications 20000] [--rows 200000]

1. **Notifications.** Each committed batch is announced with one
   `pg_notify(channel, '<job> <seq>')` after its commit (docs/live.md). One
   connection sends `--notifications` of them as fast as it can while a
   listening connection (as every server process holds) receives them:
   notifications per second, and the server's CPU per notification.
2. **Rows across processes.** 1, 2 and 4 writer processes, each upserting
   metric rows in batches of 500 (as the persister does, one transaction a
   batch) into one table of a scratch database: rows per second in all.

Compare the rates with the load the platform puts on it: 1,000 jobs at one
step per second is 1,000 rows and at most 1,000 notifications per second.
"""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time

import psutil
import psycopg
from bench_several_processes import ADMIN_URL, drop_database, scratch_database
from sqlalchemy.engine import make_url

BATCH = 500


def libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_cpu() -> float:
    total = 0.0
    for process in psutil.process_iter(["name", "cpu_times"]):
        if process.info["name"] in ("postgres", "postgresql") and process.info["cpu_times"]:
            times = process.info["cpu_times"]
            total += times.user + times.system
    return total


def notifications(url: str, count: int) -> tuple[float, float]:
    """(notifications per second delivered, server CPU µs per notification)."""
    received = 0
    done = threading.Event()
    ready = threading.Event()

    def listen() -> None:
        nonlocal received
        with psycopg.connect(libpq(url), autocommit=True) as connection:
            connection.execute("LISTEN bench_live")
            ready.set()
            for _ in connection.notifies(timeout=60):
                received += 1
                if received >= count:
                    break
        done.set()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    ready.wait(10)
    cpu_before = postgres_cpu()
    started = time.perf_counter()
    with psycopg.connect(libpq(url), autocommit=True) as sender:
        for index in range(count):
            sender.execute(
                "SELECT pg_notify('bench_live', %s)", (f"job{index % 1000:04d} {index}",)
            )
    done.wait(120)
    elapsed = time.perf_counter() - started
    cpu = postgres_cpu() - cpu_before
    return received / elapsed, 1e6 * cpu / max(1, received)


def writer(url: str, offset: int, rows: int) -> None:
    with psycopg.connect(libpq(url)) as connection:
        for start in range(0, rows, BATCH):
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO metrics (job_id, step, record) VALUES (%s, %s, %s) "
                    "ON CONFLICT (job_id, step) DO UPDATE SET record = excluded.record",
                    [
                        (f"job{(offset + i) % 1000:04d}", offset + i, '{"reward": {"mean": 0.5}}')
                        for i in range(start, min(start + BATCH, rows))
                    ],
                )
            connection.commit()


def rows_per_second(url: str, writers: int, rows: int) -> float:
    with psycopg.connect(libpq(url), autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS metrics")
        connection.execute(
            "CREATE TABLE metrics (job_id text, step bigint, record jsonb, "
            "PRIMARY KEY (job_id, step))"
        )
    share = rows // writers
    processes = [
        multiprocessing.Process(target=writer, args=(url, index * share * 10, share))
        for index in range(writers)
    ]
    started = time.perf_counter()
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    return share * writers / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notifications", type=int, default=20_000)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--admin-url", default=ADMIN_URL)
    args = parser.parse_args()
    url = scratch_database(args.admin_url)
    try:
        rate, cost = notifications(url, args.notifications)
        print(f"notifications: {rate:,.0f}/s delivered, {cost:.0f} µs of server CPU each")
        for writers in (1, 2, 4):
            print(f"rows, {writers} writer(s): {rows_per_second(url, writers, args.rows):,.0f}/s")
    finally:
        drop_database(args.admin_url, url)


if __name__ == "__main__":
    main()
