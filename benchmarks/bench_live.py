"""Live stream, end to end: a line appended by a writer process -> WebSocket clients.

    .venv/bin/python benchmarks/bench_live.py [--clients 1,100,500] [--lines 150]
        [--rate 10] [--throughput-lines 100000] [--database-url URL] [--deflate]
        [--format platform|tensorboard]

`--format tensorboard`: the writer is torch's `SummaryWriter` logging the same
~20 scalars a step (one event each, stamped by the writer) and flushing after
each step, into a TensorBoard run directory the server discovers; latency =
arrival - the step's last event's wall time, so the flush is in it (a step
announced again, completed, counts at its first arrival). Latency only.

(BENCH_CLIENTS_PER_PROCESS, default 250, spreads the clients over more processes.)

Three kinds of process, as in production: the server (uvicorn, default
settings: file notifications plus a 1 s polling fallback), a writer that
appends one realistic line at a time stamped with `time.time()` just before
the write, and client processes (websockets, up to 250 connections each) that
note when each record arrives. Latency = arrival - stamp, over every record
and every client. Throughput: the writer appends as fast as it can while
clients stream; lines/s = lines / (last arrival - first write).

Everything shares this machine's cores (2 here): the clients' own work is in
the figures. Read the ratios against the anchors, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record

CLIENTS_PER_PROCESS = int(os.environ.get("BENCH_CLIENTS_PER_PROCESS", "250"))
WARMUP_LINES = 5  # the first lines also measure the watcher starting up
SERVER = """
import sys, uvicorn
from training_platform.api.main import create_app
from training_platform.api.websocket import uvicorn_ws_options
from training_platform.settings import Settings
settings = Settings()
uvicorn.run(create_app(settings), host="127.0.0.1", port=int(sys.argv[1]),
            log_level="warning", **uvicorn_ws_options(settings))
"""


def line(step: int) -> bytes:
    """~20 scalars, as a PPO step logs them, stamped now."""
    return encode_record(
        build_record(
            step,
            {
                "loss": {"actor_loss": 2.5, "critic_loss": 1.2, "total_loss": 3.7},
                "reward": {"mean": 0.5, "std": 0.1, "max": 0.7, "min": 0.3},
                "kl": {"mean": 0.1, "max": 0.15},
                "gradient": {"actor_norm": 1.5, "critic_norm": 0.8},
                "performance": {"tokens_per_second": 1000.0, "step_time": 2.5},
                "timing": {"rollout": 1.2, "reward": 0.3, "update_actor": 0.7},
                "extra": {"actor/entropy": 0.91, "response_length/mean": 312.0},
            },
            timestamp=time.time(),
        )
    )


# -- roles run as separate processes ---------------------------------------------


# 20 tags a step, as verl's `tensorboard` logger writes them: the callback benchmark's keys.
from bench_callback import KEYS as TENSORBOARD_TAGS  # noqa: E402


def run_tensorboard_writer(directory: str, count: int, rate: float) -> None:
    """`rate` steps/s into a TensorBoard run: ~20 `add_scalar` a step, then a flush."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(directory, max_queue=1 << 20, flush_secs=3600)
    start = time.monotonic()
    for step in range(count):
        delay = start + step / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for index, tag in enumerate(TENSORBOARD_TAGS):
            writer.add_scalar(tag, 0.01 * index + 0.001 * step, step)
        writer.flush()
    writer.close()


def run_writer(path: str, count: int, rate: float) -> None:
    """`rate` lines/s, one write each; 0: as fast as possible, 1000 lines per write."""
    with open(path, "ab", buffering=0) as handle:
        if rate == 0:
            for base in range(0, count, 1000):
                handle.write(b"".join(line(s) for s in range(base, min(base + 1000, count))))
            return
        start = time.monotonic()
        for step in range(count):
            delay = start + step / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            handle.write(line(step))


async def _client(url: str, last_step: int, timeout: float, out: list[Any]) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, open_timeout=60, compression=os.environ.get("DEFLATE")) as ws:
        out.append(ws)  # connected
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(ws.recv(), deadline - time.monotonic())
            except TimeoutError:
                break
            now = time.time()
            message = json.loads(raw)
            if message["type"] != "metric" or message["data"]["step"] in seen:
                continue  # a step sent again, completed (another tool's): its first arrival
            data = message["data"]
            seen.add(data["step"])
            out.append((data["step"], (now - data["timestamp"]) * 1000.0, now))
            if data["step"] == last_step:
                break


