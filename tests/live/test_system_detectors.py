"""The system detectors fire on what a person acts on, once an incident, silent otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from training_platform.live.system_detectors import SystemFinding, SystemMonitor

T0 = 1_790_000_000.0


def sample(
    i: int,
    *,
    host: str = "node-a",
    interval: float = 10.0,
    utilization: tuple[float, ...] = (95.0, 95.0),
    gpu_memory: float = 70.0,
    memory_used: float = 20.0,
    disk: float = 40.0,
    thermal: float = 0.0,
) -> dict[str, Any]:
    values: dict[str, float] = {
        "cpu.percent": 300.0,
        "memory.used_gib": memory_used,
        "memory.total_gib": 64.0,
        "disk.used_percent": disk,
    }
    for gpu, busy in enumerate(utilization):
        values[f"gpus.{gpu}.utilization"] = busy
        values[f"gpus.{gpu}.memory_used_gib"] = gpu_memory
        values[f"gpus.{gpu}.memory_total_gib"] = 80.0
        values[f"gpus.{gpu}.throttle_thermal"] = thermal
        values[f"gpus.{gpu}.throttle_power"] = 0.0
    return {"timestamp": T0 + interval * i, "host": host, "step": i, "values": values}


def run(
    monitor: SystemMonitor, count: int, running: bool = True, **options: Any
) -> list[SystemFinding]:
    found = []
    for i in range(count):
        found += monitor.check(sample(i, **options), running=running)
    return found


def test_a_healthy_busy_host_raises_nothing_over_a_long_run() -> None:
    monitor = SystemMonitor()
    assert run(monitor, 2_000) == []
    assert monitor.silent_hosts(T0 + 10 * 1_999 + 5) == []


def test_an_idle_gpu_while_running_is_one_incident_naming_the_gpu() -> None:
    monitor = SystemMonitor()
    found = run(monitor, 300, utilization=(95.0, 2.0))
    (finding,) = found
    assert (finding.type, finding.severity, finding.evidence) == ("gpu_idle", "warning", (1,))
    assert "GPU 1" in finding.message and "node-a" in finding.message
    assert finding.step is not None and finding.step < 10  # caught within the first window
    # The same GPUs idle once the run is over (sysmon keeps sampling): not a fault.
    assert run(SystemMonitor(), 300, running=False, utilization=(95.0, 2.0)) == []


def test_an_rl_step_that_alternates_generation_and_training_is_not_idle() -> None:
    monitor = SystemMonitor()
    found = []
    for i in range(300):  # busy half of the time: rollout, then update
        busy = 95.0 if (i // 3) % 2 else 5.0
        found += monitor.check(sample(i, utilization=(busy, busy)), running=True)
    assert found == []


def test_gpu_memory_near_capacity_and_sustained_throttling() -> None:
    memory = run(SystemMonitor(), 50, gpu_memory=78.5)
    assert [(f.type, f.evidence) for f in memory] == [("gpu_memory_high", (0, 1))]
    assert "98.1%" in memory[0].message
    # A brief peak (one sample) is not sustained.
    monitor = SystemMonitor()
    found = run(monitor, 20) + monitor.check(sample(20, gpu_memory=79.0), running=True)
    found += run_from(monitor, 21, 40)
    assert found == []
    throttled = run(SystemMonitor(), 50, thermal=1.0)
    assert [f.type for f in throttled] == ["gpu_throttling"]


def run_from(monitor: SystemMonitor, start: int, end: int) -> list[SystemFinding]:
    found = []
    for i in range(start, end):
        found += monitor.check(sample(i), running=True)
    return found


def test_host_memory_growing_steadily_toward_its_limit_is_a_leak() -> None:
    monitor = SystemMonitor()
    found = []
    for i in range(440):  # +0.05 GiB every 10 s from 40 GiB: 64 GiB full after 480 samples
        found += monitor.check(sample(i, memory_used=40.0 + 0.05 * i), running=True)
    kinds = [(f.type, f.severity) for f in found]
    assert kinds[0] == ("host_memory_leak", "warning")
    assert kinds[-1] == ("host_memory_leak", "critical")  # it escalates as the end nears
    assert len(kinds) == 2
    # High but flat memory, or memory that goes up and down, is no leak.
    assert run(SystemMonitor(), 200, memory_used=60.0) == []
    wavy = SystemMonitor()
    found = []
    for i in range(200):
        found += wavy.check(sample(i, memory_used=50.0 + 8.0 * ((i // 10) % 2)), running=True)
    assert found == []


@pytest.mark.parametrize(("disk", "severity"), [(96.0, "warning"), (99.5, "critical")])
def test_a_nearly_full_disk(disk: float, severity: str) -> None:
    found = run(SystemMonitor(), 10, disk=disk)
    assert [(f.type, f.severity) for f in found] == [("disk_full", severity)]


def test_a_sampler_gone_silent_while_steps_still_land() -> None:
    monitor = SystemMonitor()
    run(monitor, 20)
    last = T0 + 10 * 19
    assert monitor.silent_hosts(last + 30) == []  # a late sample is not silence
    (finding,) = monitor.silent_hosts(last + 120)
    assert finding.type == "sampler_silent" and "node-a" in finding.message
    assert monitor.silent_hosts(last + 130) == []  # the same incident: said once


def test_an_incident_that_ends_and_comes_back_is_reported_again() -> None:
    monitor = SystemMonitor()
    found = [f.type for f in run(monitor, 50, disk=97.0)]
    for i in range(50, 200):
        found += [f.type for f in monitor.check(sample(i), running=True)]
    for i in range(200, 220):
        found += [f.type for f in monitor.check(sample(i, disk=97.0), running=True)]
    assert found == ["disk_full", "disk_full"]
