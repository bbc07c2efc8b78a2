"""Reading a profile: check it, summarise it, recommend (`training-platform profile-report`).

A profile is the folder the profiling kit writes, ``{job_id}_profiles/``
(docs/profiling.md): ``stage_times.json`` and ``step_N/{trace.json,
op_stats.csv}``. `build_report(source)` reads it through a `ProfileSource`
(a local folder here, the platform's artifact reader in the API, so SSH jobs
read the same way) and returns the report as plain JSON-able data:
``problems`` (what is wrong with the files), ``stages``, ``throughput``,
``memory``, ``operators``, ``overhead`` and ``recommendations``.

Imports only the trainer side (`callbacks`) and `errors`; matplotlib is
loaded when a figure is drawn.
"""

from __future__ import annotations

from training_platform.profile_report.report import REPORT_VERSION, build_report
from training_platform.profile_report.source import LocalProfileSource, ProfileSource

__all__ = ["REPORT_VERSION", "LocalProfileSource", "ProfileSource", "build_report"]
