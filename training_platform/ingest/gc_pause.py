"""Pause CPython's cyclic garbage collector while an ingestion batch is built.

Why: a batch decodes tens of thousands of records, each a dict of dicts plus
its row list, and they all live until the batch commits. The collector is
triggered by allocation counts, so building them sets off full collections
that walk every live object -- the batch and the whole server's module graph
-- again and again: about a fifth of ingestion time (benchmarks/bench_ingest.py,
measured with `gc.callbacks`). A batch forms no reference cycles, so
reference counting frees all of it anyway. Mercurial pauses the collector
the same way while it builds large structures.

The pause is process-wide, so it is counted: it lasts while any batch in any
thread is being built and ends with the last one, and it never re-enables a
collector that someone else had disabled. Should batches of many jobs
overlap without a gap for `MAX_PAUSE_S`, a batch ending in the middle runs a
full collection itself: cyclic garbage of the rest of the server (sockets,
tasks) is never left to pile up.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSE_S = 10.0  # the longest the collector stays off without one collection

_lock = threading.Lock()
_depth = 0
_resume = False  # whether the collector was enabled when the first pause began
_since = 0.0  # when the collector last ran (or the pause began), time.monotonic()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (re-entrant, thread-safe)."""
    global _depth, _resume, _since
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            _since = time.monotonic()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        overdue = False
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _resume:
                    gc.enable()
            elif _resume and time.monotonic() - _since >= MAX_PAUSE_S:
                _since = time.monotonic()
                overdue = True
        if overdue:  # outside the lock: finalizers may start batches of their own
            gc.collect()
