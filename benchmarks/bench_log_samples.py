"""Cost of `PlatformCallback.log_samples` on the training thread, against writing lines yourself.

Run: ``python benchmarks/bench_log_samples.py`` (about half a minute;
``--steps``, ``--rounds``, ``--samples``, ``--chars``).

One step logs `--samples` samples (256) of about `--chars` characters (2,000:
a 500-character prompt, a 1,500-character completion), with a reward, two
reward components, a group per 8 samples, a length and a finish reason:
what a GRPO rollout would hand over. The text changes every step.

Contenders (interleaved rounds in one process, fresh files each round):

- ``log_samples (lists)``: `PlatformCallback.log_samples` with plain lists,
  background writer (the default).
- ``log_samples (tensors)``: the same with the numbers as torch CPU tensors
  (rewards, components, lengths), if torch is installed.
- ``open().write, encode inline``: the training thread builds each line with
  the same `build_sample` + `encode_record` and writes them with one
  ``file.write`` + ``flush`` per step: doing it yourself.
- ``open().write, bytes only``: the same lines encoded beforehand, only
  ``write`` + ``flush``: the I/O floor, below anything that builds lines.

Per contender and round:

- **call p50 / p99**: one step's call on the training thread (µs).
- **loop/step**: wall time of a loop of calls back to back, per step; the
  writer thread runs meanwhile and takes the GIL from the training thread,
  so its share is in this figure.
- **+drain/step**: the loop plus waiting until every line is in the file.
- **CPU/step**: `time.process_time()` over loop + drain: every thread's CPU
  (training and writer), the figure least disturbed by a busy machine.

Medians over rounds. Absolute figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample

torch: Any
try:
    import torch
except ImportError:  # pragma: no cover - the tensor contender is skipped
    torch = None


def make_step(step: int, samples: int, chars: int) -> dict[str, Any]:
    prompt_chars = chars // 4
    completion_chars = chars - prompt_chars
    seed = f"step {step} "
    prompts = [(seed + f"prompt {i // 8} ") * (prompt_chars // 20) for i in range(samples)]
    completions = [(seed + f"answer {i} ") * (completion_chars // 20) for i in range(samples)]
    return {
        "prompts": [p[:prompt_chars] for p in prompts],
        "completions": [c[:completion_chars] for c in completions],
        "rewards": [((i * 7 + step) % 11) / 10 for i in range(samples)],
        "reward_components": {
            "accuracy": [float((i + step) % 2) for i in range(samples)],
            "format": [0.5] * samples,
        },
        "groups": [i // 8 for i in range(samples)],
        "response_lengths": [300 + i for i in range(samples)],
        "finish_reasons": ["length" if i % 10 == 0 else "stop" for i in range(samples)],
    }


def as_tensors(columns: dict[str, Any]) -> dict[str, Any]:
    assert torch is not None
    out = dict(columns)
    out["rewards"] = torch.tensor(columns["rewards"])
    out["reward_components"] = {
        name: torch.tensor(values) for name, values in columns["reward_components"].items()
    }
    out["response_lengths"] = torch.tensor(columns["response_lengths"])
    return out


def encode_lines(step: int, columns: dict[str, Any], timestamp: float) -> bytes:
    components = columns["reward_components"]
    lines = [
        encode_record(
            build_sample(
                step,
                i,
                columns["prompts"][i],
                columns["completions"][i],
                reward=columns["rewards"][i],
                rewards={name: values[i] for name, values in components.items()},
                group=str(columns["groups"][i]),
                response_length=columns["response_lengths"][i],
                finish_reason=columns["finish_reasons"][i],
                timestamp=timestamp,
            )
        )
        for i in range(len(columns["prompts"]))
    ]
    return b"".join(lines)


class Contender:
    """`setup(directory)`, `call(step)` per step, `drain()`, `close()`."""

    name = ""

    def setup(self, directory: Path) -> None: ...
    def call(self, step: int) -> None: ...
    def drain(self) -> None: ...
    def close(self) -> None: ...


class Platform(Contender):
    def __init__(self, steps: list[dict[str, Any]], tensors: bool) -> None:
        self.name = f"log_samples ({'tensors' if tensors else 'lists'})"
        self.steps = [as_tensors(s) for s in steps] if tensors else steps
        self.callback: PlatformCallback | None = None

    def setup(self, directory: Path) -> None:
        self.callback = PlatformCallback(
            "bench", directory, enable_anomaly_detection=False, max_samples_per_step=1 << 20
        )
        self.callback.on_train_begin()

    def call(self, step: int) -> None:
        assert self.callback is not None
        self.callback.log_samples(step, **self.steps[step % len(self.steps)])

    def drain(self) -> None:
        assert self.callback is not None
        self.callback.flush()

    def close(self) -> None:
        assert self.callback is not None
        self.callback.on_train_end()


class PlainWrite(Contender):
    def __init__(self, steps: list[dict[str, Any]], encode: bool) -> None:
        self.name = "open().write, encode inline" if encode else "open().write, bytes only"
        self.steps = steps
        self.encode = encode
        self.encoded = [encode_lines(i, s, 1.7e9) for i, s in enumerate(steps)]
        self.handle: Any = None

    def setup(self, directory: Path) -> None:
        self.handle = open(directory / "plain_samples.jsonl", "ab")  # noqa: SIM115

    def call(self, step: int) -> None:
        index = step % len(self.steps)
        if self.encode:
            data = encode_lines(step, self.steps[index], time.time())
        else:
            data = self.encoded[index]
        self.handle.write(data)
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def measure(contender: Contender, steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        contender.setup(Path(directory))
        # Latency of single calls (the writer drained between them: no GIL contention).
        latencies = []
        for step in range(min(steps, 100)):
            started = time.perf_counter()
            contender.call(step)
            latencies.append(time.perf_counter() - started)
            contender.drain()
        contender.close()
    with tempfile.TemporaryDirectory() as directory:
        contender.setup(Path(directory))
        cpu = time.process_time()
        started = time.perf_counter()
        for step in range(steps):
            contender.call(step)
        looped = time.perf_counter() - started
        contender.drain()
        drained = time.perf_counter() - started
        cpu = time.process_time() - cpu
        contender.close()
    latencies.sort()
    return {
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "loop": looped / steps,
        "drain": drained / steps,
        "cpu": cpu / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--chars", type=int, default=2000)
    args = parser.parse_args()
    data = [make_step(step, args.samples, args.chars) for step in range(16)]
    size = len(encode_lines(0, data[0], 1.7e9)) / args.samples
    contenders: list[Contender] = [
        PlainWrite(data, encode=False),
        PlainWrite(data, encode=True),
        Platform(data, tensors=False),
    ]
    if torch is not None:
        contenders.append(Platform(data, tensors=True))
    results: dict[str, list[dict[str, float]]] = {c.name: [] for c in contenders}
    for _ in range(args.rounds):
        for contender in contenders:
            results[contender.name].append(measure(contender, args.steps))
    print(
        f"{args.samples} samples/step, {size:,.0f} bytes/line, {args.steps} steps x "
        f"{args.rounds} rounds (medians; microseconds per step)"
    )
    header = (
        f"{'contender':30} {'call p50':>10} {'call p99':>10} {'loop/step':>10} {'+drain':>10}"
        f" {'CPU/step':>10}"
    )
    print(header)
    print("-" * len(header))
    median: Callable[[str, str], float] = lambda name, key: statistics.median(  # noqa: E731
        r[key] for r in results[name]
    )
    for contender in contenders:
        name = contender.name
        print(
            f"{name:30} {median(name, 'p50') * 1e6:10.0f} {median(name, 'p99') * 1e6:10.0f} "
            f"{median(name, 'loop') * 1e6:10.0f} {median(name, 'drain') * 1e6:10.0f} "
            f"{median(name, 'cpu') * 1e6:10.0f}"
        )


if __name__ == "__main__":
    main()
