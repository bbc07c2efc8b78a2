"""Per-step stage times from the job's metrics file next to the profile (for the figure).

``{dir}/{job_id}_metrics.jsonl`` holds each step's ``timing`` group. Read
line by line; at most `MAX_STEPS` steps are kept, evenly thinned past that,
so a long run costs bounded memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_STEPS = 20_000
MAX_LINE = 1 << 20


def metrics_file_of(profile_dir: Path) -> Path | None:
    name = profile_dir.name
    if not name.endswith("_profiles"):
        return None
    path = profile_dir.parent / f"{name.removesuffix('_profiles')}_metrics.jsonl"
    return path if path.is_file() and not path.is_symlink() else None


def read_step_timings(path: Path) -> list[tuple[int, dict[str, float]]]:
    """(step, {top-level stage: seconds}) in file order; a bad line is skipped."""
    steps: list[tuple[int, dict[str, float]]] = []
    stride = 1
    seen = 0
    with path.open("rb") as handle:
        for line in handle:
            if len(line) > MAX_LINE or not line.endswith(b"\n"):
                continue
            try:
                record: Any = json.loads(line)
            except ValueError:
                continue
            timing = record.get("timing") if isinstance(record, dict) else None
            step = record.get("step") if isinstance(record, dict) else None
            if not isinstance(timing, dict) or not isinstance(step, int):
                continue
            seen += 1
            if seen % stride:
                continue
            steps.append(
                (
                    step,
                    {
                        name: float(value)
                        for name, value in timing.items()
                        if "/" not in name and isinstance(value, (int, float))
                    },
                )
            )
            if len(steps) >= MAX_STEPS:
                steps = steps[::2]  # keep every other step; take every other from now on
                stride *= 2
    return steps
