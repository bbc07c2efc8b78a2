"""A catch-up's next batch read in a worker process while this one stores the last.

A backlog (a finished run imported, a server catching up on a long one) is read
and stored batch by batch. Reading another tool's database turns every row into
Python objects under the GIL, so a thread would not overlap it with storing; a
worker process does, on the second core (docs/benchmarks.md, MLflow runs).

The worker is `python -m training_platform.ingest.read_ahead_worker`, spoken to
over its standard input and a copy of its standard output, one pickled request
and answer at a time. Not `multiprocessing`: its `spawn` re-imports the parent's
main script in the worker, which runs a caller's unguarded script twice (and
`fork` is unsafe beside the server's threads). One worker per server process,
started at the first read ahead and stopped as soon as no source is behind, so
a server that only follows live runs holds none.

A batch read ahead is used only by the call that asks for exactly that batch;
anything else -- another request, a read that failed, a worker that died or
hangs -- is dropped, and the caller reads inline as it would have anyway (and
reports any error itself).
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import IO, Any, Final

import training_platform

logger = logging.getLogger(__name__)

WAIT_SECONDS: Final = 120.0  # a batch is read in well under a second; past this, inline
WORKER_MODULE: Final = "training_platform.ingest.read_ahead_worker"


class ReadAhead:
    """Reads ahead one batch at a time: `start` the next batch of a source, `take` it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._worker: subprocess.Popen[bytes] | None = None
        # (source, request) of the read under way, and whether its answer is being taken.
        self._pending: tuple[Hashable, Hashable] | None = None
        self._taking = False

    def start(
        self, source: Hashable, request: Hashable, read: Callable[..., Any], *args: Any
    ) -> None:
        """Have the worker run `read(*args)`: the batch `request` of `source`, asked
        for next. `read` is a module's function, `args` plain values. While another
        source's read is under way, nothing is started (that batch is read inline);
        one of `source` itself is dropped first."""
        self._drop_read_of(source)
        with self._guard:
            if self._pending is not None or self._taking:
                return
            try:
                worker = self._worker if self._worker is not None else _start_worker()
                self._worker = worker
                assert worker.stdin is not None
                pickle.dump((read.__module__, read.__qualname__, args), worker.stdin)
                worker.stdin.flush()
            except (OSError, pickle.PicklingError) as exc:  # no process here, or it died
                logger.info("reading ahead is off for now: %s", exc)
                self._stop_worker()
                return
            self._pending = (source, request)

    def take(self, source: Hashable, request: Hashable) -> Any | None:
        """What was read ahead for `source`, if it was `request`; None: read it inline."""
        with self._guard:
            if self._pending is None or self._pending[0] != source:
                return None
            asked = self._pending[1]
            self._pending, self._taking = None, True
            worker = self._worker
        answer: Any = _GONE
        try:
            answer = _answer(worker)  # taken even when not wanted: the next one is in order
        finally:
            with self._guard:
                self._taking = False
                if answer is _GONE:
                    self._stop_worker()
        return answer if asked == request and answer is not _GONE else None

    def caught_up(self, source: Hashable) -> None:
        """`source` was read to its end: its read under way is dropped, and once no
        source has one, the worker goes."""
        self._drop_read_of(source)
        with self._guard:
            if self._pending is None and not self._taking:
                self._stop_worker()

    def _drop_read_of(self, source: Hashable) -> None:
        """A read under way for `source`, answered and dropped (the worker answers in order)."""
        with self._guard:
            pending = self._pending is not None and self._pending[0] == source
        if pending:
            self.take(source, None)

    def stop(self) -> None:
        """Stop the worker; a read under way is dropped."""
        with self._guard:
            self._pending = None
            self._stop_worker()

    def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            # Its answers' end first: a worker writing an answer nobody will read
            # stops on the broken pipe rather than wait; then the end of its input.
            assert worker.stdout is not None and worker.stdin is not None
            worker.stdout.close()
            worker.stdin.close()
            worker.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            worker.kill()
            worker.wait()


_GONE: Final = object()  # the worker died, hangs or answered garbage


def _start_worker() -> subprocess.Popen[bytes]:
    # The package's own directory first on the path: a checkout run without
    # installing (benchmarks/, tests) imports the same code in the worker.
    package_root = str(Path(training_platform.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", WORKER_MODULE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path},
        start_new_session=True,  # a Ctrl-C is the server's to handle; the worker ends with it
    )


def _answer(worker: subprocess.Popen[bytes] | None) -> Any:
    """The worker's answer to the request under way: its value, None when the read
    failed (inline reads again and says why), `_GONE` when the worker is unusable."""
    if worker is None or worker.stdout is None:
        return _GONE
    stream: IO[bytes] = worker.stdout
    try:
        ready, _, _ = select.select([stream], [], [], WAIT_SECONDS)
        if not ready:
            logger.info("the read-ahead worker took over %.0f s; reading inline", WAIT_SECONDS)
            return _GONE
        status, value = pickle.load(stream)
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as exc:
        logger.info("the read-ahead worker is gone (%r); reading inline", exc)
        return _GONE
    if status != "ok":
        logger.debug("a read ahead failed: %s", value)
        return None
    return value
