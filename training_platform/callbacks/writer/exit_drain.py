"""Writers drained at interpreter exit: every `PlatformCallback` with an open writer.

Strong references on purpose: a callback dropped without ``on_train_end``
still gets its queued lines written; it leaves the set when its writer
closes. At exit each one's ``close_at_exit()`` drains it and marks a run still
``running`` as failed (an uncaught exception) or stopped.
"""

from __future__ import annotations

import atexit
import logging
from typing import Protocol

logger = logging.getLogger(__name__)


class _Closable(Protocol):
    job_id: str

    def close_at_exit(self) -> None: ...


live_callbacks: set[_Closable] = set()


@atexit.register
def _close_all_at_exit() -> None:
    for callback in list(live_callbacks):
        try:
            callback.close_at_exit()
        except Exception:  # exiting anyway: one broken writer must not block the rest
            logger.exception("closing %s at exit failed", callback.job_id)
