"""The host sampler: CPU, memory, disk, network and GPUs into ``{job_id}_system.jsonl``
(docs/trainer.md, System metrics), and ``training-platform sysmon`` for other nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from training_platform.callbacks.system.sampler import StepSource, SystemSampler
from training_platform.callbacks.wire.system_file import system_file_name

__all__ = ["NoSampler", "SystemSampler", "callback_sampler"]


class _Run(Protocol):
    job_id: str
    output_dir: Path
    enabled: bool


class NoSampler:
    """What a callback holds when it samples nothing (interval 0, or not this rank)."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def callback_sampler(
    run: _Run, interval: float | None, step_source: StepSource
) -> SystemSampler | NoSampler:
    """`PlatformCallback`'s sampler of this host into ``{output_dir}/{job_id}_system.jsonl``;
    a `NoSampler` when `interval` is 0 (or None) or the callback writes nothing."""
    if not interval or not run.enabled:
        return NoSampler()
    path = run.output_dir / system_file_name(run.job_id)
    return SystemSampler(
        path, interval, step_source=step_source, name=f"platform-system-{run.job_id}"
    )
