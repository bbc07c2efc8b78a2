"""Every GPU the NVIDIA driver sees, read with NVML (`nvidia-ml-py`, imported as `pynvml`).

NVML is started lazily on the sampler's thread (never on the training
thread, never at import): a machine without NVIDIA GPUs, without the driver or
without the bindings gets ONE warning per process and samples without
``gpus``. A call that fails on one GPU leaves that field absent from that
GPU's entry; a field the driver says it does not support (``Not Supported``,
as fans and some power readings on data-centre boards) is not asked again.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

import psutil

logger = logging.getLogger(__name__)

GIB: Final = float(1 << 30)

# nvmlClocksThrottleReason* / nvmlClocksEventReason* bits (the same values) and their names.
THROTTLE_REASONS: Final = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
_KNOWN_BITS: Final = sum(bit for bit, _ in THROTTLE_REASONS)
_NOT_SUPPORTED: Final = 3  # NVML_ERROR_NOT_SUPPORTED
_warned: set[str] = set()  # once per process: a notebook making many callbacks warns once


def decode_throttle(reasons: int) -> list[str]:
    """The names of the bits set in `reasons`; an unknown bit as ``0x...``."""
    names = [name for bit, name in THROTTLE_REASONS if reasons & bit]
    unknown = reasons & ~_KNOWN_BITS
    names += [hex(1 << shift) for shift in range(unknown.bit_length()) if unknown >> shift & 1]
    return names


def warn_once(message: str, *args: Any) -> None:
    if message in _warned:
        return
    _warned.add(message)
    logger.warning(message, *args)


class GpuReader:
    """``gpus``: one entry per GPU, or None where NVML cannot be used.

    `job_pid`: the process whose GPU processes (itself and its descendants)
    are listed per GPU (default: this process).
    """

    def __init__(self, job_pid: int | None = None) -> None:
        self.job_pid = os.getpid() if job_pid is None else job_pid
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._names: list[str | None] = []
        self._started = False
        self._unsupported: set[tuple[int, str]] = set()
        self._ours: dict[int, bool] = {}  # pid -> is it this job's (cached while listed)

    def start(self) -> bool:
        """Load and start NVML once; False (and one warning) when it cannot be."""
        if self._started:
            return self._nvml is not None
        self._started = True
        try:
            import pynvml  # the seam the tests replace (sys.modules), and the only one

            pynvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError (no library, no driver), OSError
            warn_once("system metrics: no GPU metrics (NVML unavailable: %s)", _describe(exc))
            return False
        try:
            handles = [
                pynvml.nvmlDeviceGetHandleByIndex(index)
                for index in range(pynvml.nvmlDeviceGetCount())
            ]
        except Exception as exc:
            warn_once("system metrics: no GPU metrics (NVML: %s)", _describe(exc))
            _shutdown(pynvml)
            return False
        self._nvml, self._handles = pynvml, handles
        self._names = [
            self._call(index, "name", pynvml.nvmlDeviceGetName) for index in range(len(handles))
        ]
        return True

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        self._started = False  # a restarted sampler starts NVML again
        if nvml is not None:
            _shutdown(nvml)

    def read(self) -> list[dict[str, Any]] | None:
        if not self.start() or self._nvml is None:
            return None
        listed: set[int] = set()
        gpus = [self._read_gpu(index, listed) for index in range(len(self._handles))]
        for pid in list(self._ours):  # forget processes no GPU lists any more (pids are reused)
            if pid not in listed:
                del self._ours[pid]
        return gpus

    def _read_gpu(self, index: int, listed: set[int]) -> dict[str, Any]:
        nvml = self._nvml
        gpu: dict[str, Any] = {"index": index}
        name = self._names[index]
        if isinstance(name, bytes):  # nvidia-ml-py before 11.515 answers bytes
            name = name.decode(errors="replace")
        if name is not None:
            gpu["name"] = name
        utilization = self._call(index, "utilization", nvml.nvmlDeviceGetUtilizationRates)
        if utilization is not None:
            gpu["utilization"] = float(utilization.gpu)
        memory = self._call(index, "memory", nvml.nvmlDeviceGetMemoryInfo)
        if memory is not None:
            gpu["memory_used_gib"] = round(memory.used / GIB, 2)
            gpu["memory_total_gib"] = round(memory.total / GIB, 2)
        power = self._call(index, "power", nvml.nvmlDeviceGetPowerUsage)
        if power is not None:
            gpu["power_w"] = round(power / 1000.0, 1)
        limit = self._call(index, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit)
        if limit is not None:
            gpu["power_limit_w"] = round(limit / 1000.0, 1)
        temperature = self._call(
            index, "temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU
        )
        if temperature is not None:
            gpu["temperature_c"] = float(temperature)
        # The newer name first: the older is deprecated (to go with CUDA 14).
        reasons_of = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = self._call(
            index, "throttle", reasons_of or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        if reasons is not None:
            gpu["throttle"] = decode_throttle(int(reasons))
        processes = self._call(index, "processes", nvml.nvmlDeviceGetComputeRunningProcesses)
        if processes is not None:
            gpu["processes"] = self._job_processes(processes, listed)
        return gpu

    def _call(self, index: int, field: str, function: Any, *args: Any) -> Any:
        """`function(handle, *args)`, or None when NVML refuses (the field is then absent)."""
        key = (index, field)
        if key in self._unsupported:
            return None
        try:
            return function(self._handles[index], *args)
        except Exception as exc:  # NVMLError (a lost GPU, not supported, ...), or a bug in one
            if getattr(exc, "value", None) == _NOT_SUPPORTED:
                self._unsupported.add(key)
            else:
                warn_once("system metrics: GPU %s %s: %s", index, field, _describe(exc))
            return None

    def _job_processes(self, processes: list[Any], listed: set[int]) -> list[dict[str, Any]]:
        """This job's processes among `processes`: pid and memory (where the driver says)."""
        ours = []
        for process in processes:
            pid = int(process.pid)
            listed.add(pid)
            if not self._is_ours(pid):
                continue
            entry: dict[str, Any] = {"pid": pid}
            used = getattr(process, "usedGpuMemory", None)  # None: NVML_VALUE_NOT_AVAILABLE
            if isinstance(used, int):
                entry["memory_used_gib"] = round(used / GIB, 2)
            ours.append(entry)
        return ours

    def _is_ours(self, pid: int) -> bool:
        """`pid` is the job's process or one of its descendants (walking up its parents).

        A process in another PID namespace (a container's GPU seen with host pids) is
        not found, and so not listed: the driver's pids are the host's there."""
        known = self._ours.get(pid)
        if known is not None:
            return known
        found, current, hops = False, pid, 0
        try:
            while current > 1 and hops < 64:
                if current == self.job_pid:
                    found = True
                    break
                current, hops = psutil.Process(current).ppid(), hops + 1
        except (psutil.Error, OSError):
            found = False
        self._ours[pid] = found
        return found


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # NVML went away meanwhile: nothing left to release
        logger.debug("nvmlShutdown failed", exc_info=True)
