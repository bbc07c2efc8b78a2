"""Reports computed once per profile state, a few at a time, and only while someone waits.

A report reads every trace of a profile (hundreds of MB), so `ReportCache`:

- keeps the last result per profile, keyed by what the profile holds (each
  file's path, size and modification time): the same files answer from
  memory, a changed, added or removed file computes anew;
- runs one computation per key however many requests ask at once (single
  flight): the others wait on it;
- runs at most `max_running` computations at once, each in a worker thread;
  the rest wait for a slot without holding a thread;
- stops a computation when every request waiting on it has gone: the worker
  is told through a `threading.Event` it checks between chunks;
- keeps what each trace yielded (`TraceScanMemo`), so a profile that changed
  (a training run rewrites `stage_times.json` every 30 s, adds a step's
  trace now and then) reads again only the files that changed.

asyncio only (no FastAPI): the API gives it the request's `is_disconnected`.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from training_platform.profile_report.source import ProfileFile

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

DEFAULT_MAX_ENTRIES = 32  # profiles remembered; a report is tens of kB
DEFAULT_MAX_SCANS = 256  # single traces' scans remembered (8 traces x 32 profiles); a few kB each
DEFAULT_POLL_SECONDS = 0.25  # how often a waiting request asks whether its client is still there


class ClientGone(Exception):
    """The request's client disconnected before its report was ready."""


@dataclass(frozen=True)
class ReportKey:
    profile: Hashable  # which profile: the job and where its files are
    files: tuple[tuple[str, int, float | None], ...]  # (path, size, mtime) of each file
    options: tuple[Hashable, ...] = ()  # what else shapes the report (caps)


class ReportJob(Protocol[T_co]):
    """One computation, handed to the cache: run at most once, closed exactly once."""

    def run(self, stop: threading.Event) -> T_co:
        """Compute (in a worker thread); raise once `stop` is set."""
        ...

    def close(self) -> None:
        """Release what the job holds (a reader, an SSH connection); in a worker thread."""
        ...


_numbers = itertools.count()


@dataclass
class _Flight(Generic[T]):
    number: int = field(default_factory=lambda: next(_numbers))  # later flights, larger
    stop: threading.Event = field(default_factory=threading.Event)
    waiters: int = 0
    task: asyncio.Task[T] | None = None


