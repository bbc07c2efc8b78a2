"""Detectors over system samples: what a person watching the hosts of an RL run acts on.

Each host's samples are fed in time order (`SystemMonitor.check`); a window
of its recent samples answers six questions (docs/live.md, "System"):

- **gpu_idle**: a GPU below `idle_utilization` % in most of the window while
  the run is running (rollout and training alternate: a GPU that waits
  through generation is most of the lost time);
- **gpu_memory_high**: a GPU's memory above `memory_fraction` of its
  capacity in the last few samples (the next allocation fails);
- **gpu_throttling**: thermal or power throttling in most of the window;
- **host_memory_leak**: the host's used memory growing steadily (a straight
  line fits it) toward its total, which it would reach within `leak_horizon`;
- **disk_full**: the output directory's file system at least `disk_percent` full;
- **sampler_silent** (`silent_hosts`): a host whose samples stopped while the
  run still logs steps.

They follow the same incident rule as every detector
(`callbacks/detectors/findings.incident_quiet`): a condition that holds is
one incident, reported when it opens or worsens, over when it has been clear
for a while; counted here in samples of its host.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from training_platform.callbacks.detectors.findings import incident_quiet

SEVERITY_RANK: Final = {"warning": 1, "critical": 2}
# (type, severity, message, evidence) of a condition that holds now.
_Found = tuple[str, str, str, tuple[int, ...]]


@dataclass(frozen=True)
class SystemDetectorConfig:
    window_seconds: float = 300.0  # what "most of the recent samples" looks at
    min_samples: int = 6  # a window with fewer says nothing
    idle_utilization: float = 10.0  # % below which a GPU does nothing useful
    idle_fraction: float = 0.8
    memory_fraction: float = 0.95
    memory_samples: int = 3  # consecutive samples above it
    throttle_fraction: float = 0.8
    leak_window_seconds: float = 1800.0
    leak_min_samples: int = 20
    leak_fit: float = 0.9  # R² of a straight line through used memory
    leak_horizon_seconds: float = 3600.0
    leak_min_percent: float = 70.0
    disk_percent: float = 95.0
    silent_factor: float = 5.0  # intervals without a sample
    silent_min_seconds: float = 60.0
    cooldown: int = 30  # samples of its host clear before an incident ends
    cooldown_max: int = 500


@dataclass(frozen=True)
class SystemFinding:
    type: str
    severity: str
    host: str
    message: str
    timestamp: float
    step: int | None
    evidence: tuple[int, ...] = ()  # GPU indexes, where it is about GPUs


@dataclass
class _Incident:
    opened: int
    last_seen: int
    severity: int
    alerted_step: int | None
    last_step: int | None


@dataclass
class _Host:
    name: str
    samples: deque[tuple[float, int | None, dict[str, float]]] = field(default_factory=deque)
    checks: int = 0
    incidents: dict[str, _Incident] = field(default_factory=dict)


class SystemMonitor:
    """One job's hosts (feed each host's samples in time order)."""

    def __init__(self, config: SystemDetectorConfig | None = None) -> None:
        self.config = config or SystemDetectorConfig()
        self._hosts: dict[str, _Host] = {}

    def check(self, sample: dict[str, Any], *, running: bool) -> list[SystemFinding]:
        """The findings that open or worsen an incident with this sample."""
        config = self.config
        host = sample["host"]
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _Host(host)
        timestamp, step, values = sample["timestamp"], sample["step"], sample["values"]
        if state.samples and timestamp <= state.samples[-1][0]:
            return []  # a sample seen again (a rewritten file): judged once
        state.samples.append((timestamp, step, values))
        horizon = max(config.window_seconds, config.leak_window_seconds)
        while state.samples and state.samples[0][0] < timestamp - horizon:
            state.samples.popleft()
        state.checks += 1
        found = [
            *self._gpu_window(state, running),
            *self._memory(state),
            *self._leak(state),
            *self._disk(state.name, values),
        ]
        findings = []
        for kind, severity, message, evidence in found:
            if self._alert(state, kind, severity, step):
                findings.append(
                    SystemFinding(kind, severity, host, message, timestamp, step, evidence)
                )
        return findings

    def silent_hosts(self, newest_record_time: float) -> list[SystemFinding]:
        """Hosts whose sampler stopped while the run logged a record at `newest_record_time`."""
        config, findings = self.config, []
        for host, state in self._hosts.items():
            if len(state.samples) < 2:
                continue
            times = [t for t, _, _ in state.samples]
            interval = _median([b - a for a, b in itertools.pairwise(times)])
            quiet = newest_record_time - times[-1]
            if quiet <= max(config.silent_factor * interval, config.silent_min_seconds):
                continue
            step = state.samples[-1][1]
            message = (
                f"{host}: no system sample for {quiet:.0f} s (it sampled every {interval:.0f} s) "
                "while the run still logs steps: the sampler or the node may be down"
            )
            if self._alert(state, "sampler_silent", "warning", step):
                findings.append(
                    SystemFinding("sampler_silent", "warning", host, message, times[-1], step)
                )
        return findings

    def extents(self) -> list[tuple[str, int, int]]:
        """(type, step of its latest alert, last step its condition held) per incident."""
        extents = []
        for state in self._hosts.values():
            for kind, incident in state.incidents.items():
                if incident.alerted_step is not None and incident.last_step is not None:
                    extents.append((kind, incident.alerted_step, incident.last_step))
        return extents

    # -- the conditions --------------------------------------------------------

    def _window(self, state: _Host) -> list[dict[str, float]]:
        newest = state.samples[-1][0]
        since = newest - self.config.window_seconds
        return [values for t, _, values in state.samples if t >= since]

    def _gpu_window(self, state: _Host, running: bool) -> list[_Found]:
        config, window = self.config, self._window(state)
        if len(window) < config.min_samples:
            return []
        found: list[_Found] = []
        host = state.name
        idle = [
            gpu
            for gpu in _gpus(window[-1])
            if _share(window, f"gpus.{gpu}.utilization", lambda u: u < config.idle_utilization)
            >= config.idle_fraction
        ]
        if running and idle:
            found.append((
                "gpu_idle",
                "warning",
                f"{host}: GPU {_listed(idle)} below {config.idle_utilization:g}% utilisation "
                f"in most of the last {len(window)} samples while the run is running",
                tuple(idle),
            ))  # fmt: skip
        throttled = [
            gpu
            for gpu in _gpus(window[-1])
            if _share(window, f"gpus.{gpu}.throttle_thermal", bool) >= config.throttle_fraction
            or _share(window, f"gpus.{gpu}.throttle_power", bool) >= config.throttle_fraction
        ]
        if throttled:
            found.append((
                "gpu_throttling",
                "warning",
                f"{host}: GPU {_listed(throttled)} throttled (thermal or power) in most of the "
                f"last {len(window)} samples: clocks are held down",
                tuple(throttled),
            ))  # fmt: skip
        return found

    def _memory(self, state: _Host) -> list[_Found]:
        config = self.config
        recent = [values for _, _, values in list(state.samples)[-config.memory_samples :]]
        if len(recent) < config.memory_samples:
            return []
        full = []
        for gpu in _gpus(recent[-1]):
            shares = [_used_share(values, gpu) for values in recent]
            if all(share is not None and share > config.memory_fraction for share in shares):
                full.append(gpu)
        if not full:
            return []
        share = max(_used_share(recent[-1], gpu) or 0.0 for gpu in full)
        message = (
            f"{state.name}: GPU {_listed(full)} memory at {100 * share:.1f}% of "
            f"capacity (above {100 * config.memory_fraction:g}%): the next allocation may fail"
        )
        return [("gpu_memory_high", "warning", message, tuple(full))]

    def _leak(self, state: _Host) -> list[_Found]:
        config = self.config
        newest = state.samples[-1][0]
        points = [
            (t, values["memory.used_gib"])
            for t, _, values in state.samples
            if t >= newest - config.leak_window_seconds and "memory.used_gib" in values
        ]
        total = state.samples[-1][2].get("memory.total_gib")
        if len(points) < config.leak_min_samples or not total:
            return []
        slope, fit = _line(points)
        used = points[-1][1]
        if slope <= 0 or fit < config.leak_fit or 100 * used / total < config.leak_min_percent:
            return []
        seconds_left = (total - used) / slope
        if seconds_left > config.leak_horizon_seconds:
            return []
        severity = "critical" if seconds_left < config.leak_horizon_seconds / 6 else "warning"
        message = (
            f"{state.name}: host memory grows steadily "
            f"({slope * 60:.2f} GiB/min, {used:.1f} of {total:.1f} GiB used): full in about "
            f"{seconds_left / 60:.0f} min at this rate (a leak, or a cache without a bound)"
        )
        return [("host_memory_leak", severity, message, ())]

    def _disk(self, host: str, values: dict[str, float]) -> list[_Found]:
        used = values.get("disk.used_percent")
        if used is None or used < self.config.disk_percent:
            return []
        severity = "critical" if used >= 99.0 else "warning"
        message = (
            f"{host}: the output directory's disk is {used:.1f}% full: checkpoints and "
            "logs will fail to write"
        )
        return [("disk_full", severity, message, ())]

    # -- incidents -------------------------------------------------------------

    def _alert(self, state: _Host, kind: str, severity: str, step: int | None) -> bool:
        """Whether this occurrence opens or worsens an incident (then it is reported)."""
        rank, now, config = SEVERITY_RANK[severity], state.checks, self.config
        incident = state.incidents.get(kind)
        if incident is not None:
            quiet = incident_quiet(
                incident.opened, incident.last_seen, config.cooldown, config.cooldown_max
            )
            if 0 <= now - incident.last_seen <= quiet:
                incident.last_seen = now
                incident.last_step = step if step is not None else incident.last_step
                if rank <= incident.severity:
                    return False
                incident.severity, incident.alerted_step = rank, step
                return True
        state.incidents[kind] = _Incident(now, now, rank, step, step)
        return True


def _gpus(values: dict[str, float]) -> list[int]:
    found = set()
    for name in values:
        if name.startswith("gpus."):
            index = name.split(".", 2)[1]
            if index.isdigit():
                found.add(int(index))
    return sorted(found)


def _share(window: Sequence[dict[str, float]], name: str, condition: Any) -> float:
    """The fraction of the window's samples (that have `name`) where `condition` holds."""
    values = [values[name] for values in window if name in values]
    if not values:
        return 0.0
    return sum(1 for value in values if condition(value)) / len(values)


def _used_share(values: dict[str, float], gpu: int) -> float | None:
    used = values.get(f"gpus.{gpu}.memory_used_gib")
    total = values.get(f"gpus.{gpu}.memory_total_gib")
    if used is None or not total:
        return None
    return used / total


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope (per second) and R² of `points`."""
    count = len(points)
    mean_t = sum(t for t, _ in points) / count
    mean_v = sum(v for _, v in points) / count
    stt = sum((t - mean_t) ** 2 for t, _ in points)
    svv = sum((v - mean_v) ** 2 for _, v in points)
    stv = sum((t - mean_t) * (v - mean_v) for t, v in points)
    if stt == 0 or svv == 0:
        return 0.0, 0.0
    return stv / stt, stv * stv / (stt * svv)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.inf


def _listed(gpus: Sequence[int]) -> str:
    return ", ".join(str(gpu) for gpu in gpus)
