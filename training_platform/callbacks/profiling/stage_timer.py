"""Stage timing: ``with timer.stage("rollout"):`` (or ``@timer.stage("rollout")``).

Nested stages are named by their path (``update`` and ``update/actor``); a stage
entered several times within one step adds up. `collect()` hands out the
step's stage times (seconds, for the record's ``timing`` group) and feeds the
run-long summary behind ``stage_times.json``.

Hot path: entering and leaving a stage is two clock reads, a push/pop on the
thread's stack and one append to a queue that `collect()` drains (no lock,
no dict update per stage); see docs/profiling.md for what it costs right
after a real training step.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from training_platform.callbacks.profiling.stats import percentile

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
_FOLD_EVERY = 256  # collected steps per batch folded into the run-long statistics


def cuda_synchronizer() -> Callable[[], None] | None:
    """`torch.cuda.synchronize` when torch is importable and a GPU is present, else None.

    CUDA kernels run asynchronously: without a synchronisation a stage that
    launches GPU work is charged only the launch time, and the next stage pays
    for it.
    """
    try:
        import torch
    except ImportError:
        logger.info("cuda_sync requested but torch is not installed: stage times are host times")
        return None
    if not torch.cuda.is_available():
        logger.info("cuda_sync requested but no GPU is available: stage times are host times")
        return None
    return torch.cuda.synchronize


class StageStats:
    """Run-long statistics of one stage's per-step seconds.

    count, total and mean are exact over the whole run; p50 and p95 are taken
    over the most recent `window` steps so memory stays bounded on long runs.
    """

    __slots__ = ("count", "recent", "total")

    def __init__(self, window: int) -> None:
        self.count = 0
        self.total = 0.0
        self.recent: deque[float] = deque(maxlen=window)

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.recent.append(seconds)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.recent)
        return {
            "count": self.count,
            "mean": self.total / self.count if self.count else float("nan"),
            "p50": percentile(ordered, 50),
            "p95": percentile(ordered, 95),
            "total": self.total,
        }


class Stage:
    """One timed region; a context manager, and a decorator that times every call."""

    __slots__ = ("_name", "_path", "_stack", "_start", "_timer")

    def __init__(self, timer: StageTimer, name: str) -> None:
        if not name:
            raise ValueError("a stage needs a non-empty name")
        self._timer = timer
        self._name = name

    # Enter and exit run around every timed region, right after the trainer's
    # own work has pushed this code out of the CPU caches. What a stage costs
    # there grows with the Python calls it makes and the objects it touches
    # (what a call costs: docs/benchmarks.md, Profiling kit), so the hot paths
    # avoid both (see docs/profiling.md).
    def __enter__(self) -> Stage:
        timer = self._timer
        try:
            stack = timer._local.stack
        except AttributeError:
            stack = timer._local.stack = []
        self._stack = stack
        path = self._path = f"{stack[-1]}/{self._name}" if stack else self._name
        stack.append(path)
        if timer._sync is not None:
            timer._sync()
        self._start = timer._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timer = self._timer
        if timer._sync is not None:
            timer._sync()
        elapsed = timer._clock() - self._start
        stack, path = self._stack, self._path
        if stack and stack[-1] is path:
            stack.pop()
        else:
            _remove_innermost(stack, path)
        # deque.append is atomic: stages of several threads need no lock here.
        timer._finished.append((path, elapsed))
        # The time spent before an exception is real: it is recorded, and the
        # exception goes on to the caller untouched.

    def __call__(self, func: F) -> F:
        timer, name = self._timer, self._name
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with Stage(timer, name):
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        # What __enter__/__exit__ do, inlined: one Python call per timed call
        # instead of four (a Stage, its __init__, __enter__ and __exit__).
        # Locals hold the start time, so recursion and threads never share one.
        local, finished, clock, sync = timer._local, timer._finished, timer._clock, timer._sync
        paths: dict[str, str] = {}  # parent path -> nested path: not rebuilt every call

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                stack = local.stack
            except AttributeError:
                stack = local.stack = []
            if stack:
                parent = stack[-1]
                path = paths.get(parent)
                if path is None:
                    path = paths[parent] = f"{parent}/{name}"
            else:
                path = name
            stack.append(path)
            if sync is not None:
                sync()
            start = clock()
            try:
                return func(*args, **kwargs)
            finally:
                if sync is not None:
                    sync()
                elapsed = clock() - start
                if stack and stack[-1] is path:
                    stack.pop()
                else:
                    _remove_innermost(stack, path)
                finished.append((path, elapsed))

        return wrapper  # type: ignore[return-value]


def _remove_innermost(stack: list[str], path: str) -> None:
    """Take `path` off a thread's stack of open stages when it is not on top.

    That happens when coroutines interleave on one thread, each with a stage
    open: the first to leave finds the other's stage above its own. Without
    this its path would stay there, and every later stage would nest under it.
    """
    for index in range(len(stack) - 1, -1, -1):
        if stack[index] is path:
            del stack[index]
            return


class StageTimer:
    """Times named stages per step; see the module docstring.

    `cuda_sync=True` synchronises the GPU on entering and leaving each stage so
    that GPU work is charged to the stage that launched it (it costs the
    pipelining between stages, so it is off by default). `clock` is injectable
    for tests. Each thread has its own nesting stack; stage times of all
    threads add up into the same step. Call `collect()` once per step
    (`StepProfiler` does): finished stages wait in a queue until then.
    """

    def __init__(
        self,
        *,
        cuda_sync: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        summary_window: int = 10_000,
    ) -> None:
        if summary_window < 1:
            raise ValueError("summary_window must be >= 1")
        self._clock = clock
        self._sync = cuda_synchronizer() if cuda_sync else None
        self._local = threading.local()  # .stack: this thread's open stage paths
        self._finished: deque[tuple[str, float]] = deque()  # (path, seconds), any thread
        self._window = summary_window
        self._stats: dict[str, StageStats] = {}
        self._unfolded: list[dict[str, float]] = []  # collected steps not yet in _stats

    @property
    def cuda_sync(self) -> bool:
        """Whether stage boundaries really synchronise the GPU."""
        return self._sync is not None

    def stage(self, name: str) -> Stage:
        """A context manager / decorator timing `name` (nested under any open stage)."""
        return Stage(self, name)

    def collect(self) -> dict[str, float]:
        """The stage seconds accumulated since the last call; they also enter the summary."""
        times: dict[str, float] = {}
        finished = self._finished
        # Pop the `len` entries there now rather than until IndexError: raising
        # it at the end of every step cost more than the loop. A stage ending
        # meanwhile counts now or at the next call; the `except` only serves
        # two threads collecting at once (each entry still goes to one of them).
        try:
            for _ in range(len(finished)):
                path, seconds = finished.popleft()
                times[path] = times.get(path, 0.0) + seconds
        except IndexError:
            pass
        if times:
            # The run-long statistics are folded in batches (`_fold`): per
            # step that is one append instead of a lookup and update per stage.
            self._unfolded.append(times.copy())  # the caller may merge into `times`
            if len(self._unfolded) >= _FOLD_EVERY:
                self._fold()
        return times

    def _fold(self) -> None:
        unfolded, self._unfolded = self._unfolded, []
        for times in unfolded:
            for name, seconds in times.items():
                stats = self._stats.get(name)
                if stats is None:
                    stats = self._stats[name] = StageStats(self._window)
                stats.add(seconds)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage: count (steps it ran in), mean, p50, p95 and total seconds."""
        self._fold()
        return {name: stats.summary() for name, stats in self._stats.items()}