async def run_clients(url: str, count: int, last_step: int, timeout: float) -> None:
    results: list[list[Any]] = [[] for _ in range(count)]
    tasks = []
    for out in results:  # connect one by one: a burst of handshakes measures nothing
        tasks.append(asyncio.create_task(_client(url, last_step, timeout, out)))
        while not out and not tasks[-1].done():
            await asyncio.sleep(0.001)
    print("ready", flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    samples = [item for out in results for item in out[1:]]
    print(json.dumps({"samples": samples, "complete": sum(bool(o[1:]) for o in results)}))


# -- the orchestration ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    work: Path, database_url: str, deflate: bool
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PLATFORM_METRICS_DIR": str(work / "metrics"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "PLATFORM_WS_PER_MESSAGE_DEFLATE": "1" if deflate else "0",
    }
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the server did not start")


def scenario(
    port: int,
    job: str,
    path: Path,
    clients: int,
    lines: int,
    rate: float,
    deflate: bool,
    writer: str = "_writer",
) -> tuple[list[tuple[int, float, float]], int, float]:
    """Run clients + writer; returns (samples, clients that got data, write start time)."""
    url = f"ws://127.0.0.1:{port}/api/monitoring/{job}/live"
    env = {**os.environ, "DEFLATE": "deflate" if deflate else ""}
    if not deflate:
        env.pop("DEFLATE")
    timeout = 60 + (lines / rate if rate else 120)
    procs = []
    for first in range(0, clients, CLIENTS_PER_PROCESS):
        share = min(CLIENTS_PER_PROCESS, clients - first)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "_clients",
                    url,
                    str(share),
                    str(lines - 1),
                    str(timeout),
                ],
                stdout=subprocess.PIPE,
                env=env,
            )
        )
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(1.0)  # let the server finish its subscribes
    started = time.time()
    subprocess.run([sys.executable, __file__, writer, str(path), str(lines), str(rate)], check=True)
    samples: list[tuple[int, float, float]] = []
    complete = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=timeout + 30)
        result = json.loads(out.decode().strip().splitlines()[-1])
        samples += [tuple(s) for s in result["samples"]]
        complete += result["complete"]
    return samples, complete, started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,100,500")
    parser.add_argument("--lines", type=int, default=150, help="latency lines per run")
    parser.add_argument("--rate", type=float, default=10.0, help="latency lines per second")
    parser.add_argument("--throughput-lines", type=int, default=100_000)
    parser.add_argument("--throughput-clients", default="1,100")
    parser.add_argument(
        "--database-url",
        default=None,
        help="a PostgreSQL server URL (a scratch database is made on it); default: SQLite",
    )
    parser.add_argument("--deflate", action="store_true", help="permessage-deflate on")
    parser.add_argument("--format", choices=("platform", "tensorboard"), default="platform")
    args = parser.parse_args()
    latency_counts = [int(n) for n in args.clients.split(",") if n]
    throughput_counts = [int(n) for n in args.throughput_clients.split(",") if n]

    with tempfile.TemporaryDirectory(prefix="tp-bench-live-") as tmp:
        work = Path(tmp)
        (work / "metrics").mkdir()
        for job in [f"lat{n}" for n in latency_counts] + [f"tput{n}" for n in throughput_counts]:
            (work / "metrics" / f"{job}_metrics.jsonl").write_bytes(b"")
        if args.format == "tensorboard":
            throughput_counts = []
            for n in latency_counts:  # a run directory with its first event file: discovered
                run_tensorboard_writer(str(work / "metrics" / f"tb{n}"), 0, 1.0)
        with scratch_database(args.database_url, work) as url:
            server, port = start_server(work, url, args.deflate)
            try:
                time.sleep(2.0)  # discovery and the file watcher
                deflate = "on" if args.deflate else "off"
                print(f"database {url.split(':')[0]}, permessage-deflate {deflate}")
                bench_latency(port, work, latency_counts, args)
                bench_throughput(port, work, throughput_counts, args)
            finally:
                server.terminate()
                server.wait(30)


