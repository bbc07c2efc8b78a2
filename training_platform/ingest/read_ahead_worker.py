"""The read-ahead worker (`read_ahead.py`): runs one pickled read at a time.

Each request on standard input is ``(module, function, args)``, a function of
this package; each answer, on what was standard output, is ``("ok", value)`` or
``("error", "what went wrong")``. Standard output itself goes to standard error
from the start, so nothing a library prints can break an answer. The worker
returns when its input ends or its answers are no longer read (the server
stopped it, or died).
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
from typing import Any

PACKAGE = "training_platform."


def serve(requests: Any, answers: Any) -> None:
    while True:
        try:
            module, name, args = pickle.load(requests)
        except EOFError:
            return
        try:
            if not module.startswith(PACKAGE):
                raise ValueError(f"{module}: only this package's functions are run")
            answer: tuple[str, Any] = ("ok", getattr(importlib.import_module(module), name)(*args))
        except Exception as exc:  # the read's own error: the caller reads inline and says it
            answer = ("error", f"{type(exc).__name__}: {exc}")
        try:
            pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
            answers.flush()
        except BrokenPipeError:  # the server stopped listening: it stopped this worker
            # At once: an orderly exit would flush the rest of the answer into the
            # closed pipe and print that error too. Nothing here needs cleaning up.
            os._exit(0)


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
