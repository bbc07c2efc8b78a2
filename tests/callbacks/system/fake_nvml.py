"""A `pynvml` module that answers what the real library answered on an H200.

Built from tests/fixtures/gpu_h200/nvml.json (scripts/record_gpu_fixtures.py
recorded every call the sampler makes, idle and under load, with the errors
the driver gave). Only the library's boundary is replaced: the constants and
the exception classes are the real `pynvml`'s, so an error raised here is
the one the real library raises; each device call returns the recorded
answer, in the recorded shape (structures with the same attribute names).
Inject it where the reader imports it: ``monkeypatch.setitem(sys.modules,
"pynvml", fake)``.
"""

from __future__ import annotations

import ast
import json
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml as real

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_h200" / "nvml.json"
RECORDED: dict[str, Any] = json.loads(FIXTURE.read_text())
# The recorder's process was the job on that GPU: it stands for this test's process.
RECORDED_PID: int = RECORDED["this_pid"]

_ERRORS = {text: code for code, text in real.NVMLError._errcode_to_string.items()}


class FakeNvml(types.ModuleType):
    """`pynvml` answering `readings` (one recorded reading per GPU).

    `fail`: call name -> an NVML error code that call raises from now on
    (``{"nvmlInit": real.NVML_ERROR_DRIVER_NOT_LOADED}``); `pids`: recorded
    pid -> the pid to answer instead; `calls` counts each call.
    """

    def __init__(self, readings: list[dict[str, Any]], pids: dict[int, int] | None = None) -> None:
        super().__init__("pynvml")
        for name in dir(real):  # the constants and exception classes, as the real module has them
            if name.startswith(("NVML_", "NVMLError", "nvmlClocks")):
                setattr(self, name, getattr(real, name))
        self.readings = readings
        self.pids = {RECORDED_PID: os.getpid()} if pids is None else pids
        self.fail: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.started = 0
        self.shut_down = 0
        for name, answer in self._device_calls().items():
            setattr(self, name, self._device_call(name, answer))

    # -- the library's life ------------------------------------------------

    def _check(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.fail:
            raise real.NVMLError(self.fail[name])

    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        self.started += 1

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.shut_down += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.readings)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.readings):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return index  # a handle is opaque to its users

    # -- per device: the recorded answers ------------------------------------

    def _device_calls(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        def process(text: str) -> types.SimpleNamespace:
            fields = ast.literal_eval(text)  # recorded as the library's object printed
            fields["pid"] = self.pids.get(fields["pid"], fields["pid"])
            return types.SimpleNamespace(**fields)

        return {
            "nvmlDeviceGetName": lambda r: r["name"],
            "nvmlDeviceGetUtilizationRates": lambda r: types.SimpleNamespace(**r["utilization"]),
            "nvmlDeviceGetMemoryInfo": lambda r: types.SimpleNamespace(**r["memory"]),
            "nvmlDeviceGetPowerUsage": lambda r: r["power_mw"],
            "nvmlDeviceGetEnforcedPowerLimit": lambda r: r["power_limit_mw"],
            "nvmlDeviceGetTemperature": lambda r: r["temperature_c"],
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda r: r["throttle_reasons"],
            "nvmlDeviceGetFanSpeed": lambda r: r["fan_percent"],
            "nvmlDeviceGetComputeRunningProcesses": (
                lambda r: [process(p) for p in r["compute_processes"]]
            ),
            "nvmlDeviceGetGraphicsRunningProcesses": (
                lambda r: [process(p) for p in r["graphics_processes"]]
            ),
        }

    def _device_call(
        self, name: str, answer: Callable[[dict[str, Any]], Any]
    ) -> Callable[..., Any]:
        def call(handle: int, *args: Any) -> Any:
            self._check(name)
            reading = self.readings[handle]
            key = _KEYS.get(name)
            recorded = reading.get(key) if key else None
            if isinstance(recorded, dict) and "nvml_error" in recorded:  # what the driver said
                raise real.NVMLError(_ERRORS[recorded["nvml_error"]])
            return answer(reading)

        return call


_KEYS = {
    "nvmlDeviceGetName": "name",
    "nvmlDeviceGetUtilizationRates": "utilization",
    "nvmlDeviceGetMemoryInfo": "memory",
    "nvmlDeviceGetPowerUsage": "power_mw",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit_mw",
    "nvmlDeviceGetTemperature": "temperature_c",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "throttle_reasons",
    "nvmlDeviceGetFanSpeed": "fan_percent",
    "nvmlDeviceGetComputeRunningProcesses": "compute_processes",
    "nvmlDeviceGetGraphicsRunningProcesses": "graphics_processes",
}


def idle() -> FakeNvml:
    return FakeNvml(RECORDED["idle"])


def busy(sample: int = 0) -> FakeNvml:
    return FakeNvml(RECORDED["busy"][sample])