@contextmanager
def scratch_database(server_url: str | None, work: Path) -> Iterator[str]:
    """A fresh SQLite file, or a fresh database on the given PostgreSQL server.

    Fresh every run: jobs left by an earlier run point at its deleted
    temporary directory, and would hide this run's files of the same name.
    """
    if server_url is None or not server_url.startswith("postgresql"):
        yield server_url or f"sqlite:///{work / 'live.db'}"
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"tp_bench_live_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def bench_latency(port: int, work: Path, counts: list[int], args: argparse.Namespace) -> None:
    print(f"\nLatency, {args.lines} lines at {args.rate:g}/s (first {WARMUP_LINES} dropped)")
    print("  clients  samples   p50 ms   p90 ms   p99 ms   max ms   p50 1st/2nd half")
    figures = {}
    for n in counts:
        job = f"lat{n}"
        path = work / "metrics" / f"{job}_metrics.jsonl"
        writer = "_writer"
        if args.format == "tensorboard":  # a run directory, discovered as job `tb{n}`
            job, path, writer = f"tb{n}", work / "metrics" / f"tb{n}", "_tensorboard_writer"
        samples, _, _ = scenario(port, job, path, n, args.lines, args.rate, args.deflate, writer)
        kept = [(step, ms) for step, ms, _ in samples if step >= WARMUP_LINES]
        latencies = [ms for _, ms in kept]
        middle = (WARMUP_LINES + args.lines) / 2
        # A second half much slower than the first: a backlog growing, not keeping up.
        halves = [[ms for step, ms in kept if (step < middle) == first] for first in (1, 0)]
        p50, p90, p99 = (percentile(latencies, q) for q in (0.5, 0.9, 0.99))
        figures[n] = (p50, p99)
        expected = n * (args.lines - WARMUP_LINES)
        note = "" if len(latencies) == expected else f"  (expected {expected})"
        print(
            f"  {n:>7} {len(latencies):>8} {p50:>8.1f} {p90:>8.1f} {p99:>8.1f} "
            f"{max(latencies):>8.1f}   {percentile(halves[0], 0.5):>6.1f} / "
            f"{percentile(halves[1], 0.5):.1f}{note}"
        )
    report_ratios(figures)


def bench_throughput(port: int, work: Path, counts: list[int], args: argparse.Namespace) -> None:
    if counts:
        print(f"\nThroughput while streaming, {args.throughput_lines:,} lines, 1000 per write")
    lines = args.throughput_lines
    for n in counts:
        job = f"tput{n}"
        path = work / "metrics" / f"{job}_metrics.jsonl"
        samples, _, started = scenario(port, job, path, n, lines, 0, args.deflate)
        last = max(at for step, _, at in samples if step == lines - 1)
        steps = {step for step, _, _ in samples}
        print(
            f"  {n:>4} client(s): {lines / (last - started):>9,.0f} lines/s ingested and "
            f"delivered ({len(steps):,} distinct steps received)"
        )


def report_ratios(figures: dict[int, tuple[float, float]]) -> None:
    print("\n  against the targets and the anchors (p50 unless said)")
    if 1 in figures:
        p50, p99 = figures[1]
        print(f"    1 client:  p50 {p50:.1f} ms = {p50 / 20:.2f}x the 20 ms target, "
              f"p99 {p99:.1f} ms = {p99 / 60:.2f}x the 60 ms target")  # fmt: skip
        print(f"    vs Aim's ~2 s poll: {2000 / p50:,.0f}x sooner; vs MLflow's 30 s: "
              f"{30000 / p50:,.0f}x; vs TensorBoard's >= 30 s: >= {30000 / p50:,.0f}x")  # fmt: skip
    if 100 in figures:
        p50, _ = figures[100]
        print(f"    100 clients: p50 {p50:.1f} ms = {p50 / 7:.2f}x uvicorn's ~7 ms fan-out anchor")
    if 500 in figures:
        _, p99 = figures[500]
        print(f"    500 clients: p99 {p99:.1f} ms = {p99 / 250:.2f}x the 250 ms target")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_writer":
        run_writer(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_tensorboard_writer":
        run_tensorboard_writer(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_clients":
        asyncio.run(
            run_clients(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
        )
    else:
        main()
