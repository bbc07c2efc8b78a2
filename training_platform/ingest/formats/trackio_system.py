"""A Trackio run's system metrics (`trackio.log_system`, `log_gpu`, `log_cpu`, or
`auto_log_gpu`) as the job's system samples, beside its metrics (`trackio_db.py`).

Trackio keeps them in its project database's `system_metrics` table: a row per
call, with an autoincrement `id`, the run, an ISO timestamp and the logged dict
as JSON, keyed by time, not by step. Read like the metrics rows (the cursor is
the last `id`, the run's Trackio id the fingerprint) and stored as a host's
samples, so they are charted, rolled up and compared like our sampler's.

Trackio's flat keys are put into the sample's groups under the names our
sampler uses (docs/contract.md, "System samples"), then checked by the same
rules as a sample line (`ingest/system_lines.py`: a value out of its physical
range is left out and named):

- ``gpu/{i}/utilization`` -> ``gpus.{i}.utilization``; ``allocated_memory``,
  ``total_memory`` (GiB), ``temp``, ``power``, ``power_limit`` -> ``memory_used_gib``,
  ``memory_total_gib``, ``temperature_c``, ``power_w``, ``power_limit_w``; the
  GPU's other readings (clocks, ``throttle_thermal``, ...) under their own name;
  Trackio's aggregates over GPUs (``gpu/mean_utilization``, ...) are left out:
  the chart aggregates the GPUs itself;
- ``cpu/utilization`` is a mean over cores: ``cpu.percent`` counts 100 per busy
  core, so it is multiplied by ``cpu/count_logical`` (``cpu.count``); per-core
  readings are left out;
- ``memory/*`` (GiB): ``used_gib`` is total minus available, as ours;
- ``disk/`` and ``network/`` ``*_mb_per_sec`` (MiB/s in Trackio) ->
  ``*_mib_s``; cumulative byte counters, temperatures of sensors and the battery
  are left out.

Trackio records no host name: the samples are the host ``trackio``.
"""

from __future__ import annotations

import json
import sqlite3
from functools import partial
from pathlib import Path
from typing import Any, Final

from training_platform.errors import MetricsSourceError, RecordError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.trackio_db import open_database, run_id_of, seconds
from training_platform.ingest.line_scanner import MAX_ERRORS, ReadBatch, ReadPosition
from training_platform.ingest.system_file import FAMILY, store_system, system_sample_key
from training_platform.ingest.system_lines import decode_system_line, system_sample

HOST: Final = "trackio"
ROW_BYTES: Final = 1024  # a system row holds tens of readings
KIND_NAME: Final = f"{FAMILY}.trackio"
GPU_NAMES: Final = {
    "allocated_memory": "memory_used_gib",
    "total_memory": "memory_total_gib",
    "temp": "temperature_c",
    "power": "power_w",
    "power_limit": "power_limit_w",
}
RATES: Final = {
    "read_mb_per_sec": "read_mib_s",
    "write_mb_per_sec": "write_mib_s",
    "sent_mb_per_sec": "sent_mib_s",
    "recv_mb_per_sec": "recv_mib_s",
}
KEPT: Final = {
    "cpu": ("frequency",),
    "disk": ("read_iops", "write_iops"),
}


def read_system(position: ReadPosition, max_bytes: int, *, path: Path, run: str) -> ReadBatch:
    """The system rows of Trackio run `run` after `position`, as samples."""
    empty = ReadBatch(records=[], position=position, file_size=position.offset)
    if not path.is_file():
        return empty  # the metrics kind says the database is missing
    try:
        with open_database(path) as connection:
            run_id = run_id_of(connection, run)
            if run_id is None:
                return empty
            after, reset = position.offset, False
            if position.fingerprint is not None and position.fingerprint != run_id:
                after, reset = 0, True  # another run of that name: from its start
            limit = max(1, max_bytes // ROW_BYTES)
            rows = connection.execute(
                "SELECT id, timestamp, metrics FROM system_metrics"
                " WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
                (run_id, after, limit),
            ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return empty  # a Trackio that keeps no system metrics
        raise MetricsSourceError(f"cannot read Trackio database {path}: {exc}") from None
    except sqlite3.Error as exc:
        raise MetricsSourceError(f"cannot read Trackio database {path}: {exc}") from None
    samples: list[dict[str, Any]] = []
    errors: list[str] = []
    for row_id, stamp, payload in rows:
        try:
            samples.append(system_sample(trackio_sample(stamp, json.loads(payload))))
        except (RecordError, TypeError, ValueError) as exc:
            errors.append(f"system row {row_id}: {exc}"[:200])
    last = rows[-1][0] if rows else after
    return ReadBatch(
        records=samples,
        position=ReadPosition(last, run_id),
        malformed=len(errors),
        reset=reset,
        at_eof=len(rows) < limit,
        file_size=last,
        errors=errors[:MAX_ERRORS],
    )


def trackio_sample(stamp: Any, logged: Any) -> dict[str, Any]:
    """One `system_metrics` row in the shape of a sample line (`system_lines.py`)."""
    if not isinstance(logged, dict):
        raise ValueError("system metrics must be a JSON object")
    sample: dict[str, Any] = {"timestamp": seconds(stamp), "host": HOST}
    gpus: dict[int, dict[str, Any]] = {}
    for key, value in logged.items():
        group, _, rest = str(key).partition("/")
        name, _, deeper = rest.partition("/")
        if group == "gpu" and name.isdigit() and deeper and "/" not in deeper:
            gpus.setdefault(int(name), {"index": int(name)})[GPU_NAMES.get(deeper, deeper)] = value
        elif not deeper and name in RATES and group in ("disk", "network"):
            sample.setdefault(group, {})[RATES[name]] = value
        elif not deeper and name in KEPT.get(group, ()):
            sample.setdefault(group, {})[name] = value
    _cpu(sample, logged)
    _memory(sample, logged)
    if gpus:
        sample["gpus"] = [gpus[index] for index in sorted(gpus)]
    return sample


def _cpu(sample: dict[str, Any], logged: dict[str, Any]) -> None:
    count, mean = _number(logged.get("cpu/count_logical")), _number(logged.get("cpu/utilization"))
    cpu = sample.setdefault("cpu", {})
    if count is not None:
        cpu["count"] = count
        if mean is not None:
            cpu["percent"] = round(mean * count, 1)
    if not cpu:
        del sample["cpu"]


def _memory(sample: dict[str, Any], logged: dict[str, Any]) -> None:
    total, available = _number(logged.get("memory/total")), _number(logged.get("memory/available"))
    used, percent = _number(logged.get("memory/used")), _number(logged.get("memory/percent"))
    memory: dict[str, Any] = {}
    if total is not None:
        memory["total_gib"] = total
        if available is not None:
            memory["used_gib"] = round(total - available, 3)
    if "used_gib" not in memory and used is not None:
        memory["used_gib"] = used
    if percent is not None:
        memory["percent"] = percent
    if memory:
        sample["memory"] = memory


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def trackio_system_kind(directory: str, database: str, run: str) -> LineFileKind:
    """The system samples of Trackio run `run` in the project database `database`."""
    return LineFileKind(
        name=KIND_NAME,
        suffix="",
        decode=decode_system_line,  # never called: `query` reads the rows
        store=store_system,
        key=system_sample_key,
        required=False,  # a run may log no system metrics
        file=database,
        query=partial(read_system, path=Path(directory) / database, run=run),
    )
