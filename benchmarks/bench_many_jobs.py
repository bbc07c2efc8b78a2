"""Many jobs, quiet server: idle CPU and `GET /api/jobs` latency with 1,000 tiny jobs.

    .venv/bin/python benchmarks/bench_many_jobs.py [--jobs 1000] [--idle-seconds 10]
        [--requests 30] [--database-url URL] [--status running|completed]

Writes `--jobs` tiny jobs (three metric lines and a status file each) into a
temporary metrics directory, starts the real server (`training-platform
serve`, SQLite in the temporary directory unless `--database-url` names
another database, stalls after 5 s of silence), waits until every job is
ingested and settled (a running one marked stalled, a transition logged once
per job), then measures:

- the server process's CPU while nothing changes, over `--idle-seconds`
  (utime + stime from /proc/<pid>/stat, so all its threads count), as a
  fraction of one core;
- the latency of `GET /api/jobs` (the default page) and of a later page
  (`?limit=50&offset=500`), `--requests` times each: p50 and p95;
- the lines the server logged while idle (a stalled job used to log every round).

Bounded: every wait has a deadline, the server is stopped and the temporary
directory removed whatever happens. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record

LINES_PER_JOB = 3
INGEST_DEADLINE_S = 300.0
START_DEADLINE_S = 60.0


def write_jobs(directory: Path, count: int, status_text: str) -> None:
    now = time.time()
    for index in range(count):
        job_id = f"tiny{index:05d}"
        lines = b"".join(
            encode_record(
                build_record(step, {"loss": {"total_loss": 1.0 / (step + 1)}}, timestamp=now)
            )
            for step in range(LINES_PER_JOB)
        )
        (directory / f"{job_id}_metrics.jsonl").write_bytes(lines)
        status = (
            f'{{"job_id": "{job_id}", "status": "{status_text}", "current_step": '
            f'{LINES_PER_JOB - 1}, "total_steps": {LINES_PER_JOB}, "anomaly_detected": false, '
            f'"anomaly_reason": null, "started_at": {now}, "updated_at": {now}}}'
        )
        (directory / f"{job_id}_status.json").write_text(status)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_until(predicate: object, deadline_s: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"gave up waiting for {what} after {deadline_s:.0f} s")


def all_settled(http: httpx.Client, count: int, status: str) -> bool:
    """Every job ingested and in its final state: `status`, or stalled for a running one."""
    jobs: list[dict[str, object]] = []
    offset = 0
    while True:
        params = {"limit": 500, "offset": offset} if pages(http) else {}
        page = http.get("/api/jobs", params=params).json()["jobs"]
        jobs += page
        # A server without paging answers every job at once, whatever `offset` says.
        if len(page) < 500 or len(jobs) >= count:
            break
        offset += 500
    settled = "stalled" if status == "running" else status
    done = [job for job in jobs if job["status"] == settled and job["metrics_count"]]
    return len({job["job_id"] for job in done}) >= count


def pages(http: httpx.Client) -> bool:
    """Whether the server pages `/api/jobs` (one without paging answers 422)."""
    return http.get("/api/jobs", params={"limit": 1}).status_code == 200


def latencies(http: httpx.Client, path: str, params: dict[str, int], requests: int) -> list[float]:
    http.get(path, params=params).raise_for_status()  # warm-up
    taken = []
    for _ in range(requests):
        start = time.perf_counter()
        http.get(path, params=params).raise_for_status()
        taken.append((time.perf_counter() - start) * 1000)
    return taken


def describe(name: str, taken: list[float]) -> str:
    ordered = sorted(taken)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{name}: p50 {statistics.median(ordered):.1f} ms, p95 {p95:.1f} ms (n={len(ordered)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--status",
        default="running",
        choices=["running", "completed"],
        help="What every job's status file says: running jobs are polled (and stall), "
        "finished ones are left to file notifications.",
    )
    args = parser.parse_args()

    # Stopped from outside (timeout, kill): still stop the server and clean up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="bench_many_jobs_"))
    server: subprocess.Popen[bytes] | None = None
    try:
        metrics_dir = workdir / "metrics"
        metrics_dir.mkdir()
        write_jobs(metrics_dir, args.jobs, args.status)
        port = free_port()
        database_url = args.database_url or f"sqlite:///{workdir / 'platform.db'}"
        executable = Path(sys.executable).with_name("training-platform")
        command = [
            str(executable), "serve", "--host", "127.0.0.1", "--port", str(port),
            "--metrics-dir", str(metrics_dir), "--database-url", database_url,
            "--log-level", "warning",
        ]  # fmt: skip
        server = subprocess.Popen(
            command,
            # Stalls come after 5 s of silence (not the default minutes), so the
            # idle window sees stalled jobs, the case that used to log every round.
            env={**os.environ, "PLATFORM_API_TOKEN": "", "PLATFORM_STALL_MIN_SECONDS": "5"},
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "server.log", "wb"),  # noqa: SIM115 (closed with the process)
        )
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:

            def started_up() -> bool:
                if server is not None and server.poll() is not None:
                    log = (workdir / "server.log").read_text(errors="replace")
                    raise SystemExit(f"the server exited:\n{log[-2000:]}")
                return http.get("/healthz").status_code == 200

            wait_until(started_up, START_DEADLINE_S, "start")
            started = time.monotonic()
            # Running jobs are waited for until they are marked stalled (5 s of
            # silence): that transition is logged once per job, which is news,
            # not idling; the idle window starts after it.
            wait_until(
                lambda: all_settled(http, args.jobs, args.status), INGEST_DEADLINE_S, "ingestion"
            )
            print(f"{args.jobs} jobs ingested and settled in {time.monotonic() - started:.1f} s")
            time.sleep(2.0)  # let the last round of syncs settle
            log = workdir / "server.log"
            log_lines = len(log.read_bytes().splitlines())
            before, wall = cpu_seconds(server.pid), time.monotonic()
            time.sleep(args.idle_seconds)
            used = cpu_seconds(server.pid) - before
            core = used / (time.monotonic() - wall)
            logged = len(log.read_bytes().splitlines()) - log_lines
            print(f"idle CPU: {core:.3f} of a core over {args.idle_seconds:.0f} s")
            print(f"server log lines while idle: {logged}")
            first = latencies(http, "/api/jobs", {}, args.requests)
            print(describe("GET /api/jobs (default page)", first))
            if pages(http):
                page = latencies(http, "/api/jobs", {"limit": 50, "offset": 500}, args.requests)
                print(describe("GET /api/jobs?limit=50&offset=500", page))
            listed = http.get("/api/jobs")
            print(
                f"default page: {len(listed.json()['jobs'])} jobs, "
                f"X-Total-Count {listed.headers.get('x-total-count')}"
            )
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
