"""Lifecycle hooks for a training loop, and a list that dispatches them safely.

A monitoring callback must never be the reason a week-long run dies: every
hook of `CallbackList` catches what a callback raises, logs it once per
callback and hook, and carries on. The one exception that passes through on
purpose is `StopTraining`, which a callback raises to stop the run cleanly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from training_platform.errors import PlatformError

logger = logging.getLogger(__name__)

Metrics = Mapping[str, Any]


class StopTraining(PlatformError):
    """Raised by a callback to stop training cleanly (e.g. `stop_on_anomaly=True`).

    `platform_run` catches it and marks the run ``stopped``; a hand-written loop
    can catch it around its step. `anomalies` holds what tripped the stop.
    """

    def __init__(self, reason: str, anomalies: Iterable[Mapping[str, Any]] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.anomalies = [dict(a) for a in anomalies]


@runtime_checkable
class StepContributor(Protocol):
    """Something that measures a step and adds metrics to its record (profiling kit).

    `on_step_end` returns the groups of docs/contract.md §2 (``{"timing": {...}}``) or flat keys,
    plus optionally ``"anomalies": [...]``. It runs on the training thread.
    """

    def on_step_begin(self, step: int) -> None: ...

    def on_step_end(self, step: int) -> Mapping[str, Any]: ...


class Callback:
    """Base class: override the hooks you need; each default does nothing.

    Steps are the optimizer steps of the run (what `step` means in a record).
    `metrics` may be flat trainer keys or record groups (docs/contract.md §2;
    see `wire_records.build_record`).
    """

    def on_train_begin(self, total_steps: int | None = None) -> None:
        """Training starts; `total_steps` when the loop knows it."""

    def on_train_end(self) -> None:
        """Training finished (normally, or after `on_exception` / a stop)."""

    def on_epoch_begin(self, epoch: int) -> None:
        """An epoch starts."""

    def on_epoch_end(self, epoch: int) -> None:
        """An epoch ended."""

    def on_step_begin(self, step: int) -> None:
        """Step `step` starts (before its rollout)."""

    def on_step_end(self, step: int, metrics: Metrics | None = None) -> None:
        """Step `step` is done; `metrics` are what the trainer reports for it."""

    def on_rollout_end(self, step: int, metrics: Metrics | None = None) -> None:
        """Generation for step `step` is done (RL): rollout statistics, if any."""

    def on_evaluate(self, step: int, metrics: Metrics) -> None:
        """An evaluation ran at step `step`."""

    def on_save(self, step: int, path: str | None = None) -> None:
        """A checkpoint was written at step `step` (to `path` when known)."""

    def on_log(self, step: int, metrics: Metrics) -> None:
        """The trainer logged `metrics` for step `step` (may come after `on_step_end`)."""

    def on_exception(self, exc: BaseException) -> None:
        """Training is dying of `exc` (called before `on_train_end`)."""


# Hooks that run after training is over: a stop request there means nothing.
_FINAL_HOOKS = frozenset({"on_train_end", "on_exception"})


class CallbackList(Callback):
    """Dispatches each hook to every callback in order; a failing callback never
    breaks the loop. A `StopTraining` is re-raised once all callbacks have seen
    the hook, so that each of them still records the step.
    """

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self.callbacks: list[Callback] = list(callbacks)
        self._reported: set[tuple[int, str]] = set()
        self.failures = 0

    def __iter__(self) -> Iterator[Callback]:
        return iter(self.callbacks)

    def __len__(self) -> int:
        return len(self.callbacks)

    def append(self, callback: Callback) -> None:
        self.callbacks.append(callback)

    def _dispatch(self, hook: str, *args: Any) -> None:
        stop: StopTraining | None = None
        for callback in self.callbacks:
            try:
                getattr(callback, hook)(*args)
            except StopTraining as exc:
                if stop is None and hook not in _FINAL_HOOKS:
                    stop = exc
            except Exception:
                self.failures += 1
                report_failure(self._reported, callback, hook)
        if stop is not None:
            raise stop

    def on_train_begin(self, total_steps: int | None = None) -> None:
        self._dispatch("on_train_begin", total_steps)

    def on_train_end(self) -> None:
        self._dispatch("on_train_end")

    def on_epoch_begin(self, epoch: int) -> None:
        self._dispatch("on_epoch_begin", epoch)

    def on_epoch_end(self, epoch: int) -> None:
        self._dispatch("on_epoch_end", epoch)

    def on_step_begin(self, step: int) -> None:
        self._dispatch("on_step_begin", step)

    def on_step_end(self, step: int, metrics: Metrics | None = None) -> None:
        self._dispatch("on_step_end", step, metrics)

    def on_rollout_end(self, step: int, metrics: Metrics | None = None) -> None:
        self._dispatch("on_rollout_end", step, metrics)

    def on_evaluate(self, step: int, metrics: Metrics) -> None:
        self._dispatch("on_evaluate", step, metrics)

    def on_save(self, step: int, path: str | None = None) -> None:
        self._dispatch("on_save", step, path)

    def on_log(self, step: int, metrics: Metrics) -> None:
        self._dispatch("on_log", step, metrics)

    def on_exception(self, exc: BaseException) -> None:
        self._dispatch("on_exception", exc)


def report_failure(reported: set[tuple[int, str]], obj: object, hook: str) -> None:
    """Log the exception being handled, once per (object, hook): a callback that
    fails every step must not flood the training log with one traceback per step.
    Call it from an ``except`` block.
    """
    key = (id(obj), hook)
    if key in reported:
        return
    reported.add(key)
    logger.exception(
        "%s.%s failed; training continues (further failures of this hook are not logged)",
        type(obj).__name__,
        hook,
    )


def call_safely(
    reported: set[tuple[int, str]], obj: object, hook: str, fn: Callable[[], Any]
) -> Any:
    """Run `fn()`; on an ordinary exception log it once and return None."""
    try:
        return fn()
    except StopTraining:
        raise
    except Exception:
        report_failure(reported, obj, hook)
        return None


def describe_exception(exc: BaseException) -> str:
    """``"Type: message"`` (just the type when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
