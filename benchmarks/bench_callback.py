"""Per-step cost of PlatformCallback, side by side with TensorBoard, wandb and the floor.

Run: ``python benchmarks/bench_callback.py`` (about 20 s; ``--steps`` to change).

Every contender logs the same realistic record: the 20 scalars a verl PPO step
reports most often (losses, score, KL, grad norms, entropy, lengths,
throughput, memory, stage timings), with values that change every step.

- ``platform (background)``: `PlatformCallback` as shipped: ``on_step_begin`` +
  ``on_step_end`` on the training thread; building the record, the seven
  detectors, encoding and writing happen on the writer thread. Reported as the
  training thread's latency per step and, separately, as the amortised cost
  (loop + drain, divided by steps), which includes the writer's CPU time.
- ``platform (inline)``: the same with ``background=False`` (what
  ``stop_on_anomaly=True`` uses): everything on the training thread.
- ``tensorboard``: ``SummaryWriter.add_scalar`` once per scalar.
- ``wandb offline``: ``wandb.log(metrics, step=...)`` in ``mode="offline"``.
- ``floor``: one ``orjson.dumps`` of the flat dict, ``write`` and ``flush``.

Contenders run in interleaved rounds, so drift on a shared machine hits all
alike; each figure is the median over all steps of all rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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


class Contender:
    """One logger: `step(i)` logs step i; `finish()` drains; times in ns per step."""

    name = ""

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        self.directory = directory
        self.metrics = metrics
        self.samples: list[int] = []
        self.amortised: list[float] = []

    def step(self, index: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Work left after the loop (drain a queue); counted in the amortised figure."""

    def close(self) -> None:
        """Tear down; not timed."""

    def run(self, start: int, count: int) -> None:
        clock = time.perf_counter_ns
        samples = self.samples
        began = clock()
        for index in range(start, start + count):
            before = clock()
            self.step(index)
            samples.append(clock() - before)
        self.finish()
        self.amortised.append((clock() - began) / count)


class Floor(Contender):
    name = "floor: orjson line + flush"

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        super().__init__(directory, metrics)
        self.handle = (directory / "floor.jsonl").open("ab")

    def step(self, index: int) -> None:
        self.handle.write(orjson.dumps(self.metrics[index], option=orjson.OPT_APPEND_NEWLINE))
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


class Platform(Contender):
    def __init__(self, directory: Path, metrics: list[dict[str, float]], background: bool) -> None:
        super().__init__(directory, metrics)
        self.name = f"platform ({'background' if background else 'inline'})"
        job = "bench-bg" if background else "bench-inline"
        self.callback = PlatformCallback(job, directory, background=background)
        self.callback.on_train_begin()

    def step(self, index: int) -> None:
        self.callback.on_step_begin(index)
        self.callback.on_step_end(index, self.metrics[index])

    def finish(self) -> None:
        self.callback.flush()

    def close(self) -> None:
        self.callback.on_train_end()


class TensorBoard(Contender):
    name = "tensorboard add_scalar x20"

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        super().__init__(directory, metrics)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(directory / "tb"))

    def step(self, index: int) -> None:
        add = self.writer.add_scalar
        for key, value in self.metrics[index].items():
            add(key, value, index)

    def finish(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Wandb(Contender):
    name = "wandb offline log"

    def __init__(self, directory: Path, metrics: list[dict[str, float]]) -> None:
        super().__init__(directory, metrics)
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb_run = wandb.init(
            mode="offline", dir=str(directory), project="bench", settings=wandb.Settings(
                console="off", x_disable_stats=True, x_disable_meta=True
            ),
        )  # fmt: skip

    def step(self, index: int) -> None:
        self.wandb_run.log(self.metrics[index], step=index)

    def close(self) -> None:
        self.wandb_run.finish()


def percentile(samples: list[int], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] / 1000


def build(directory: Path, metrics: list[dict[str, float]]) -> tuple[list[Contender], list[str]]:
    """Every contender that can run here, and a note for each that cannot."""
    makers: list[tuple[str, Callable[[], Contender]]] = [
        ("floor", lambda: Floor(directory, metrics)),
        ("platform background", lambda: Platform(directory, metrics, background=True)),
        ("platform inline", lambda: Platform(directory, metrics, background=False)),
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
    parser.add_argument("--steps", type=int, default=20_000, help="steps per fast contender")
    parser.add_argument("--slow-steps", type=int, default=2_000, help="for tensorboard/wandb")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    metrics = make_metrics(max(args.steps, args.slow_steps))
    with tempfile.TemporaryDirectory() as tmp:
        contenders, notes = build(Path(tmp), metrics)
        for contender in contenders:  # warm-up: first-call costs, imports, file creation
            contender.run(0, 50)
            contender.samples.clear()
            contender.amortised.clear()
        for round_index in range(args.rounds):
            for contender in contenders:
                slow = isinstance(contender, (TensorBoard, Wandb))
                count = (args.slow_steps if slow else args.steps) // args.rounds
                contender.run(round_index * count, count)
        for contender in contenders:
            contender.close()
    report(contenders, notes, len(KEYS))


def report(contenders: list[Contender], notes: list[str], scalars: int) -> None:
    print(f"Per-step logging cost, {scalars} scalars per step (µs; Python {sys.version.split()[0]},"
          f" {os.cpu_count()} CPUs)")  # fmt: skip
    reference = next((c for c in contenders if c.name == "platform (background)"), None)
    base = statistics.median(reference.samples) / 1000 if reference else None
    print(f"{'contender':32} {'median':>9} {'p90':>9} {'p99':>9} {'amortised':>10} {'x ours':>8}")
    for contender in contenders:
        median = statistics.median(contender.samples) / 1000
        amortised = statistics.median(contender.amortised) / 1000
        ratio = f"{median / base:8.1f}" if base else "       -"
        print(
            f"{contender.name:32} {median:9.2f} {percentile(contender.samples, 0.9):9.2f} "
            f"{percentile(contender.samples, 0.99):9.2f} {amortised:10.2f} {ratio}"
        )
    for note in notes:
        print("note:", note)
    print("median/p90/p99: latency of one step's logging call on the training thread;")
    print("amortised: (loop + final drain) / steps, i.e. including background-thread work.")


if __name__ == "__main__":
    main()
