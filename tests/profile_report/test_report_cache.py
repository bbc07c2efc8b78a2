"""`ReportCache`: cached per profile state, one computation per key, a few at once, stopped
when nobody waits (issue 23, section 3). Each test drives the cache on its own event loop;
jobs block on events instead of sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from training_platform.profile_report.report_cache import (
    ClientGone,
    ReportCache,
    ReportKey,
    TraceScanMemo,
)
from training_platform.profile_report.source import ProfileFile

WAIT = 5.0  # seconds a condition may take before the test fails (never slept)


class Job:
    """A computation that counts its runs, may hold until released, and obeys `stop`."""

    active = 0
    most_active = 0
    lock = threading.Lock()

    def __init__(self, value: str = "report", *, hold: threading.Event | None = None) -> None:
        self.value = value
        self.hold = hold
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.runs = 0
        self.closes = 0

    def run(self, stop: threading.Event) -> str:
        self.runs += 1
        with Job.lock:
            Job.active += 1
            Job.most_active = max(Job.most_active, Job.active)
        self.started.set()
        try:
            while self.hold is not None and not self.hold.wait(0.005):
                if stop.is_set():  # as the scan does between chunks
                    self.stopped.set()
                    raise RuntimeError("stopped")
            return self.value
        finally:
            with Job.lock:
                Job.active -= 1

    def close(self) -> None:
        self.closes += 1


@pytest.fixture(autouse=True)
def _count_afresh() -> None:
    Job.active = Job.most_active = 0


def key(profile: str = "p", *files: tuple[str, int, float]) -> ReportKey:
    return ReportKey(profile, files or (("trace.json", 10, 1.0),))


def cache(max_running: int = 2) -> ReportCache[str]:
    return ReportCache(max_running=max_running, poll_seconds=0.005)


async def connected() -> bool:
    return False


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.002)

    await asyncio.wait_for(poll(), WAIT)


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """`main()` on a fresh event loop in its own thread: a browser test run
    earlier in the session leaves playwright's loop running on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def test_an_unchanged_profile_is_answered_from_memory() -> None:
    first, second = Job("one"), Job("two")

    async def main() -> list[str]:
        reports = cache()
        return [
            await reports.get(key(), first, connected),
            await reports.get(key(), second, connected),
        ]

    assert run(main) == ["one", "one"]
    assert (first.runs, second.runs) == (1, 0)
    assert (first.closes, second.closes) == (1, 1)  # the unused job released its reader too


@pytest.mark.parametrize(
    "changed",
    [
        (("trace.json", 11, 1.0),),  # size
        (("trace.json", 10, 2.0),),  # mtime
        (("trace.json", 10, 1.0), ("step_2/trace.json", 5, 1.0)),  # a file added
    ],
)
def test_a_changed_file_computes_the_report_again(changed: tuple[tuple[str, int, float]]) -> None:
    async def main() -> list[str]:
        reports = cache()
        before = await reports.get(key(), Job("old"), connected)
        after = await reports.get(key("p", *changed), Job("new"), connected)
        return [before, after, await reports.get(key("p", *changed), Job("unused"), connected)]

    assert run(main) == ["old", "new", "new"]


def test_concurrent_requests_share_one_computation() -> None:
    hold = threading.Event()
    jobs = [Job(f"job{n}", hold=hold) for n in range(5)]

    async def main() -> list[str]:
        reports = cache()
        asks = [asyncio.create_task(reports.get(key(), job, connected)) for job in jobs]
        await until(lambda: reports.waiting == 5)
        hold.set()
        return await asyncio.gather(*asks)

    assert run(main) == ["job0"] * 5
    assert [job.runs for job in jobs] == [1, 0, 0, 0, 0]
    assert [job.closes for job in jobs] == [1] * 5


def test_no_more_computations_run_at_once_than_the_limit() -> None:
    hold = threading.Event()
    jobs = [Job(f"profile{n}", hold=hold) for n in range(5)]

    async def main() -> list[str]:
        reports = cache(max_running=2)
        asks = [
            asyncio.create_task(reports.get(key(f"profile{n}"), job, connected))
            for n, job in enumerate(jobs)
        ]
        await until(lambda: reports.running == 2 and reports.waiting == 5)
        assert sum(job.started.is_set() for job in jobs) == 2  # the others wait for a slot
        hold.set()
        return await asyncio.gather(*asks)

    assert run(main) == [f"profile{n}" for n in range(5)]
    assert Job.most_active == 2


def test_a_computation_stops_when_its_only_client_goes_away() -> None:
    job = Job(hold=threading.Event())

    async def main() -> tuple[int, int]:
        reports = cache()
        leave = asyncio.Event()

        async def disconnected() -> bool:
            return leave.is_set()

        ask = asyncio.create_task(reports.get(key(), job, disconnected))
        await until(job.started.is_set)
        leave.set()
        with pytest.raises(ClientGone):
            await ask
        await until(lambda: job.closes == 1)
        # Nothing was kept: the next request computes.
        again = Job("again")
        assert await reports.get(key(), again, connected) == "again"
        return reports.running, again.runs

    assert run(main) == (0, 1)
    assert job.stopped.is_set() and job.runs == 1


