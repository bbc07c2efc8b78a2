"""`check_profile(directory)`: is a profile complete and well-formed? (the documents' ``verify_m2``)

Well-formed is exactly ``training-platform profile-report --check``: the same
`build_report` and its ``problems``. Complete adds what a profile of a
training run must hold for the report to say anything: at least one step in
``stage_times.json``, and at least one torch.profiler trace (``step_N/`` with
``trace.json`` and ``op_stats.csv``) unless the caller allows none (a run
profiled with the trace off).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ProfileCheck:
    directory: Path
    problems: list[str] = field(default_factory=list)
    """One line each, naming its file, as `profile-report --check` prints them."""
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def find_profile_dir(path: Path, job_id: str | None = None) -> Path:
    """`path` itself, ``path/{job_id}_profiles`` with `job_id`, or the one ``*_profiles``
    folder in `path` (a metrics folder of one run): how `profile-report` reads its PATH.
    `InvalidJobIdError` for a job id that is not one."""
    from training_platform.profile_report.source import resolve_profile_dir

    directory = resolve_profile_dir(path, job_id)
    if directory.is_dir() and not (directory / "stage_times.json").exists():
        found = [p for p in directory.glob("*_profiles") if p.is_dir() and not p.is_symlink()]
        if len(found) == 1:
            return found[0]
    return directory


def check_profile(directory: Path, *, require_trace: bool = True) -> ProfileCheck:
    from training_platform.profile_report.report import build_report
    from training_platform.profile_report.source import LocalProfileSource

    result = ProfileCheck(directory)
    if not directory.is_dir():
        result.problems.append(f"{directory}: not a folder (give a {{job_id}}_profiles folder)")
        return result
    report = build_report(LocalProfileSource(directory))
    result.problems = [
        f"{item['path'] or directory}: {item['problem']}" for item in report["problems"]
    ]
    steps = _steps(report)
    if report["summary_version"] is not None and not steps:
        result.problems.append(f"{directory}/stage_times.json: no step recorded (steps is 0)")
    traces = [t for t in report["traces"] if t["trace"] is not None and t["op_table"] is not None]
    if require_trace and not report["traces"]:
        result.problems.append(
            f"{directory}: no torch.profiler trace (no step_N/ folder): the trace window "
            "never ran (fewer steps than wait + warm-up + active?)"
        )
    stages = [
        row["stage"] for row in (report["breakdown"] or {}).get("stages", []) if not row["depth"]
    ]
    result.summary = (
        f"{steps} steps, stages: {', '.join(stages) or 'none named'}; "
        f"traces: {', '.join(t['name'] for t in traces) or 'none'}"
    )
    return result


def _steps(report: dict[str, Any]) -> int:
    breakdown = report.get("breakdown") or {}
    steps = breakdown.get("steps")
    return steps if isinstance(steps, int) else 0
