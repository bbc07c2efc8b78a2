"""GPU utilisation during `profile-inference`'s timed runs, read with NVML (`pynvml`).

NVML's utilisation is the percentage of the last sample period (1/6 s to 1 s,
by the driver) in which a kernel ran, so a thread polls it while a batch size
is timed and once more when timing stops (a batch size timed for less than
one poll still gets a reading). On the CPU, or where NVML cannot start (no
driver, no bindings), there is no reading and `open_utilisation` says why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import torch

_POLL_S = 0.05


class GpuUtilisation:
    """Polls one GPU's utilisation between `start()` and `stop()`."""

    def __init__(self, read: Callable[[], float], poll_s: float = _POLL_S) -> None:
        self._read = read
        self._poll_s = poll_s
        self._values: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._values = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="gpu-utilisation", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float] | None:
        """Mean and max utilisation (%) and the number of readings; None without one."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample()
        if not self._values:
            return None
        values = self._values
        return {
            "mean": sum(values) / len(values),
            "max": max(values),
            "samples": float(len(values)),
        }

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._poll_s)

    def _sample(self) -> None:
        try:
            self._values.append(float(self._read()))
        except Exception:  # NVMLError (a lost GPU, not supported): a gap, not a failed run
            return


@contextmanager
def open_utilisation(
    device: torch.device, nvml: Any = None
) -> Iterator[tuple[GpuUtilisation | None, str]]:
    """(a sampler or None, where the readings come from or why there are none).

    `nvml` replaces the ``pynvml`` module (tests).
    """
    if device.type != "cuda":
        yield None, "not measured: the run is on the CPU"
        return
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError (no library, no driver)
        yield None, f"not measured: NVML unavailable ({exc})"
        return
    sampler: GpuUtilisation | None = None
    try:
        handle = _handle(nvml, device)
        sampler = GpuUtilisation(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        note = "NVML"
    except Exception as exc:
        note = f"not measured: NVML could not open the GPU ({exc})"
    try:
        yield sampler, note
    finally:
        with suppress(Exception):  # best effort: the readings are taken
            nvml.nvmlShutdown()


def _handle(nvml: Any, device: torch.device) -> Any:
    """The NVML handle of a torch device, by UUID: CUDA_VISIBLE_DEVICES renumbers
    torch's devices but not NVML's."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    if uuid:
        name = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        try:
            return nvml.nvmlDeviceGetHandleByUUID(name)
        except Exception:
            pass  # an older driver or a MIG slice: fall back to the index
    return nvml.nvmlDeviceGetHandleByIndex(index)
