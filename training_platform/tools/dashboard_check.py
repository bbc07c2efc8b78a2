"""`check_dashboard(log)`: does a training log have what the dashboard draws, and is it served?

The documents' ``verify_m3`` / ``check_dashboard_metrics.py``. The series are
those of the run view's default charts (web/static/js/chart_specs.js, `CHARTS`;
tests/tools/test_verify_dashboard.py keeps the two lists in step): a chart is
fed when at least one of its series has a number. Two checks, each naming
what it misses:

1. the log: each needed chart has a series with a number in some record;
2. the server: ``training-platform serve`` (a child process on a free
   loopback port, a temporary SQLite database, the file copied into a
   temporary metrics folder) ingests it on ``POST .../metrics/sync``, and
   ``GET /api/monitoring/{job_id}/metrics?max_points=...`` (the request the
   run view makes) answers each of those series with a number.

GPU memory and the reward's min-max band are drawn when present but a CPU
run has no GPU memory, so they are reported, not required.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training_platform.tools.determinism import flatten, read_steps

# The Entropy chart shows the first of these a run has (trainers name it differently).
ENTROPY = tuple(
    f"extra.{key}"
    for key in ("actor/entropy", "entropy", "policy/entropy_avg", "objective/entropy",
                "policy/entropy")
)  # fmt: skip
# Chart title -> the series that feed it; a key ending in "." stands for every
# series under it (the stacked per-stage timing chart).
NEEDED_CHARTS: dict[str, tuple[str, ...]] = {
    "Losses": ("loss.actor_loss", "loss.critic_loss", "loss.total_loss"),
    "Reward": ("reward.mean",),
    "KL divergence": ("kl.mean", "kl.max"),
    "Gradient norms": ("gradient.actor_norm", "gradient.critic_norm"),
    "Entropy": ENTROPY,
    "Throughput (tokens/s)": ("performance.tokens_per_second",),
    "Step time (s)": ("performance.step_time",),
    "Per-stage time": ("timing.",),
}
OPTIONAL_CHARTS: dict[str, tuple[str, ...]] = {
    "GPU memory allocated": ("performance.gpu_memory_allocated",),
    "Reward min-max band": ("reward.min", "reward.max"),
}
MAX_POINTS = 2000
_METRICS_SUFFIX = "_metrics.jsonl"
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_BANNER = re.compile(r"training_platform: (http://\S+?)/?\s")


@dataclass
class DashboardCheck:
    job_id: str
    records: int = 0
    missing_in_log: list[str] = field(default_factory=list)
    """Needed charts no series of the log feeds."""
    missing_served: list[str] = field(default_factory=list)
    """Needed charts the log feeds but the API did not answer (with the series)."""
    optional_absent: list[str] = field(default_factory=list)
    served: dict[str, list[str]] = field(default_factory=dict)
    """Chart -> the series the API answered for it."""
    error: str | None = None
    """Why the server check could not be made (the log cannot be ingested, ...)."""

    @property
    def ok(self) -> bool:
        return self.records > 0 and not (self.missing_in_log or self.missing_served or self.error)

    def verdict(self) -> str:
        if self.records == 0:
            return "the log has no records"
        if self.missing_in_log:
            return "the log lacks the series of: " + "; ".join(self.missing_in_log)
        if self.error:
            return self.error
        if self.missing_served:
            return "the server does not serve: " + "; ".join(self.missing_served)
        return (
            f"{len(self.served)} dashboard charts fed by the log and served ({self.records} steps)"
        )


def chart_feeds(keys: set[str], charts: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Chart -> the keys among `keys` that feed it (charts no key feeds are left out)."""
    fed = {}
    for title, wanted in charts.items():
        found = sorted(
            key
            for key in keys
            if any(key.startswith(w) if w.endswith(".") else key == w for w in wanted)
        )
        if found:
            fed[title] = found
    return fed


def _describe(title: str, charts: dict[str, tuple[str, ...]]) -> str:
    wanted = ", ".join(w + "*" if w.endswith(".") else w for w in charts[title])
    return f"{title} ({wanted})"


def numeric_keys(records: dict[int, dict[str, Any]]) -> set[str]:
    """Series with a number in at least one record (booleans are not numbers)."""
    keys = set()
    for record in records.values():
        for key, value in flatten(record):
            if isinstance(value, int | float) and not isinstance(value, bool):
                keys.add(key)
    return keys