def test_a_request_right_after_the_last_client_left_starts_afresh() -> None:
    slow_to_stop = threading.Event()

    class Stubborn(Job):
        def run(self, stop: threading.Event) -> str:
            self.started.set()
            slow_to_stop.wait(WAIT)  # checks `stop` only at its next chunk
            return self.value

    left, fresh = Stubborn("left"), Job("fresh")

    async def main() -> str:
        reports = cache()
        leave = asyncio.Event()

        async def disconnected() -> bool:
            return leave.is_set()

        ask = asyncio.create_task(reports.get(key(), left, disconnected))
        await until(left.started.is_set)
        leave.set()
        with pytest.raises(ClientGone):
            await ask
        try:  # the first computation has not stopped yet
            return await reports.get(key(), fresh, connected)
        finally:
            slow_to_stop.set()

    assert run(main) == "fresh"
    assert fresh.runs == 1


def test_the_computation_goes_on_while_another_client_still_waits() -> None:
    hold = threading.Event()
    job, other = Job("shared", hold=hold), Job("unused")

    async def main() -> str:
        reports = cache()
        leave = asyncio.Event()

        async def first_client_gone() -> bool:
            return leave.is_set()

        leaving = asyncio.create_task(reports.get(key(), job, first_client_gone))
        staying = asyncio.create_task(reports.get(key(), other, connected))
        await until(lambda: reports.waiting == 2)
        leave.set()
        with pytest.raises(ClientGone):
            await leaving
        hold.set()
        return await staying

    assert run(main) == "shared"
    assert not job.stopped.is_set() and job.runs == 1 and job.closes == 1


def test_a_queued_computation_whose_client_left_never_runs() -> None:
    hold = threading.Event()
    running, queued = Job("first", hold=hold), Job("second")

    async def main() -> None:
        reports = cache(max_running=1)
        leave = asyncio.Event()

        async def disconnected() -> bool:
            return leave.is_set()

        first = asyncio.create_task(reports.get(key("a"), running, connected))
        second = asyncio.create_task(reports.get(key("b"), queued, disconnected))
        await until(lambda: reports.waiting == 2 and running.started.is_set())
        leave.set()
        with pytest.raises(ClientGone):
            await second
        await until(lambda: queued.closes == 1)
        hold.set()
        assert await first == "first"

    run(main)
    assert queued.runs == 0


def test_an_error_reaches_every_waiter_and_is_not_kept() -> None:
    hold = threading.Event()

    class Failing(Job):
        def run(self, stop: threading.Event) -> str:
            hold.wait(WAIT)
            raise OSError("the host went away")

    async def main() -> str:
        reports = cache()
        asks = [asyncio.create_task(reports.get(key(), Failing(), connected)) for _ in range(2)]
        await until(lambda: reports.waiting == 2)
        hold.set()
        for outcome in await asyncio.gather(*asks, return_exceptions=True):
            assert isinstance(outcome, OSError)
        return await reports.get(key(), Job("retried"), connected)

    assert run(main) == "retried"


def test_a_report_of_older_files_does_not_replace_a_newer_one() -> None:
    slow_hold = threading.Event()
    old, new = Job("old", hold=slow_hold), Job("new")
    newer = key("p", ("trace.json", 99, 9.0))

    async def main() -> str:
        reports = cache()
        slow = asyncio.create_task(reports.get(key(), old, connected))
        await until(old.started.is_set)
        assert await reports.get(newer, new, connected) == "new"
        slow_hold.set()
        assert await slow == "old"  # its own client still gets it
        return await reports.get(newer, Job("unused"), connected)

    assert run(main) == "new"


def test_the_trace_memo_knows_a_file_by_path_size_and_mtime() -> None:
    memo = TraceScanMemo(max_entries=2)
    scans = memo.for_profile(("job", "local", "/m"))
    trace = ProfileFile("step_1/trace.json", 10, 1.0)
    scans.put(trace, {"events": 1})
    assert scans.get(trace) == {"events": 1}
    assert scans.get(ProfileFile("step_1/trace.json", 10, 2.0)) is None
    assert scans.get(ProfileFile("step_1/trace.json", 11, 1.0)) is None
    assert memo.for_profile(("other", "local", "/m")).get(trace) is None
    unknown_mtime = ProfileFile("step_2/trace.json", 10)
    scans.put(unknown_mtime, {"events": 2})
    assert scans.get(unknown_mtime) is None  # nothing tells a rewritten file apart
    for step in range(3, 6):
        scans.put(ProfileFile(f"step_{step}/trace.json", 1, 1.0), {})
    assert scans.get(trace) is None  # the oldest went first
