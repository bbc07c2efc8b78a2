"""How many `log_samples` calls may wait for the writer: samples never make training wait.

Metrics are never dropped: when the writer falls behind, the training thread
waits for it (`record_writer.py`). Samples are another matter: a call holds a
step's prompts and completions (256 x 2 KB is half a megabyte), so a writer
stuck on a hung file system would let a queue of them grow by gigabytes. At
most `max_pending` calls wait; past that a call's samples are dropped, with a
warning once per backlog and a count, and training goes on.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

logger = logging.getLogger(__name__)

DEFAULT_MAX_PENDING: Final = 8


class SampleBacklog:
    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending_sample_calls must be >= 1, got {max_pending}")
        self.max_pending = max_pending
        self.dropped_calls = 0
        self._slots = threading.BoundedSemaphore(max_pending)
        self._warned = False

    def reserve(self, step: int) -> bool:
        """A slot for one call's samples (training thread); False: drop them."""
        if self._slots.acquire(blocking=False):
            self._warned = False  # the writer caught up: a new backlog warns again
            return True
        self.dropped_calls += 1
        if not self._warned:
            self._warned = True
            logger.warning(
                "step %d: samples dropped: %d calls are still waiting for the writer "
                "(a slow or stuck file system?); training goes on, samples resume once "
                "it catches up",
                step,
                self.max_pending,
            )
        return False

    def release(self) -> None:
        """The writer is done with one call's samples (writer thread)."""
        self._slots.release()
