"""One line of `{job_id}_system*.jsonl` into a flat system sample (docs/contract.md).

A line is one sample of one host (`callbacks/system/sample.py` writes it):
``timestamp`` and ``host`` are required, the groups are whatever the host has.
The platform keeps numbers only, flattened to the series names the API
serves: ``cpu.percent``, ``memory.used_gib``, ``gpus.0.utilization``, ...;
a GPU's ``throttle`` reasons become two 0/1 series (``throttle_thermal``,
``throttle_power``, the two a person acts on) and its ``processes`` the
memory this job holds on it (``job_memory_gib``).

Bad input never blocks the job: a line without a host or a usable timestamp
is refused (counted, skipped, as every malformed line); a value out of its
physical range (negative memory, utilisation 1e9) is left out of the sample
and named in ``dropped``, which the store turns into notes (counted).
"""

from __future__ import annotations

import math
import time
from typing import Any, Final

from training_platform.callbacks.wire.lines import parse_json_line
from training_platform.callbacks.wire.system_file import MAX_HOST_FIELD
from training_platform.errors import RecordError

GROUPS: Final = ("cpu", "memory", "disk", "network")
MAX_GPUS: Final = 64  # per host: more is not a GPU list
MAX_GROUP_FIELDS: Final = 32  # numbers per group: a host's groups are small
# A sample's time must be a time this run could have: not before 2000 and
# not more than a day ahead of the server's clock (a node with a broken clock
# would otherwise put its samples years away from the run's).
EARLIEST: Final = 946_684_800.0
AHEAD: Final = 86_400.0
THERMAL: Final = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER: Final = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})

# Largest plausible value per field name (the smallest is 0 for all but
# temperatures); a value outside is left out of the sample.
_BOUNDS: Final[dict[str, tuple[float, float]]] = {
    "percent": (0.0, 100.0),
    "used_percent": (0.0, 100.0),
    "utilization": (0.0, 100.0),
    "temperature_c": (-60.0, 200.0),
    "power_w": (0.0, 20_000.0),
    "power_limit_w": (0.0, 20_000.0),
}
_CPU_PERCENT_PER_CORE: Final = 100.0  # cpu.percent counts 100 per busy logical CPU
_ANY: Final = (0.0, 1e15)  # GiB, MiB/s, counts, load: non-negative and finite


def decode_system_line(line: bytes) -> dict[str, Any]:
    """``{"timestamp", "host", "step", "values": {series: float}, "dropped": [...]}``;
    raises `RecordError` for a line that is not one host's sample."""
    return system_sample(parse_json_line(line))


def system_sample(data: Any) -> dict[str, Any]:
    """One host's sample, parsed (a line's JSON, or another tool's samples put in
    its shape: `ingest/formats/trackio_system.py`), as `decode_system_line` gives it."""
    if not isinstance(data, dict):
        raise RecordError("a system sample must be a JSON object")
    host = data.get("host")
    if not isinstance(host, str) or not host.strip():
        raise RecordError("a system sample needs its host (a non-empty string)")
    timestamp = data.get("timestamp")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise RecordError("a system sample needs its timestamp (Unix seconds)")
    timestamp = float(timestamp)
    if not math.isfinite(timestamp) or not EARLIEST <= timestamp <= time.time() + AHEAD:
        raise RecordError(f"timestamp {timestamp!r} is not a time this run could have")
    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63:
        step = None  # unknown before the first step; anything else is not a step
    values: dict[str, float] = {}
    dropped: list[str] = []
    cpu = data.get("cpu")
    cpu_count = _number(cpu.get("count")) if isinstance(cpu, dict) else None
    for group in GROUPS:
        fields = data.get(group)
        if isinstance(fields, dict):
            for name, value in list(fields.items())[:MAX_GROUP_FIELDS]:
                bounds = _bounds(group, name, cpu_count)
                _keep(values, dropped, f"{group}.{name}", value, bounds)
    gpus = data.get("gpus")
    if isinstance(gpus, list):
        _gpus(values, dropped, gpus[:MAX_GPUS])
    return {
        "timestamp": timestamp,
        "host": host.strip()[:MAX_HOST_FIELD],
        "step": step,
        "values": values,
        "dropped": dropped,
    }


def _gpus(values: dict[str, float], dropped: list[str], gpus: list[Any]) -> None:
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            continue
        index = gpu.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_GPUS:
            index = position
        prefix = f"gpus.{index}."
        for name, value in list(gpu.items())[:MAX_GROUP_FIELDS]:
            if name in {"index", "name", "throttle", "processes"}:
                continue
            _keep(values, dropped, prefix + name, value, _BOUNDS.get(name, _ANY))
        reasons = gpu.get("throttle")
        if isinstance(reasons, list):
            named = {reason for reason in reasons if isinstance(reason, str)}
            values[prefix + "throttle_thermal"] = 1.0 if named & THERMAL else 0.0
            values[prefix + "throttle_power"] = 1.0 if named & POWER else 0.0
        processes = gpu.get("processes")
        if isinstance(processes, list):
            held = [_number(p.get("memory_used_gib")) for p in processes if isinstance(p, dict)]
            known = [gib for gib in held if gib is not None and gib >= 0]
            if known:
                values[prefix + "job_memory_gib"] = sum(known)


def _bounds(group: str, name: str, cpu_count: float | None) -> tuple[float, float]:
    if group == "cpu" and name == "percent":
        cores = cpu_count if cpu_count is not None and 1 <= cpu_count <= 65_536 else 65_536
        return (0.0, _CPU_PERCENT_PER_CORE * cores)
    return _BOUNDS.get(name, _ANY)


def _keep(
    values: dict[str, float],
    dropped: list[str],
    series: str,
    value: Any,
    bounds: tuple[float, float],
) -> None:
    # The hot path of ingesting a sample (~100 numbers a line): exact types
    # first; NaN and infinities fail the range test, and a huge integer is
    # compared exactly before it could overflow a float.
    kind = type(value)  # exactly: a bool is not a reading (JSON gives no other subclass)
    if kind is float or kind is int:
        if bounds[0] <= value <= bounds[1]:
            values[series] = float(value)
        else:
            dropped.append(series)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a double's range
        return None
    return number if math.isfinite(number) else None


def system_message_data(sample: dict[str, Any]) -> dict[str, Any]:
    """What the live socket says of a stored sample: its time, host, step and values."""
    return {name: sample[name] for name in ("timestamp", "host", "step", "values")}
