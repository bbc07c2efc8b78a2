"""The collector pause around ingestion batches: nested, threaded, and polite."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from training_platform.ingest import gc_pause
from training_platform.ingest.gc_pause import collector_paused


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


class _Node:
    pass


def _cycle_ending_in_a_nested_pause() -> weakref.ref[_Node]:
    """Make cyclic garbage inside a batch that ends while the outer one goes on."""
    with collector_paused():
        cycle = _Node()
        cycle.self = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        del cycle
    return alive


def test_pauses_overlapping_for_too_long_still_collect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gc_pause, "MAX_PAUSE_S", 0.0)
    with collector_paused():
        alive = _cycle_ending_in_a_nested_pause()
        assert alive() is None, "an overdue pause runs a collection"
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_short_overlap_does_not_collect() -> None:
    with collector_paused():
        alive = _cycle_ending_in_a_nested_pause()
        assert alive() is not None
    gc.collect()
    assert alive() is None
