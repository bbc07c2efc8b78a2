"""The NVML reader against what the real library answered on an H200 (tests/fixtures/gpu_h200/).

Only the library is replaced (`fake_nvml`: the real `pynvml`'s constants and
errors, the recorded answers), where the reader imports it. The last test
reads a real GPU where there is one.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pynvml
import pytest

from tests.callbacks.system import fake_nvml
from tests.callbacks.system.fake_nvml import FakeNvml
from training_platform.callbacks.system import gpus as gpus_module
from training_platform.callbacks.system.gpus import GpuReader, decode_throttle

GIB = 2**30


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process warnings afresh."""
    monkeypatch.setattr(gpus_module, "_warned", set())


def use(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> FakeNvml:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_busy_h200_reads_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, fake_nvml.busy())
    recorded = fake_nvml.RECORDED["busy"][0][0]
    (gpu,) = GpuReader().read() or []
    assert gpu == {
        "index": 0,
        "name": "NVIDIA H200",
        "utilization": 99.0,
        "memory_used_gib": round(recorded["memory"]["used"] / GIB, 2),
        "memory_total_gib": 140.4,
        "power_w": 642.4,
        "power_limit_w": 700.0,
        "temperature_c": 50.0,
        "throttle": ["sw_power_cap"],  # 0x4 under load: the board at its power cap
        "processes": [{"pid": os.getpid(), "memory_used_gib": 0.94}],
    }


def test_an_idle_h200_says_so_and_lists_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, fake_nvml.idle())
    (gpu,) = GpuReader().read() or []
    assert gpu["utilization"] == 0.0 and gpu["power_w"] == 79.9 and gpu["temperature_c"] == 32.0
    assert gpu["throttle"] == ["gpu_idle"] and gpu["processes"] == []


def test_throttle_reasons_are_decoded_by_name() -> None:
    assert decode_throttle(0) == []
    assert decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_throttle(pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown) == [
        "hw_power_brake_slowdown"
    ]
    assert decode_throttle(0x1 | 0x10000) == ["gpu_idle", "0x10000"]  # a bit newer than us


def test_only_this_jobs_processes_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ours and our children's, not another job's (here: our parent, no descendant of ours)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        fake = fake_nvml.busy()
        recorded = fake.readings[0]["compute_processes"][0]
        stranger = recorded.replace(str(fake_nvml.RECORDED_PID), str(os.getppid()))
        kid = recorded.replace(str(fake_nvml.RECORDED_PID), str(child.pid))
        fake.readings = [dict(fake.readings[0], compute_processes=[recorded, stranger, kid])]
        use(monkeypatch, fake)
        (gpu,) = GpuReader().read() or []
        assert [p["pid"] for p in gpu["processes"]] == [os.getpid(), child.pid]
    finally:
        child.kill()
        child.wait()


def test_no_library_is_one_warning_and_no_gpus(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = use(monkeypatch, fake_nvml.busy())
    fake.fail["nvmlInit"] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    reader = GpuReader()
    assert [reader.read() for _ in range(3)] == [None, None, None]
    assert fake.calls["nvmlInit"] == 1  # not tried again every sample
    assert warnings_logged(caplog) == [
        "system metrics: no GPU metrics (NVML unavailable: "
        "NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
    ]
    GpuReader().read()  # another callback in the same process: no second warning
    assert len(warnings_logged(caplog)) == 1


def test_no_bindings_is_one_warning_and_no_gpus(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert GpuReader().read() is None
    (message,) = warnings_logged(caplog)
    assert message.startswith(
        "system metrics: no GPU metrics (NVML unavailable: ModuleNotFoundError"
    )


def test_a_failing_count_is_one_warning_and_nvml_is_shut_down(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = use(monkeypatch, fake_nvml.busy())
    fake.fail["nvmlDeviceGetCount"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert GpuReader().read() is None
    assert fake.shut_down == 1 and len(warnings_logged(caplog)) == 1


def test_a_failing_call_leaves_only_that_field_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = use(monkeypatch, fake_nvml.busy())
    fake.fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_GPU_IS_LOST
    fake.fail["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    reader = GpuReader()
    for _ in range(3):
        (gpu,) = reader.read() or []
        assert "power_w" not in gpu and "temperature_c" not in gpu
        assert gpu["power_limit_w"] == 700.0 and gpu["utilization"] == 99.0
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 3  # a lost GPU may come back: asked again
    assert fake.calls["nvmlDeviceGetTemperature"] == 1  # "Not Supported" stays so: asked once
    assert warnings_logged(caplog) == [
        "system metrics: GPU 0 power: NVMLError_GpuIsLost: GPU is lost"
    ]
    del fake.fail["nvmlDeviceGetPowerUsage"]
    (gpu,) = reader.read() or []
    assert gpu["power_w"] == 642.4


def test_what_the_driver_did_not_report_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded H200 answered "Not Supported" for the fan: any field may be so."""
    fake = fake_nvml.busy()
    reading = dict(fake.readings[0], power_limit_mw={"nvml_error": "Not Supported"})
    fake.readings = [reading]
    use(monkeypatch, fake)
    (gpu,) = GpuReader().read() or []
    assert "power_limit_w" not in gpu and gpu["power_w"] == 642.4


def test_close_shuts_nvml_down_and_a_restart_starts_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = use(monkeypatch, fake_nvml.idle())
    reader = GpuReader()
    reader.read()
    reader.close()
    assert (fake.started, fake.shut_down) == (1, 1)
    assert reader.read() is not None and fake.started == 2


@pytest.fixture
def real_gpu() -> Iterator[None]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"needs an NVIDIA GPU and its driver: NVML says {exc}")
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            pytest.skip("needs an NVIDIA GPU: NVML sees none")
        yield
    finally:
        pynvml.nvmlShutdown()


def test_a_real_gpu_reads_in_range(real_gpu: None) -> None:
    reader = GpuReader()
    gpus = reader.read()
    reader.close()
    assert gpus is not None and [gpu["index"] for gpu in gpus] == list(range(len(gpus)))
    for gpu in gpus:
        assert isinstance(gpu["name"], str) and gpu["name"]
        assert 0 <= gpu.get("utilization", 0) <= 100
        assert 0 < gpu["memory_used_gib"] <= gpu["memory_total_gib"]
        assert gpu.get("power_w", 1) > 0 and 0 < gpu.get("temperature_c", 1) < 120
        assert all(isinstance(name, str) for name in gpu.get("throttle", []))
