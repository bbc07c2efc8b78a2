"""One soak: start the server, run the load for a while, sync, and gather the figures.

Used by tests/soak/test_soak.py (which asserts on the figures) and by
benchmarks/bench_soak.py (which prints them for docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.soak.soak_load import (
    BAD_LINE_STEP,
    GOOD_JOBS,
    HOSTILE_JOB,
    Tally,
    prepare,
    start_load,
)
from tests.soak.soak_server import SoakServer, Vitals, sampler

JOIN_TIMEOUT = 30.0  # every load thread stops within a second of `stop`; this is a backstop
SYNC_TIMEOUT = 120.0


@dataclass
class Figures:
    seconds: float
    vitals: Vitals
    tally: Tally
    stored: dict[str, list[int]] = field(default_factory=dict)
    sigterm_seconds: float | None = None
    stuck_threads: list[str] = field(default_factory=list)

    def latency(self, route: str) -> dict[str, float]:
        samples = sorted(self.tally.latency[route])
        if not samples:
            return {"n": 0, "p50": float("nan"), "p95": float("nan"), "max": float("nan")}
        p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
        return {
            "n": len(samples),
            "p50": statistics.median(samples),
            "p95": p95,
            "max": samples[-1],
        }

    def rss_thirds(self) -> tuple[float, float]:
        """Median RSS of the first and of the last third of the samples, in MB."""
        rss = self.vitals.rss_mb
        third = max(1, len(rss) // 3)
        return statistics.median(rss[:third]), statistics.median(rss[-third:])

    def report(self) -> str:
        vitals, tally = self.vitals, self.tally
        first, last = self.rss_thirds()
        lines = [
            f"soak: {self.seconds:.0f} s",
            f"RSS MB: min {min(vitals.rss_mb):.0f}, max {max(vitals.rss_mb):.0f}, "
            f"median first third {first:.0f}, last third {last:.0f}",
            f"threads max {max(vitals.threads)}, fds max {max(vitals.fds)} "
            f"({len(vitals.rss_mb)} samples)",
        ]
        for route, stats in ((route, self.latency(route)) for route in sorted(tally.latency)):
            lines.append(
                f"GET {route}: n {stats['n']}, p50 {stats['p50'] * 1000:.0f} ms, "
                f"p95 {stats['p95'] * 1000:.0f} ms, max {stats['max'] * 1000:.0f} ms"
            )
        for job in sorted(tally.written):
            stored = [s for s in self.stored.get(job, []) if s < BAD_LINE_STEP]
            lines.append(f"{job}: lines written {len(tally.written[job])}, stored {len(stored)}")
        lines.append(
            f"bad lines {tally.bad_lines}, file rewrites {tally.rewrites}, "
            f"stalled-client connects {tally.stalled_connects}, live messages "
            f"{tally.live_messages}, artifact downloads {tally.downloads} "
            f"({tally.served} served), leaks {tally.leaks}, "
            f"5xx/errors {len(tally.server_errors)}"
        )
        if self.sigterm_seconds is not None:
            lines.append(f"SIGTERM to exit: {self.sigterm_seconds:.2f} s")
        return "\n".join(lines)


def run_soak(database_url: str, workdir: Path, seconds: float) -> Figures:
    """The whole soak; the server is always stopped (or killed) before this returns."""
    metrics_dir = workdir / "metrics"
    metrics_dir.mkdir()
    outside = workdir / "secret.txt"
    prepare(metrics_dir, outside)
    server = SoakServer(database_url, metrics_dir, workdir / "server.log")
    figures = Figures(seconds=seconds, vitals=Vitals(), tally=Tally())
    try:
        server.wait_ready()
        stop = threading.Event()
        threads = start_load(metrics_dir, outside, server.port, figures.tally, stop)
        watch = threading.Thread(target=sampler(server, figures.vitals, stop), daemon=True)
        watch.start()
        stop.wait(seconds)
        stop.set()
        for thread in [*threads, watch]:
            thread.join(JOIN_TIMEOUT)
            if thread.is_alive():
                figures.stuck_threads.append(thread.name)
        server.sample(figures.vitals)
        for job in [*GOOD_JOBS, HOSTILE_JOB]:
            figures.stored[job] = stored_steps(server.base, job)
        figures.sigterm_seconds = server.stop()
    finally:
        server.kill()
    return figures


def stored_steps(base: str, job_id: str) -> list[int]:
    """Sync the job to the end of its file, then every step the API has for it."""
    deadline = time.monotonic() + SYNC_TIMEOUT
    with httpx.Client(timeout=60) as client:
        while True:
            answer = client.post(f"{base}/api/monitoring/{job_id}/metrics/sync")
            answer.raise_for_status()
            if answer.json()["at_eof"] or time.monotonic() > deadline:
                break
        steps: list[int] = []
        start: int | None = 0
        while start is not None:
            page: dict[str, Any] = client.get(
                f"{base}/api/monitoring/{job_id}/metrics",
                params={"start_step": start, "limit": 100_000},
            ).json()
            steps += [record["step"] for record in page["metrics"]]
            start = page["next_start_step"]
    return steps


def duplicates_and_missing(written: list[int], stored: list[int]) -> tuple[list[int], list[int]]:
    """Steps stored more than once, and steps written but never stored."""
    counts = Counter(stored)
    return sorted(s for s, n in counts.items() if n > 1), sorted(set(written) - set(counts))