def job_id_of(log: Path, job_id: str | None) -> str:
    if job_id is not None:
        return job_id
    name = log.name
    if name.endswith(_METRICS_SUFFIX) and _JOB_ID.match(name[: -len(_METRICS_SUFFIX)]):
        return name[: -len(_METRICS_SUFFIX)]
    return "dashboard-check"


def check_dashboard(log: Path, job_id: str | None = None) -> DashboardCheck:
    """Both checks on `log` (a metrics JSONL); `LogError` when it cannot be read."""
    records = read_steps(log)
    result = DashboardCheck(job_id_of(log, job_id), records=len(records))
    if not records:
        return result
    in_log = chart_feeds(numeric_keys(records), NEEDED_CHARTS)
    result.missing_in_log = [_describe(t, NEEDED_CHARTS) for t in NEEDED_CHARTS if t not in in_log]
    optional = chart_feeds(numeric_keys(records), OPTIONAL_CHARTS)
    result.optional_absent = [t for t in OPTIONAL_CHARTS if t not in optional]
    if result.missing_in_log:
        return result
    try:
        series = served_series(log, result.job_id)
    except ServeError as exc:
        result.error = str(exc)
        return result
    result.served = chart_feeds(series, NEEDED_CHARTS)
    for title, keys in in_log.items():
        lacking = sorted(set(keys) - series)
        if lacking:
            result.missing_served.append(f"{title} ({', '.join(lacking)})")
    return result


class ServeError(RuntimeError):
    """The platform could not be started, or could not ingest or serve the log."""


def served_series(log: Path, job_id: str, timeout: float = 120.0) -> set[str]:
    """The series the metrics API answers with a number for `log`: a copy of it in a
    temporary metrics folder, served by ``training-platform serve`` (a child process on a
    free loopback port, a temporary SQLite database), synced and read over HTTP."""
    with tempfile.TemporaryDirectory(prefix="verify-dashboard-") as scratch:
        metrics = Path(scratch) / "metrics"
        metrics.mkdir()
        # A copy, not a link: the platform refuses symlinked job files.
        shutil.copyfile(log, metrics / f"{job_id}{_METRICS_SUFFIX}")
        command = [
            sys.executable, "-m", "training_platform", "serve", "--host", "127.0.0.1",
            "--port", "0", "--metrics-dir", str(metrics), "--log-level", "warning",
            "--database-url", f"sqlite:///{Path(scratch) / 'platform.db'}",
        ]  # fmt: skip
        # The server's defaults, not this shell's: a token or a database set for
        # another server must not leak into the check's own.
        environment = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith("PLATFORM_") and name != "DATABASE_URL"
        }
        # Its log to a file: a pipe nobody reads while the check runs could fill and block it.
        errors = Path(scratch) / "server.log"
        with (
            errors.open("w") as log_file,
            subprocess.Popen(
                command, env=environment, stdout=subprocess.PIPE, stderr=log_file, text=True
            ) as server,
        ):
            try:
                url = _announced_url(server, timeout, errors)
                body = _sync_and_read(url, job_id, timeout)
            finally:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
    return {
        key
        for key, column in (body.get("series") or {}).items()
        if any(_is_number(v) for part in column.values() if isinstance(part, list) for v in part)
    }


def _announced_url(server: subprocess.Popen[str], timeout: float, errors: Path) -> str:
    """The URL the server's banner names once it answers (stdout), read on a thread so
    a server that never announces cannot hang the check."""
    found: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            match = _BANNER.search(line)
            if match:
                found.put(match.group(1))
                return
        found.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        url = found.get(timeout=timeout)
    except queue.Empty:
        url = None
    if url is None:
        server.terminate()
        server.wait(timeout=30)
        lines = errors.read_text(errors="replace").strip().splitlines()
        raise ServeError(f"the server did not start: {(lines or ['no output'])[-1]}")
    return url


def _sync_and_read(url: str, job_id: str, timeout: float) -> dict[str, Any]:
    base = f"{url}/api/monitoring/{urllib.parse.quote(job_id)}/metrics"
    for _ in range(1000):  # each sync ingests a bounded slice of a big log
        synced = _request(f"{base}/sync", "POST", timeout)
        if synced.get("at_eof"):
            break
    return _request(f"{base}?max_points={MAX_POINTS}", "GET", timeout)


def _request(url: str, method: str, timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body: dict[str, Any] = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise ServeError(f"{method} {url} answered {exc.code}: {exc.read()[:200]!r}") from None
    except (OSError, ValueError) as exc:
        raise ServeError(f"{method} {url} failed: {exc}") from None
    return body


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