class ReportCache(Generic[T]):
    """Results per `ReportKey.profile`, valid while the key's files are the same."""

    def __init__(
        self,
        *,
        max_running: int,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self.max_running = max_running
        self.max_entries = max_entries
        self.poll_seconds = poll_seconds
        self.running = 0  # computations in a worker thread now
        self._slots = asyncio.Semaphore(max_running)
        # Threads of their own, as many as the slots: a long report never takes
        # the threads that other requests (and the cache hits' closes) run on.
        self._threads = ThreadPoolExecutor(max_running, thread_name_prefix="profile-report")
        # profile -> (key, number of the flight that computed it, result)
        self._results: OrderedDict[Hashable, tuple[ReportKey, int, T]] = OrderedDict()
        self._flights: dict[ReportKey, _Flight[T]] = {}
        self.scans = TraceScanMemo()

    @property
    def waiting(self) -> int:
        """Requests waiting on a computation (running or queued)."""
        return sum(flight.waiters for flight in self._flights.values())

    async def get(
        self, key: ReportKey, job: ReportJob[T], disconnected: Callable[[], Awaitable[bool]]
    ) -> T:
        """The result for `key`: cached, shared with a running computation, or computed by `job`.

        `job` belongs to the cache from here on (closed when unused, or after it
        ran). ClientGone when `disconnected()` turns true first; the computation
        is then stopped unless another request still waits on it.
        """
        cached = self._results.get(key.profile)
        if cached is not None and cached[0] == key:
            self._results.move_to_end(key.profile)
            await asyncio.to_thread(job.close)
            return cached[2]
        flight = self._flights.get(key)
        unused = flight is not None
        if flight is None:
            flight = self._flights[key] = _Flight()
            flight.task = asyncio.create_task(self._compute(key, job, flight))
            flight.task.add_done_callback(lambda task: self._land(key, flight, task))
        flight.waiters += 1  # before any await: the flight must not be stopped under us
        try:
            if unused:
                await asyncio.to_thread(job.close)
            assert flight.task is not None
            return await self._wait(flight.task, disconnected)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and flight.task is not None and not flight.task.done():
                flight.stop.set()
                flight.task.cancel()
                # Forgotten now, not when its thread has stopped: a request coming
                # meanwhile must start afresh, not wait on a cancelled computation.
                if self._flights.get(key) is flight:
                    del self._flights[key]

    async def _wait(self, task: asyncio.Task[T], disconnected: Callable[[], Awaitable[bool]]) -> T:
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.poll_seconds)
            if done:
                return task.result()
            if await disconnected():
                raise ClientGone("the client went away before its report was ready")

    async def _compute(self, key: ReportKey, job: ReportJob[T], flight: _Flight[T]) -> T:
        started = False
        try:
            async with self._slots:
                started = True
                self.running += 1
                try:
                    return await _run_to_the_end(job, flight.stop, self._threads)
                finally:
                    self.running -= 1
        finally:
            if not started:  # stopped while waiting for a slot: the job never ran
                await asyncio.shield(asyncio.to_thread(job.close))

    def _land(self, key: ReportKey, flight: _Flight[T], task: asyncio.Task[T]) -> None:
        """The flight ended: forget it, and keep its result unless a later flight's is kept."""
        if self._flights.get(key) is flight:
            del self._flights[key]
        if task.cancelled():
            return
        if task.exception() is not None:
            # Retrieved even when nobody waits any more (asyncio would log it);
            # an error is not cached: the next request tries again.
            return
        kept = self._results.get(key.profile)
        if kept is not None and kept[1] > flight.number:
            return  # the files changed meanwhile and a newer report landed first
        self._results[key.profile] = (key, flight.number, task.result())
        self._results.move_to_end(key.profile)
        while len(self._results) > self.max_entries:
            self._results.popitem(last=False)


async def _run_to_the_end(
    job: ReportJob[T], stop: threading.Event, threads: ThreadPoolExecutor
) -> T:
    """`job.run` then `job.close` in a worker thread; cancelled, it stops the job and waits.

    The slot is held until the thread really ends: a cancelled computation
    that went on in the background would let more than `max_running` run.
    """

    def run() -> T:
        try:
            return job.run(stop)
        finally:
            job.close()

    work = asyncio.get_running_loop().run_in_executor(threads, run)
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()
        await asyncio.wait({work})  # the job stops at its next check of `stop`
        if not work.cancelled():
            work.exception()  # retrieved: a stopped job's error interests nobody
        raise


class TraceScanMemo:
    """What single traces yielded, across reports; shared by the worker threads."""

    def __init__(self, max_entries: int = DEFAULT_MAX_SCANS) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, dict[str, Any]] = OrderedDict()

    def for_profile(self, profile: Hashable) -> ProfileScans:
        return ProfileScans(self, profile)

    def get(self, key: Hashable) -> dict[str, Any] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, scanned: dict[str, Any]) -> None:
        with self._lock:
            self._entries[key] = scanned
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


@dataclass(frozen=True)
class ProfileScans:
    """`TraceScanMemo` for one profile (`report.TraceScans`): a file is its path, size and mtime."""

    memo: TraceScanMemo
    profile: Hashable

    def get(self, trace: ProfileFile) -> dict[str, Any] | None:
        if trace.modified is None:  # nothing tells a rewritten file of the same size apart
            return None
        return self.memo.get((self.profile, trace.path, trace.size, trace.modified))

    def put(self, trace: ProfileFile, scanned: dict[str, Any]) -> None:
        if trace.modified is not None:
            self.memo.put((self.profile, trace.path, trace.size, trace.modified), scanned)
