"""`platform_run`: the plain-loop adapter, a context manager around `PlatformCallback`.

    with platform_run("run7", total_steps=1000) as run:
        for step in range(1000):
            loss = train_step()
            run.log(step, {"loss": loss, "kl": kl, "reward": reward})

The block ends the run: ``completed`` when it finishes, ``failed`` (with the
error) when an exception leaves it, ``stopped`` on Ctrl-C or when
`stop_on_anomaly=True` raised `StopTraining` — which the block swallows, so the
code after it runs; `run.stopped` and `run.stop_reason` tell what happened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from training_platform.callbacks.base import Callback, CallbackList, Metrics, StopTraining
from training_platform.callbacks.platform_callback import PlatformCallback


class PlatformRun:
    """What `platform_run` yields: log steps, time them, reach the callbacks."""

    def __init__(self, platform: PlatformCallback, callbacks: CallbackList) -> None:
        self.platform = platform
        self.callbacks = callbacks
        self.stopped = False
        self.stop_reason: str | None = None
        self._current: int | None = None

    @property
    def job_id(self) -> str:
        return self.platform.job_id

    def log(self, step: int, metrics: Metrics) -> None:
        """Record `metrics` for `step`: written at once, or at the end of
        ``with run.step(step)`` when called inside it. May raise `StopTraining`."""
        if self._current == step:
            self.callbacks.on_log(step, metrics)
        else:
            self.callbacks.on_step_end(step, metrics)

    def log_samples(
        self,
        step: int,
        prompts: Any,
        completions: Any,
        rewards: Any = None,
        reward_components: Any = None,
        groups: Any = None,
        response_lengths: Any = None,
        finish_reasons: Any = None,
        extra: Any = None,
    ) -> None:
        """Append `step`'s generated samples to ``{job_id}_samples.jsonl``:
        `PlatformCallback.log_samples` (docs/trainer.md, Samples)."""
        self.platform.log_samples(
            step, prompts, completions, rewards, reward_components, groups,
            response_lengths, finish_reasons, extra,
        )  # fmt: skip

    @contextmanager
    def step(self, step: int) -> Iterator[PlatformRun]:
        """Bracket one step, so contributors (profiling) can time it:
        ``with run.step(i): ...; run.log(i, metrics)``."""
        self.callbacks.on_step_begin(step)
        self._current = step
        try:
            yield self
        finally:
            self._current = None
        self.callbacks.on_step_end(step, None)

    def evaluate(self, step: int, metrics: Metrics) -> None:
        self.callbacks.on_evaluate(step, metrics)

    def save(self, step: int, path: str | os.PathLike[str] | None = None) -> None:
        self.callbacks.on_save(step, None if path is None else os.fspath(path))


@contextmanager
def platform_run(
    job_id: str,
    output_dir: str | os.PathLike[str] | None = None,
    *,
    total_steps: int | None = None,
    callbacks: Iterable[Callback] = (),
    **platform_options: Any,
) -> Iterator[PlatformRun]:
    """Run a hand-written training loop under a `PlatformCallback`.

    `platform_options` go to `PlatformCallback` (``stop_on_anomaly=True``,
    ``kl_threshold=...``, ``contributors=[...]``, ...); `callbacks` receive the
    same hooks, before the platform callback does.
    """
    platform = PlatformCallback(job_id, output_dir, **platform_options)
    hooks = CallbackList([*callbacks, platform])
    run = PlatformRun(platform, hooks)
    hooks.on_train_begin(total_steps)
    try:
        yield run
    except StopTraining as stop:
        run.stopped = True
        run.stop_reason = stop.reason
        hooks.on_exception(stop)
        hooks.on_train_end()
    except BaseException as exc:
        hooks.on_exception(exc)
        hooks.on_train_end()
        raise
    else:
        hooks.on_train_end()
