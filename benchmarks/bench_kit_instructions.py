"""Instructions the profiling kit executes per step, counted by valgrind (exact, not timed).

Run: ``python benchmarks/bench_kit_instructions.py`` (about a minute; needs
``valgrind``, which Debian packages). ``--tree PATH`` counts another checkout
of the project (an older commit, say) for a side-by-side comparison.

Timings of a few microseconds drown in a shared machine's noise; an
instruction count does not: valgrind's cachegrind counts the same total for
the same code and inputs whatever else the machine is doing. Each scenario
runs twice in a child process, once with 0 and once with `--steps` steps
after the same warm-up; the difference over the steps is the cost of one
step, interpreter start and imports cancelling out (the cyclic GC is off
and the hash seed fixed, so that repeated runs agree within ~1 %). Instructions are not
time (the cold-cache cost after a real training step is `bench_profiling`'s
figure), but fewer instructions and Python calls is what makes that cheaper.

Scenarios (the kit has no torch in it: none is imported):

- ``empty``: the loop alone, the floor every other figure includes;
- ``with_stage``: one ``with profiler.stage("rollout"):`` around nothing;
- ``decorated_stage``: one call of a function decorated with ``@profiler.stage``;
- ``hooks``: ``on_step_begin`` + ``add_batch`` + ``on_step_end`` (no stages);
- ``bench_step``: what `bench_profiling`'s A/B adds per step: the hooks, one
  ``with`` stage and two decorated calls nested in it.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training_platform.callbacks.profiling.step_profiler import StepProfiler

SCENARIOS = ("empty", "with_stage", "decorated_stage", "hooks", "bench_step")
WARMUP = 300


def child(scenario: str, steps: int) -> None:
    """Run `scenario` WARMUP + `steps` times (inside valgrind)."""
    import training_platform
    from training_platform.callbacks.profiling.step_profiler import StepProfiler

    tree = Path(os.environ["PYTHONPATH"]).resolve()
    if not Path(training_platform.__file__).resolve().is_relative_to(tree):
        sys.exit(f"training_platform came from {training_platform.__file__}, not {tree}")

    with tempfile.TemporaryDirectory() as tmp:
        # memory=False: a memory sample is due by the clock, so under valgrind
        # (~50x slower) it would run every step instead of every ~20.
        run_scenario(StepProfiler("count", tmp, memory=False), scenario, steps)


def run_scenario(profiler: StepProfiler, scenario: str, steps: int) -> None:
    """The loop valgrind counts: the scenario's work, WARMUP + `steps` times."""
    forward = profiler.stage("policy_forward")(lambda: None)
    optimizer_step = profiler.stage("optimizer")(lambda: None)

    def empty(step: int) -> None:
        pass

    def with_stage(step: int) -> None:
        with profiler.stage("rollout"):
            pass

    def decorated_stage(step: int) -> None:
        forward()

    def hooks(step: int) -> None:
        profiler.on_step_begin(step)
        profiler.add_batch(samples=64, tokens=400)
        profiler.on_step_end(step)

    def bench_step(step: int) -> None:
        profiler.on_step_begin(step)
        with profiler.stage("step"):
            forward()
            optimizer_step()
        profiler.add_batch(samples=64, tokens=400)
        profiler.on_step_end(step)

    scenarios: dict[str, Callable[[int], None]] = {
        "empty": empty,
        "with_stage": with_stage,
        "decorated_stage": decorated_stage,
        "hooks": hooks,
        "bench_step": bench_step,
    }
    run = scenarios[scenario]
    # Collections of the cyclic GC land at points that vary with what the
    # interpreter allocated at start-up: they would blur the counts.
    gc.disable()
    for step in range(WARMUP + steps):
        run(step)
        if scenario in ("with_stage", "decorated_stage") and step % 1000 == 0:
            profiler.timer.collect()  # keeps the queue of finished stages short


def instructions(tree: Path, scenario: str, steps: int) -> int:
    """Total instructions of one child run, from cachegrind's summary line."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cachegrind.out"
        # A fixed hash seed: dict and set layouts, hence counts, repeat exactly.
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                scenario,
                "--steps",
                str(steps),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no summary line in cachegrind's output for {scenario}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    if shutil.which("valgrind") is None:  # `make bench` goes on to the other scripts
        print("skipped: valgrind is not installed (Debian: apt-get install valgrind)")
        return
    print(f"instructions per step, {args.steps} steps, code from {args.tree}")
    per_step = {}
    for scenario in SCENARIOS:
        extra = instructions(args.tree, scenario, args.steps)
        floor = instructions(args.tree, scenario, 0)
        per_step[scenario] = (extra - floor) / args.steps
        above = per_step[scenario] - per_step.get("empty", 0.0)
        print(f"  {scenario:16s} {per_step[scenario]:9,.0f}   kit: {above:9,.0f}")


if __name__ == "__main__":
    main()
