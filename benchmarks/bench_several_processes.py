"""Several server processes on one PostgreSQL database: cross-process live latency.

    .venv/bin/python benchmarks/bench_several_processes.py [--processes 1,2,4]
        [--jobs 20] [--rate 5] [--seconds 20] [--viewers 0] [--admin-url ...]

For each N: a scratch database, N `training-platform serve` processes on it
and one metrics directory (all polling every 0.2 s and watching the files;
each job is ingested by the holder of its lease), one WebSocket client per
(process, job), and a writer
appending one line per job at `--rate` steps/s, each stamped with
`time.time()` just before its write. Latency = arrival at a client - stamp,
over every record at every client; a client connected to a process that did
not ingest the record gets it through the outbox and a notification. Also
counted: records missing or repeated at any client (the goal is 0 and 0),
and the CPU seconds each server process used.

Everything shares this machine's cores (2 here), writer and clients included:
compare N against N = 1 measured in the same run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil
import websockets
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record

ADMIN_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def line(step: int) -> bytes:
    metrics = {"reward": {"mean": 0.5}, "loss": {"actor_loss": 0.1}, "kl": {"mean": 0.02}}
    return encode_record(build_record(step, metrics, timestamp=time.time()))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scratch_database(admin_url: str) -> str:
    name = f"bench_procs_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_database(admin_url: str, url: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def start(
    url: str, metrics: Path, log: Path, **extra_env: str
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PLATFORM_METRICS_DIR": str(metrics),
        "PLATFORM_HOST": "127.0.0.1",
        "PLATFORM_PORT": str(port),
        "PLATFORM_POLL_INTERVAL": "0.2",
        **extra_env,
    }
    env.pop("PLATFORM_API_TOKEN", None)
    command = [str(Path(sys.executable).parent / "training-platform"), "serve", "--log-level",
               "warning"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process, port
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each (SIGCONT first: a stopped process must hear it), then reap."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


async def client(port: int, job: str, last: int, seen: dict[int, list[float]]) -> None:
    url = f"ws://127.0.0.1:{port}/api/monitoring/{job}/live"
    async with websockets.connect(url, open_timeout=20, max_size=None) as ws:
        while True:
            message = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
            if message["type"] != "metric":
                continue
            data = message["data"]
            seen.setdefault(data["step"], []).append(time.time() - data["timestamp"])
            if data["step"] >= last:
                return


async def write(metrics: Path, jobs: list[str], steps: int, rate: float) -> None:
    for step in range(steps):
        for job in jobs:
            with (metrics / f"{job}_metrics.jsonl").open("ab") as handle:
                handle.write(line(step))
        await asyncio.sleep(1.0 / rate)


def subscriptions(ports: list[int], jobs: list[str], viewers: int) -> list[tuple[int, str]]:
    """(port, job) of every socket: one per (process, job), then `viewers` people
    spread over the processes, 80% following one job, 20% a dashboard of up to
    20 jobs (a socket per job, as the dashboard opens them)."""
    sockets = [(port, job) for port in ports for job in jobs]
    for viewer in range(viewers):
        port = ports[viewer % len(ports)]
        if viewer % 5 == 4:
            sockets += [(port, job) for job in jobs[:20]]
        else:
            sockets.append((port, jobs[viewer % len(jobs)]))
    return sockets


async def measure(
    ports: list[int], metrics: Path, jobs: list[str], steps: int, rate: float, viewers: int = 0
) -> dict[str, Any]:
    seen: dict[int, dict[int, list[float]]] = {}
    clients = []
    for index, (port, job) in enumerate(subscriptions(ports, jobs, viewers)):
        seen[index] = {}
        clients.append(asyncio.create_task(client(port, job, steps - 1, seen[index])))
    await asyncio.sleep(2.0 + len(clients) / 200)  # subscribed
    await write(metrics, jobs, steps, rate)
    await asyncio.wait_for(asyncio.gather(*clients), timeout=120)
    latencies = [value for per in seen.values() for values in per.values() for value in values]
    missing = sum(1 for per in seen.values() for step in range(steps) if step not in per)
    repeated = sum(len(values) - 1 for per in seen.values() for values in per.values())
    latencies.sort()
    return {
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "missing": missing,
        "repeated": repeated,
        "records": len(latencies),
        "sockets": len(clients),
    }


def run(n: int, args: argparse.Namespace) -> dict[str, Any]:
    url = scratch_database(args.admin_url)
    scratch = Path(tempfile.mkdtemp(prefix="bench-procs-"))
    metrics = scratch / "metrics"
    metrics.mkdir()
    jobs = [f"job{i:03d}" for i in range(args.jobs)]
    for job in jobs:
        (metrics / f"{job}_metrics.jsonl").write_bytes(b"")
    servers = []
    try:
        servers = [start(url, metrics, scratch / f"server{i}.log") for i in range(n)]
        httpx.post(
            f"http://127.0.0.1:{servers[0][1]}/api/monitoring/{jobs[0]}/metrics/sync", timeout=60
        )
        time.sleep(1.0)  # every job discovered by every process
        cpu_before = [psutil.Process(p.pid).cpu_times() for p, _ in servers]
        steps = int(args.seconds * args.rate)
        ports = [port for _, port in servers]
        result = asyncio.run(measure(ports, metrics, jobs, steps, args.rate, args.viewers))
        result["rss_mb_per_process"] = statistics.fmean(
            psutil.Process(p.pid).memory_info().rss / 2**20 for p, _ in servers
        )
        cpu = [
            (after.user + after.system) - (before.user + before.system)
            for before, after in zip(
                cpu_before, [psutil.Process(p.pid).cpu_times() for p, _ in servers], strict=True
            )
        ]
        result["cpu_s_per_process"] = statistics.fmean(cpu)
        return result
    finally:
        stop_all([process for process, _ in servers])
        drop_database(args.admin_url, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--rate", type=float, default=5.0, help="steps per second per job")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--viewers",
        type=int,
        default=0,
        help="more people watching: 80%% one job each, 20%% a dashboard of 20 jobs",
    )
    parser.add_argument("--admin-url", default=ADMIN_URL)
    args = parser.parse_args()
    print(
        f"{args.jobs} jobs at {args.rate:g} steps/s for {args.seconds:g} s; "
        f"one client per (process, job) and {args.viewers} viewers"
    )
    print(
        f"{'N':>3} {'sockets':>8} {'records':>8} {'p50 ms':>8} {'p99 ms':>8} {'missing':>8} "
        f"{'repeated':>9} {'CPU s/proc':>11} {'RSS MB/proc':>12}"
    )
    for n in [int(value) for value in args.processes.split(",")]:
        r = run(n, args)
        print(
            f"{n:>3} {r['sockets']:>8} {r['records']:>8} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['missing']:>8} {r['repeated']:>9} {r['cpu_s_per_process']:>11.2f} "
            f"{r['rss_mb_per_process']:>12.0f}"
        )


if __name__ == "__main__":
    main()
