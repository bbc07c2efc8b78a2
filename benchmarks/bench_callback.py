"""Cost of PlatformCallback per training step, against the floor and TensorBoard/wandb.

Run: ``python benchmarks/bench_callback.py`` (about a minute; ``--steps``,
``--rounds`` to change).

Every contender logs the same realistic record: the 20 scalars a verl PPO step
reports most often (losses, score, KL, grad norms, entropy, lengths,
throughput, memory, stage timings), with values that change every step.

What is measured, per contender and round (a loop of ``--steps`` steps):

- **loop wall**: wall time of the loop of ``on_step_end`` calls, per step. The
  writer thread runs during the loop and takes the GIL from the training
  thread; that time is in this figure (the issue's headline measurement).
- **+drain wall**: the loop plus waiting for the writer to finish every step
  it was handed, per step: the whole cost, whatever runs where.
- **CPU/step**: `time.process_time()` over loop + drain, per step: the CPU of
  every thread of the process (training and writer).
- **call p50/p99**: latency of one hook call on the training thread, from a
  separate shorter pass that times each call (the timing itself adds ~0.1 µs).

Contenders:

- ``floor``: one ``orjson.dumps`` of the flat dict, ``write`` and ``flush``
  (a line in the OS per step, nothing else).
- ``platform (background)``: `PlatformCallback` as shipped, only
  ``on_step_end`` per step (detectors on, status file every second). Each
  round gets a fresh callback (``on_train_begin`` .. ``on_train_end`` outside
  the timed part), so every round starts from an empty queue.
- ``platform (inline)``: the same with ``background=False`` (what
  ``stop_on_anomaly=True`` uses): everything on the training thread.
- ``platform (background, no detectors)``: ``enable_anomaly_detection=False``:
  the callback's own plumbing (snapshot, queue, record, encoding, write),
  without the detectors' share.
- ``tensorboard``: ``SummaryWriter.add_scalar`` once per scalar (fewer steps).
- ``wandb offline``: ``wandb.log(metrics, step=...)`` (fewer steps), if installed.

Contenders run in interleaved rounds (floor, platform, ..., then again), so
drift on a shared machine hits all alike. Each figure is the median over the
rounds; ratios are taken to the floor of the same round, then their median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from training_platform.callbacks import PlatformCallback

KEYS = (
    "actor/pg_loss", "critic/vf_loss", "critic/score/mean", "critic/score/std",
    "critic/score/max", "critic/score/min", "actor/kl_loss", "actor/grad_norm",
    "critic/grad_norm", "actor/entropy", "actor/pg_clipfrac", "response_length/mean",
    "perf/throughput", "perf/time_per_step", "perf/max_memory_allocated_gb", "timing_s/gen",
    "timing_s/reward", "timing_s/adv", "timing_s/update_actor", "timing_s/update_critic",
)  # fmt: skip


def make_metrics(count: int) -> list[dict[str, float]]:
    """`count` healthy step dicts whose values move a little every step."""
    return [
        {key: 0.5 + 0.01 * ((step * 31 + index * 7) % 13) for index, key in enumerate(KEYS)}
        for step in range(count)
    ]


@dataclass
class Figures:
    """Per-round figures of one contender, in µs per step."""

    loop: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)  # ns per call, sampled pass


class Contender:
    """One logger. `open()` before a round, `step(i)` per step, `drain()` waits for
    background work (timed), `close()` after the round (not timed)."""

    name = ""
    slow = False

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        self.directory = directory
        self.metrics = metrics
        self.figures = Figures()
        self.rounds = 0

    def open(self) -> None:
        self.rounds += 1

    def step(self, index: int) -> None:
        raise NotImplementedError

    def drain(self) -> None:
        """Work left after the loop (a queue to empty); counted in +drain and CPU."""

    def close(self) -> None:
        """Tear down after a round; not timed."""

    def shutdown(self) -> None:
        """Tear down after the last round."""

    def measure(self, count: int) -> None:
        """One timed round of `count` steps."""
        self.open()
        step = self.step
        wall, cpu = time.perf_counter, time.process_time
        began, began_cpu = wall(), cpu()
        for index in range(count):
            step(index)
        looped = wall()
        self.drain()
        ended, ended_cpu = wall(), cpu()
        self.close()
        self.figures.loop.append((looped - began) / count * 1e6)
        self.figures.total.append((ended - began) / count * 1e6)
        self.figures.cpu.append((ended_cpu - began_cpu) / count * 1e6)

    def sample_calls(self, count: int) -> None:
        """Time each call of a shorter round (latency on the training thread)."""
        self.open()
        clock = time.perf_counter_ns
        samples = self.figures.calls
        for index in range(count):
            before = clock()
            self.step(index)
            samples.append(clock() - before)
        self.drain()
        self.close()


class Floor(Contender):
    name = "floor: orjson line + flush"

    def open(self) -> None:
        super().open()
        self.handle = (self.directory / f"floor{self.rounds}.jsonl").open("ab")

    def step(self, index: int) -> None:
        self.handle.write(orjson.dumps(self.metrics[index], option=orjson.OPT_APPEND_NEWLINE))
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


class Platform(Contender):
    def __init__(
        self,
        directory: Path,
        metrics: list[dict[str, float]],
        background: bool,
        detectors: bool = True,
    ) -> None:
        super().__init__(directory, metrics)
        self.background = background
        self.detectors = detectors
        kind = "background" if background else "inline"
        self.name = f"platform ({kind}{'' if detectors else ', no detectors'})"

    def open(self) -> None:
        super().open()
        kind = f"{'bg' if self.background else 'inline'}{'' if self.detectors else '-nodet'}"
        self.callback = PlatformCallback(
            f"bench-{kind}-{self.rounds}",
            self.directory,
            background=self.background,
            enable_anomaly_detection=self.detectors,
        )
        self.callback.on_train_begin(total_steps=len(self.metrics))
        self.on_step_end = self.callback.on_step_end

    def step(self, index: int) -> None:
        self.on_step_end(index, self.metrics[index])

    def drain(self) -> None:
        self.callback.flush()

    def close(self) -> None:
        self.callback.on_train_end()


class TensorBoard(Contender):
    name = "tensorboard add_scalar x20"
    slow = True

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        super().__init__(directory, metrics)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(directory / "tb"))

    def step(self, index: int) -> None:
        add = self.writer.add_scalar
        for key, value in self.metrics[index].items():
            add(key, value, index)

    def drain(self) -> None:
        self.writer.flush()

    def shutdown(self) -> None:
        self.writer.close()


class Wandb(Contender):
    name = "wandb offline log"
    slow = True

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        super().__init__(directory, metrics)
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb_run: Any = wandb.init(
            mode="offline", dir=str(directory), project="bench", settings=wandb.Settings(
                console="off", x_disable_stats=True, x_disable_meta=True
            ),
        )  # fmt: skip

    def step(self, index: int) -> None:
        self.wandb_run.log(self.metrics[index], step=index)

    def shutdown(self) -> None:
        self.wandb_run.finish()


def build(directory: Path, metrics: list[dict[str, float]]) -> tuple[list[Contender], list[str]]:
    """Every contender that can run here, and a note for each that cannot."""
    makers: list[tuple[str, Callable[[], Contender]]] = [
        ("floor", lambda: Floor(directory, metrics)),
        ("platform background", lambda: Platform(directory, metrics, background=True)),
        ("platform inline", lambda: Platform(directory, metrics, background=False)),
        (
            "platform background, no detectors",
            lambda: Platform(directory, metrics, background=True, detectors=False),
        ),
        ("tensorboard", lambda: TensorBoard(directory, metrics)),
        ("wandb", lambda: Wandb(directory, metrics)),
    ]
    contenders, notes = [], []
    for name, make in makers:
        try:
            contenders.append(make())
        except Exception as exc:  # a missing optional package: say so, measure the rest
            notes.append(f"{name}: skipped ({type(exc).__name__}: {exc})")
    return contenders, notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per round")
    parser.add_argument("--slow-steps", type=int, default=1_000, help="for tensorboard/wandb")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample-steps", type=int, default=2_000, help="per-call timing pass")
    args = parser.parse_args(argv)
    metrics = make_metrics(max(args.steps, args.slow_steps, args.sample_steps))
    with tempfile.TemporaryDirectory() as tmp:
        contenders, notes = build(Path(tmp), metrics)
        for contender in contenders:  # warm-up: first-call costs, imports, file creation
            contender.measure(200)
            contender.figures = Figures()
        for _ in range(args.rounds):
            for contender in contenders:
                contender.measure(args.slow_steps if contender.slow else args.steps)
        for contender in contenders:
            contender.sample_calls(args.slow_steps if contender.slow else args.sample_steps)
            contender.shutdown()
    report(contenders, notes, args)


def report(contenders: list[Contender], notes: list[str], args: argparse.Namespace) -> None:
    print(
        f"Per-step logging cost, {len(KEYS)} scalars per step, {args.rounds} interleaved rounds "
        f"of {args.steps} steps (µs; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f})"
    )
    floor = next(c for c in contenders if isinstance(c, Floor)).figures
    header = ("contender", "loop wall", "x floor", "+drain", "x floor", "CPU", "x floor",
              "call p50", "p99")  # fmt: skip
    print(f"{header[0]:38}" + "".join(f"{h:>10}" for h in header[1:]))
    for contender in contenders:
        own = contender.figures
        row = [contender.name[:38].ljust(38)]
        for mine, base in ((own.loop, floor.loop), (own.total, floor.total), (own.cpu, floor.cpu)):
            row.append(f"{statistics.median(mine):10.2f}")
            # Ratio per round (same moment of the machine), then the median of those.
            ratios = [m / b for m, b in zip(mine, base, strict=False)]
            row.append(f"{statistics.median(ratios):10.2f}")
        calls = sorted(own.calls)
        row.append(f"{calls[len(calls) // 2] / 1000:10.2f}")
        row.append(f"{calls[int(len(calls) * 0.99)] / 1000:10.2f}")
        print("".join(row))
    for contender in contenders:
        if isinstance(contender, Platform):
            rounds = ", ".join(f"{value:.1f}" for value in contender.figures.loop)
            print(f"  {contender.name} loop wall per round: {rounds}")
    for note in notes:
        print("note:", note)
    print("loop wall: the loop of on_step_end calls, writer-thread GIL time included;")
    print("+drain: loop + waiting for the writer; CPU: process CPU time (all threads) / steps.")


if __name__ == "__main__":
    main()
