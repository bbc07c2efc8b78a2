"""Overhead of the profiling kit on the demo trainer's GRPO step.

Run: ``python benchmarks/bench_profiling.py`` (about six minutes on 2 CPU cores).

The step is `training_platform.demo.grpo.GRPOTrainer.step`: rollout, reward,
group-normalised advantages, a policy-gradient loss with a KL penalty,
backward and an Adam step; a few milliseconds on one CPU core, so the kit's
fixed per-step cost weighs more here than on any real LLM step (seconds).

With profiling on, every step gets what a user would add: on_step_begin /
on_step_end (throughput, memory, leak check, record groups), add_batch, and
three nested stages: ``step`` as a ``with`` block, and through the decorator
``step/policy_forward`` wrapping the policy's forward and ``step/optimizer``
wrapping Adam's step.

Three figures, printed side by side:

1. A/B: one trainer with profiling off, on, and off again ("null"), in
   randomised blocks (each arm once per block of three consecutive steps, in
   a shuffled order), in thread CPU time (what neighbours on a shared machine
   take is left out); the overhead is the median over blocks of "on" minus
   the block's off/null mean. This is the end-to-end overhead; the null
   arm's difference from "off" shows the measurement's own error. Run on
   the same trainer scaled up (`SCALED`: a 16x wider policy, twice the
   group), the realistic step the < 1% target is judged on, and on the
   demo's own toy step (2-4 ms here, sized for a CPU demo), where the kit's
   fixed per-step cost shows most.
   Then each part alone (the hooks, the ``with`` stage around the step, the
   decorated forward, the decorated optimizer step), interleaved the same way
   on the toy step: where the A/B's cost comes from.
2. Kit cost: the kit's own per-step work (5 stages, add_batch,
   on_step_begin/on_step_end) around an empty body, timed right after each
   real training step (cold caches, what a run pays), and in a tight loop
   (warm caches, a lower bound); as a fraction of the median training step.
   These figures do not drown in the machine's noise as the A/B does.
3. torch.profiler: the steps of one scheduled cycle (warm-up + active +
   export), a one-off cost, shown amortised over a 10,000-step run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import timeit
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training_platform.callbacks.profiling.step_profiler import StepProfiler, TraceSchedule
from training_platform.demo.grpo import GRPOConfig, GRPOTrainer

LR = 3e-3


@dataclass(frozen=True)
class Parts:
    """Which parts of the kit one arm of a comparison runs."""

    hooks: bool = False  # on_step_begin, add_batch, on_step_end
    step_stage: bool = False  # ``with profiler.stage("step")`` around the whole step
    forward_stage: bool = False  # the policy's forward, decorated
    optimizer_stage: bool = False  # Adam's step, decorated


NONE = Parts()
ALL = Parts(hooks=True, step_stage=True, forward_stage=True, optimizer_stage=True)
AB_ARMS = {"off": NONE, "on": ALL, "null": NONE}
PART_ARMS = {
    "off": NONE,
    "null": NONE,
    "hooks": Parts(hooks=True),
    "step_stage": Parts(step_stage=True),
    "forward_stage": Parts(forward_stage=True),
    "optimizer_stage": Parts(optimizer_stage=True),
    "all": ALL,
}


class Instrumented:
    """Turns the stages inside one trainer on and off, so all arms run the same trainer.

    Two trainers would drift apart as they learn (response lengths, hence
    step cost, change), which an A/B comparison would take for overhead.
    """

    def __init__(self, trainer: GRPOTrainer, profiler: StepProfiler) -> None:
        self.trainer = trainer
        policy, optimizer = trainer.policy, trainer.optimizer
        self.plain = (policy.forward, optimizer.step)
        self.timed = (
            profiler.stage("policy_forward")(policy.forward),
            profiler.stage("optimizer")(optimizer.step),
        )

    def __call__(self, parts: Parts) -> None:
        # Instance attributes shadow the methods (nn.Module.__call__ reaches
        # the timed forward). Every arm sets them, to the plain bound methods
        # when off, so a switch of arm changes their values and never the
        # objects' attribute layout, which CPython's specialised bytecode
        # depends on ("on" steps follow a switch twice as often as "off" ones).
        policy, optimizer = self.trainer.policy, self.trainer.optimizer
        policy.forward = self.timed[0] if parts.forward_stage else self.plain[0]  # type: ignore[method-assign]
        optimizer.step = self.timed[1] if parts.optimizer_stage else self.plain[1]  # type: ignore[method-assign]


def profiled_step(
    trainer: GRPOTrainer, profiler: StepProfiler, step: int, parts: Parts = ALL
) -> None:
    """One training step with the hooks and the ``step`` stage that `parts` asks for."""
    if parts.hooks:
        profiler.on_step_begin(step)
    if parts.step_stage:
        with profiler.stage("step"):
            record = trainer.step(LR)
    else:
        record = trainer.step(LR)
    if parts.hooks:
        performance = record["performance"]
        tokens = round(performance["tokens_per_second"] * performance["step_time"])
        config = trainer.config
        profiler.add_batch(samples=config.batch_prompts * config.group_size, tokens=tokens)
        profiler.on_step_end(step)
    else:
        profiler.timer.collect()  # the stage times, as on_step_end would take them


def ab_compare(
    steps: int, out: Path, config: GRPOConfig, arms: dict[str, Parts] = AB_ARMS
) -> dict[str, list[float]]:
    """CPU seconds per step of each arm (by default profiling off, on, off again), interleaved.

    One trainer, toggled step by step, so drift (the policy learning, the
    machine's load) hits all arms alike. The order is shuffled (seeded):
    strict alternation measured a steady ~10 µs between odd and even steps
    running the very same code. The "null" arm runs exactly what "off" runs:
    its difference from "off" is the measurement's own error. The thread's
    CPU time leaves out the time other processes take the core away, which
    on a shared machine is most of the noise of a wall clock.
    """
    profiler = StepProfiler("bench-ab", out)
    trainer = GRPOTrainer(config, seed=0)
    instrument = Instrumented(trainer, profiler)
    instrument(NONE)
    profiler.mark_baseline()
    for _ in range(20):  # warm up before measuring anything
        trainer.step(LR)
    # Randomised blocks: every arm once per block of consecutive steps, in a
    # shuffled order. Each block compares its arms under the same machine
    # load, so slow drift (neighbours coming and going) cancels out of the
    # per-block differences that `block_differences` takes.
    rng = random.Random(0)
    schedule = []
    for _ in range(steps):
        block = list(arms)
        rng.shuffle(block)
        schedule.extend(block)
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for step, arm in enumerate(schedule):
        parts = arms[arm]
        instrument(parts)
        start = time.thread_time()
        if parts is NONE:
            trainer.step(LR)
        else:
            profiled_step(trainer, profiler, step, parts)
        times[arm].append(time.thread_time() - start)
    profiler.close()
    return times


def block_differences(times: dict[str, list[float]], arm: str) -> list[float]:
    """Per block: `arm`'s step minus the mean of the block's off and null steps."""
    return [
        value - (off + null) / 2
        for value, off, null in zip(times[arm], times["off"], times["null"], strict=True)
    ]


def null_differences(times: dict[str, list[float]]) -> list[float]:
    """Per block: the null step minus the off step (the same code: the error bar)."""
    return [null - off for off, null in zip(times["off"], times["null"], strict=True)]


def part_costs(times: dict[str, list[float]]) -> dict[str, float]:
    """µs each arm adds over the off and null arms (median of per-block differences)."""
    figures = {
        arm: statistics.median(block_differences(times, arm)) * 1e6
        for arm in times
        if arm not in ("off", "null")
    }
    return {"null A/A": statistics.median(null_differences(times)) * 1e6, **figures}


STAGES = ("rollout", "reward", "advantage", "update_actor", "optimizer")


def kit_work(profiler: StepProfiler, step: int) -> None:
    """Everything the kit does in one step, around an empty body: 5 stages, the hooks."""
    profiler.on_step_begin(step)
    for name in STAGES:
        with profiler.stage(name):
            pass
    profiler.add_batch(samples=64, tokens=400)
    profiler.on_step_end(step)


def cost_in_context(steps: int, out: Path) -> list[float]:
    """Seconds of `kit_work`, each timed right after a real training step.

    Right after a step the caches hold the trainer's data, not the kit's code:
    the kit costs several times more there than in a tight loop, and that is
    what a training run pays. Timing the kit's short span directly does not
    drown in the step's own jitter, unlike an A/B difference.
    """
    profiler = StepProfiler("bench-context", out)
    profiler.mark_baseline()
    trainer = GRPOTrainer(GRPOConfig(), seed=0)
    for _ in range(10):
        trainer.step(LR)
    costs = []
    for step in range(steps):
        trainer.step(LR)
        start = time.perf_counter()
        kit_work(profiler, step)
        costs.append(time.perf_counter() - start)
    profiler.close()
    return costs


def warm_cost(iterations: int, out: Path, repeats: int = 5) -> float:
    """Seconds of `kit_work` in a tight loop (warm caches): the best of `repeats` rounds."""
    profiler = StepProfiler("bench-warm", out)
    profiler.mark_baseline()
    step = 0

    def one() -> None:
        nonlocal step
        kit_work(profiler, step)
        step += 1

    best = min(timeit.repeat(one, number=iterations, repeat=repeats))
    profiler.close()
    return best / iterations


def traced_cycle(out: Path) -> dict[str, Any]:
    """Step times around one torch.profiler cycle (wait 5, warm-up 1, active 2)."""
    schedule = TraceSchedule(wait=5, warmup=1, active=2)
    profiler = StepProfiler("bench-trace", out, trace=schedule)
    trainer = GRPOTrainer(GRPOConfig(), seed=0)
    Instrumented(trainer, profiler)(ALL)
    times = []
    for step in range(12):
        start = time.perf_counter()
        profiled_step(trainer, profiler, step)
        times.append(time.perf_counter() - start)
    profiler.close()
    traced = times[5:8]  # warm-up + 2 active steps; the export runs at the end of the last
    untraced = times[1:5] + times[8:]  # step 0 also starts the profiler object
    return {
        "traced_steps_s": traced,
        "extra_s": sum(traced) - len(traced) * statistics.median(untraced),
        "written": [p.name for p in (profiler.tracer.written if profiler.tracer else [])],
    }


# The demo trainer with a 16x wider policy and twice the group: still a toy
# next to an LLM step (seconds), but a step whose work is the model's.
SCALED = GRPOConfig(hidden=512, group_size=16)


def ab_figures(times: dict[str, list[float]]) -> dict[str, float]:
    """Medians, and the overhead as the median of per-block differences.

    "off" and "null" run the same code, so both are the baseline, and their
    difference (A/A) is the error bar. Per-block differences leave out the
    machine's slow drift, which the difference of two arms' medians keeps:
    on this shared machine a 35 ms step varies by 10-20% (IQR), and with
    1,000 steps per arm the medians of identical arms still differed by up
    to ±1.2% between runs.
    """
    on = statistics.median(times["on"])
    baseline = statistics.median(times["off"] + times["null"])
    quartiles = statistics.quantiles(times["off"], n=4)
    differences = block_differences(times, "on")
    overhead = statistics.median(differences)
    # Standard error of a median: 1.253 sigma / sqrt(n), sigma from the IQR.
    spread = statistics.quantiles(differences, n=4)
    standard_error = 1.253 * (spread[2] - spread[0]) / 1.349 / len(differences) ** 0.5
    null = statistics.median(null_differences(times))
    return {
        "median_off_cpu_ms": baseline * 1e3,
        "median_on_cpu_ms": on * 1e3,
        "overhead_us": overhead * 1e6,
        "overhead_fraction": overhead / baseline,
        "overhead_standard_error_us": standard_error * 1e6,
        "null_us": null * 1e6,
        "noise_iqr_fraction": (quartiles[2] - quartiles[0]) / baseline,
    }


def print_ab(
    label: str, config: GRPOConfig, figures: dict[str, float], steps: int, judged: bool
) -> None:
    print(
        f"{label}: hidden {config.hidden}, {config.batch_prompts * config.group_size} "
        f"responses per step, {steps} steps per arm"
    )
    print(f"  step, profiling off : median {figures['median_off_cpu_ms']:7.3f} ms CPU (off + null)")
    print(f"  step, profiling on  : median {figures['median_on_cpu_ms']:7.3f} ms CPU")
    print(
        f"  overhead (A/B)      : {figures['overhead_fraction']:+.2%} = "
        f"{figures['overhead_us']:+.0f} ± {figures['overhead_standard_error_us']:.0f} µs per "
        f"step (null A/A {figures['null_us']:+.0f} µs; step IQR "
        f"{figures['noise_iqr_fraction']:.0%} of the median)"
    )
    if judged:
        # Judged with its error bar: two standard errors either side.
        margin = 2 * figures["overhead_standard_error_us"] / 1e3 / figures["median_off_cpu_ms"]
        if figures["overhead_fraction"] + margin < 0.01:
            verdict = "met"
        elif figures["overhead_fraction"] - margin >= 0.01:
            verdict = "MISSED"
        else:
            verdict = "undecided: the noise is larger than the margin (run more steps)"
        print(f"  target < 1% of a realistic step's time (± 2 standard errors): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500, help="A/B steps per arm (demo step)")
    parser.add_argument("--scaled-steps", type=int, default=1000, help="the same, scaled step")
    parser.add_argument("--part-steps", type=int, default=1000, help="per arm, parts alone")
    parser.add_argument("--context-steps", type=int, default=500)
    parser.add_argument("--warm-iterations", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: less noise)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = GRPOConfig()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        demo = ab_figures(ab_compare(args.steps, out, config))
        scaled = ab_figures(ab_compare(args.scaled_steps, out, SCALED))
        parts = part_costs(ab_compare(args.part_steps, out, config, PART_ARMS))
        context = cost_in_context(args.context_steps, out)
        warm = warm_cost(args.warm_iterations, out)
        trace = traced_cycle(out)

    off = demo["median_off_cpu_ms"] / 1e3
    kit, kit_mean = statistics.median(context), statistics.mean(context)
    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    # The target is judged on the scaled step: the demo's own is sized so a
    # CPU demo streams hundreds of steps a second, and only shows how a
    # fixed per-step cost weighs on a step of a few milliseconds.
    print_ab("demo GRPO step (the demo's own toy size)", config, demo, args.steps, judged=False)
    print_ab("demo GRPO step, scaled (the realistic step)", SCALED, scaled, args.scaled_steps, True)
    print(f"each part alone on the toy step, {args.part_steps} steps per arm (µs over off):")
    print("  " + ", ".join(f"{arm} {cost:+.0f}" for arm, cost in parts.items()))
    print(
        f"kit cost, after a step: median {kit * 1e6:.1f} µs, mean {kit_mean * 1e6:.1f} µs "
        f"= {kit / off:.2%} of the demo step (wall clock, kit alone)"
    )
    print(f"kit cost, warm loop   : {warm * 1e6:.1f} µs = {warm / off:.2%}")
    print(
        f"torch.profiler cycle  : +{trace['extra_s'] * 1e3:.0f} ms once (3 steps + export, "
        f"{trace['written']}) = {trace['extra_s'] / off:.0f} demo steps; "
        f"over a 10000-step run {trace['extra_s'] / (10000 * off):.2%}"
    )
    cost_s = demo["overhead_us"] / 1e6
    print(
        f"the fixed cost measured on the toy step ({demo['overhead_us']:.0f} µs) is 1% of a "
        f"{cost_s / 0.01 * 1e3:.1f} ms step, "
        f"{cost_s / (scaled['median_off_cpu_ms'] / 1e3):.2%} of the scaled step, "
        f"{cost_s / 12.4:.5%} of a 12.4 s TRL GRPO step"
    )
    if args.json:
        figures = {
            "demo": demo,
            "scaled": scaled,
            "parts_us": parts,
            "kit_cost_after_step_us": kit * 1e6,
            "kit_cost_warm_us": warm * 1e6,
            "trace_cycle_extra_ms": trace["extra_s"] * 1e3,
        }
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
