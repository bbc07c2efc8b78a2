"""Takeover: how long a dead or paused server process's jobs go uningested.

    .venv/bin/python benchmarks/bench_takeover.py [--jobs 20] [--lease 10] [--repeat 3]

Two `training-platform serve` processes on a scratch PostgreSQL database
split `--jobs` jobs by their leases (DESIGN.md §9, docs/live.md "Leases").
Then, `--repeat` times each:

- **kill -9** of one process: the survivor sees the victim's pid gone on this
  host and takes its jobs at its next round (goal: one round, a third of the
  lease);
- **SIGSTOP** of one process (its pid lives on: the lease must expire, as
  for a process on another host or cut off from the database): goal within
  one lease period plus one round.

Measured: seconds from the signal until the survivor holds every job
(`GET /api/instances`, polled every 50 ms), and the gap a live client of the
survivor sees on one of the victim's jobs (a line appended every 100 ms with
its time: the largest append-to-client latency across the takeover).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import websockets
from bench_several_processes import (
    ADMIN_URL,
    drop_database,
    line,
    scratch_database,
    start,
    stop_all,
)


def view(port: int) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/api/instances", timeout=5).json()
    return body


def held(port: int) -> dict[int, set[str]]:
    """pid -> the jobs it holds, per the live instances."""
    return {
        i["pid"]: {job["job_id"] for job in i["jobs"]}
        for i in view(port)["instances"]
        if i["alive"]
    }


def wait_until(condition: Any, timeout: float = 120.0, every: float = 0.05) -> float:
    start_at = time.monotonic()
    while time.monotonic() - start_at < timeout:
        if condition():
            return time.monotonic() - start_at
        time.sleep(every)
    raise TimeoutError("condition not met")


async def gap_seen(port: int, job: str, path: Path, seconds: float) -> float:
    """Append a line to `job` every 100 ms for `seconds`; the largest latency a client
    of `port` sees meanwhile."""
    worst = 0.0
    url = f"ws://127.0.0.1:{port}/api/monitoring/{job}/live"
    async with websockets.connect(url, open_timeout=20, max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), timeout=20)  # the status: subscribed
        step = int(time.time() * 1000)
        deadline = time.monotonic() + seconds

        async def writer() -> None:
            nonlocal step
            while time.monotonic() < deadline:
                with path.open("ab") as handle:
                    handle.write(line(step))
                step += 1
                await asyncio.sleep(0.1)

        task = asyncio.create_task(writer())
        last = None
        while not task.done() or last is None or last < step - 1:
            try:
                message = json.loads(await asyncio.wait_for(ws.recv(), timeout=seconds + 30))
            except TimeoutError:
                break
            if message["type"] == "metric":
                worst = max(worst, time.time() - message["data"]["timestamp"])
                last = message["data"]["step"]
        await task
    return worst


async def takeover(
    how: str, victim: Any, survivor: Any, metrics: Path, lease: float
) -> tuple[float, float]:
    """Signal `victim`; (seconds until `survivor` holds all its jobs, the client's gap)."""
    victims_jobs = held(survivor[1])[victim[0].pid]
    job = sorted(victims_jobs)[0]
    path = metrics / f"{job}_metrics.jsonl"
    watching = asyncio.create_task(gap_seen(survivor[1], job, path, lease * 1.6 + 3.0))
    await asyncio.sleep(1.0)  # the client sees steady appends first
    victim[0].send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)

    def survivor_holds_all() -> bool:
        return victims_jobs <= held(survivor[1]).get(survivor[0].pid, set())

    took = await asyncio.to_thread(wait_until, survivor_holds_all)
    return took, await watching


def one_takeover(
    how: str, url: str, metrics: Path, scratch: Path, args: argparse.Namespace
) -> tuple[float, float]:
    lease = {"PLATFORM_LEASE_SECONDS": str(args.lease)}
    servers = [start(url, metrics, scratch / f"{how}-{i}.log", **lease) for i in range(2)]
    try:
        share = args.jobs // 2
        wait_until(lambda: sorted(map(len, held(servers[0][1]).values())) == [share, share])
        return asyncio.run(takeover(how, servers[0], servers[1], metrics, args.lease))
    finally:
        stop_all([process for process, _ in servers])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--lease", type=float, default=10.0, help="PLATFORM_LEASE_SECONDS")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--admin-url", default=ADMIN_URL)
    args = parser.parse_args()
    rounds = f"a round every {args.lease / 3:.2f} s"
    print(f"2 processes, {args.jobs} jobs, lease {args.lease:g} s ({rounds})")
    print(f"{'signal':>8} {'takeover s (median, max)':>26} {'client gap s (median, max)':>28}")
    for how in ("kill", "stop"):
        takeovers, gaps = [], []
        for _ in range(args.repeat):
            url = scratch_database(args.admin_url)
            scratch = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
            metrics = scratch / "metrics"
            metrics.mkdir()
            for index in range(args.jobs):
                (metrics / f"job{index:03d}_metrics.jsonl").write_bytes(line(0))
            try:
                took, gap = one_takeover(how, url, metrics, scratch, args)
            finally:
                drop_database(args.admin_url, url)
            takeovers.append(took)
            gaps.append(gap)
        print(
            f"{'-9' if how == 'kill' else 'STOP':>8} "
            f"{statistics.median(takeovers):>13.2f} {max(takeovers):>12.2f} "
            f"{statistics.median(gaps):>14.2f} {max(gaps):>13.2f}"
        )


if __name__ == "__main__":
    main()
