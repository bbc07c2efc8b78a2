"""CPU cost of the system sampler (`callbacks/system/`), against bare psutil and a W&B-style loop.

Run: ``python benchmarks/bench_system_sampler.py`` (about a minute and a half;
``--seconds``, ``--samples`` to change).

Two measurements, each contender side by side:

- **per sample**: one sample's CPU time (`time.thread_time`), over
  ``--samples`` samples taken back to back on this thread, in interleaved
  rounds (every contender once per round, so drift on a shared machine hits
  all alike); the median of the rounds, and its ratio to the floor's.
- **% of one core at 1 s and 10 s**: every contender runs as its own thread
  at that interval, all at once, for ``--seconds``; the CPU time of each
  thread (its own clock, `time.pthread_getcpuclockid`) over the run, as a
  share of one core's time. The platform's figure is `SystemSampler` as the
  callback runs it: reads, the line built and encoded, one ``os.write`` a
  sample, its thread waking on a grid; its first sample (NVML started or
  found missing, the counters' baselines) is inside the run.

Contenders:

- ``bare psutil (floor)``: the reads the sampler makes (CPU times, load,
  memory, the directory's disk, disk and network counters) and nothing else:
  no rates, no line, no write.
- ``platform sampler``: `SystemSampler` writing ``{job}_system.jsonl`` (with
  NVML where a GPU is; on a machine without one, NVML is tried once).
- ``W&B-style psutil``: the psutil calls a W&B-like system monitor makes per
  sample for the host and the process (system and process CPU percent,
  threads, memory and the process's RSS, disk use and counters, network
  counters), without its aggregation or upload (wandb is not installed here,
  and its newer monitor is a separate binary: the figure is psutil's cost).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from training_platform.callbacks.system.gpus import GpuReader
from training_platform.callbacks.system.sampler import SystemSampler

Read = Callable[[], object]


def bare_psutil(directory: Path) -> Read:
    def read() -> object:
        return (
            psutil.cpu_times(),
            os.getloadavg(),
            psutil.virtual_memory(),
            psutil.disk_usage(str(directory)),
            psutil.disk_io_counters(),
            psutil.net_io_counters(),
        )

    return read


def wandb_style(directory: Path) -> Read:
    process = psutil.Process()

    def read() -> object:
        with process.oneshot():
            own = (process.cpu_percent(), process.num_threads(), process.memory_info().rss)
        return (
            own,
            psutil.cpu_percent(),
            psutil.cpu_percent(percpu=True),
            psutil.virtual_memory(),
            process.memory_percent(),
            psutil.disk_usage(str(directory)),
            psutil.disk_io_counters(),
            psutil.net_io_counters(),
        )

    return read


def platform(directory: Path, name: str) -> tuple[SystemSampler, Read]:
    sampler = SystemSampler(directory / f"{name}_system.jsonl", 1.0, gpu_reader=GpuReader())

    def read() -> object:
        sampler.sample_once()
        return None

    return sampler, read


class Loop:
    """A contender's read every `interval` seconds on its own thread, its CPU clocked."""

    def __init__(self, name: str, read: Read, interval: float) -> None:
        self.name, self.read, self.interval = name, read, interval
        self.stop = threading.Event()
        self.samples = 0
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def run(self) -> None:
        started = time.monotonic()
        while True:
            self.read()
            self.samples += 1
            wait = started + self.samples * self.interval - time.monotonic()
            if self.stop.wait(max(0.0, wait)):
                return

    def cpu(self) -> float:
        assert self.thread.ident is not None
        return time.clock_gettime(time.pthread_getcpuclockid(self.thread.ident))


class SamplerLoop(Loop):
    """`SystemSampler` itself: its own thread, grid and file."""

    def __init__(self, name: str, sampler: SystemSampler) -> None:
        super().__init__(name, lambda: None, sampler.interval)
        self.sampler = sampler

    def start(self) -> None:
        self.sampler.start()
        self.thread = self.sampler._thread  # type: ignore[assignment]

    def finish(self) -> None:
        self.samples = self.sampler.samples_written
        self.sampler.stop()


def per_sample(contenders: dict[str, Read], samples: int, rounds: int) -> dict[str, list[float]]:
    """µs of CPU per sample, per round, each contender back to back on this thread."""
    figures: dict[str, list[float]] = {name: [] for name in contenders}
    for read in contenders.values():  # warm-up: baselines, NVML tried, the file opened
        for _ in range(5):
            read()
    for _ in range(rounds):
        for name, read in contenders.items():
            started = time.thread_time()
            for _ in range(samples):
                read()
            figures[name].append((time.thread_time() - started) / samples * 1e6)
    return figures


def bounded_run(
    directory: Path, intervals: tuple[float, ...], seconds: float
) -> list[tuple[str, float, int, float]]:
    """(contender, interval, samples, % of one core) of threads all running at once."""
    loops: list[Loop] = []
    for interval in intervals:
        sampler = SystemSampler(directory / f"run{interval:g}_system.jsonl", interval)
        loops.append(SamplerLoop("platform sampler", sampler))
        loops.append(Loop("bare psutil (floor)", bare_psutil(directory), interval))
        loops.append(Loop("W&B-style psutil", wandb_style(directory), interval))
    for loop in loops:
        if isinstance(loop, SamplerLoop):
            loop.start()
        else:
            loop.thread.start()
    time.sleep(0.05)  # every thread has started and has a clock
    wall0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - wall0
    results = []
    for loop in loops:
        used = loop.cpu()  # from the thread's start: its first sample is in
        if isinstance(loop, SamplerLoop):
            loop.finish()
        else:
            loop.stop.set()
            loop.thread.join()
        results.append((loop.name, loop.interval, loop.samples, used / (wall + 0.05) * 100))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="the threads' run")
    parser.add_argument("--samples", type=int, default=200, help="per round, back to back")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        sampler, platform_read = platform(directory, "tight")
        contenders = {
            "bare psutil (floor)": bare_psutil(directory),
            "platform sampler": platform_read,
            "W&B-style psutil": wandb_style(directory),
        }
        figures = per_sample(contenders, args.samples, args.rounds)
        sampler._close()
        runs = bounded_run(directory, (1.0, 10.0), args.seconds)
    report(figures, runs, args)


def report(
    figures: dict[str, list[float]],
    runs: list[tuple[str, float, int, float]],
    args: argparse.Namespace,
) -> None:
    print(
        f"System sampler CPU (Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}, GPUs seen by NVML: {gpu_count()})"
    )
    floor = figures["bare psutil (floor)"]
    print(f"per sample, {args.rounds} rounds of {args.samples} back to back (µs of CPU):")
    print(f"  {'contender':24}{'median':>10}{'min':>10}{'x floor':>10}")
    for name, values in figures.items():
        ratio = statistics.median(v / f for v, f in zip(values, floor, strict=False))
        print(f"  {name:24}{statistics.median(values):10.1f}{min(values):10.1f}{ratio:10.2f}")
    print(f"threads at once for {args.seconds:g} s (% of one core, the thread's own CPU clock):")
    print(f"  {'contender':24}{'interval':>10}{'samples':>10}{'% core':>10}{'µs/sample':>11}")
    for name, interval, samples, share in runs:
        per = share / 100 * (args.seconds + 0.05) / max(samples, 1) * 1e6
        print(f"  {name:24}{interval:9g}s{samples:10d}{share:10.4f}{per:11.0f}")


def gpu_count() -> int:
    reader = GpuReader()
    gpus = reader.read()
    reader.close()
    return len(gpus or [])


if __name__ == "__main__":
    main()
