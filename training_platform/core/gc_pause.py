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
collector that someone else had disabled.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_resume = False  # whether the collector was enabled when the first pause began


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (re-entrant, thread-safe)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
