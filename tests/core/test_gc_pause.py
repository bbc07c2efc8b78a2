"""The collector pause around ingestion batches: nested, threaded, and polite."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from training_platform.core.gc_pause import collector_paused


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_inside_and_back_on_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the outer pause still holds"
    assert gc.isenabled()


def test_an_exception_still_ends_the_pause() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("batch failed")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_end_with_the_last_one() -> None:
    first_in, second_in, release_first = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            release_first.wait(5)
        seen.append(gc.isenabled())  # the second thread's pause still holds

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            release_first.set()
            worker.join(5)

    worker = threading.Thread(target=first)
    other = threading.Thread(target=second)
    worker.start()
    other.start()
    other.join(10)

    assert second_in.is_set() and seen == [False]
    assert gc.isenabled()
