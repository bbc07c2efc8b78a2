"""Expensive fixtures made once per test run, whichever xdist worker comes first."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def run_shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder all of this run's xdist workers share (each worker's base is a
    `popen-gwN` folder inside the run's own), or the base itself without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Any) -> dict[str, Any]:
    """`make(folder)` run once per test run, whichever worker comes first; the others
    wait for it and read what it returned (a JSON object). For what takes seconds to
    make: a `scope="module"` fixture is still made once per worker that runs it."""
    shared = run_shared(tmp_path_factory)
    folder = shared / name
    done = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            folder.mkdir()
            try:
                done.write_text(json.dumps(make(folder)))
            except BaseException as exc:  # the workers that wait fail with it too
                done.write_text(json.dumps({"failed": f"{type(exc).__name__}: {exc}"}))
                raise
    answer: dict[str, Any] = json.loads(done.read_text())
    if "failed" in answer:
        pytest.fail(f"{name} failed (in another worker): {answer['failed']}")
    return answer
