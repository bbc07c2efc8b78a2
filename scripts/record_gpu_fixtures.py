"""Record what the trainer side sees on a real NVIDIA GPU, as test fixtures.

Run on a machine with a GPU (the tests never need one):

    python scripts/record_gpu_fixtures.py OUT_DIR

It writes, under OUT_DIR:

- ``nvml.json``: every NVML reading the system sampler (issue 28, DESIGN §6)
  will take, per GPU, idle and under load, with what each call raised where
  the driver refused it; and psutil's host readings beside them.
- ``cuda_run/``: a real tiny training run on ``cuda:0`` through
  ``PlatformCallback`` with ``StepProfiler`` (stage timing, CUDA memory, a
  scheduled torch.profiler trace with CUDA activities): the metrics file and
  the profile directory, as the platform reads them.
- ``gpu_check.json``: ``training-platform gpu-check``'s report, measured.

Each part is independent: a failure is recorded in ``errors.json`` and the
others still run, so one call on a lent machine brings back what it can.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ERRORS: dict[str, str] = {}


def _try(name: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        ERRORS[name] = traceback.format_exc()[-4000:]
        return None


def _nvml_reading(pynvml: Any, handle: Any) -> dict[str, Any]:
    """One reading of every field the sampler is to take, each call guarded."""
    out: dict[str, Any] = {}

    def read(key: str, fn: Any, *args: Any) -> None:
        try:
            value = fn(handle, *args)
        except pynvml.NVMLError as error:
            out[key] = {"nvml_error": str(error)}
            return
        if hasattr(value, "_fields_"):
            value = {name: getattr(value, name) for name, _ in value._fields_}
        elif isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list):
            value = [
                {name: getattr(item, name) for name, _ in item._fields_}
                if hasattr(item, "_fields_")
                else item
                for item in value
            ]
        out[key] = value

    read("name", pynvml.nvmlDeviceGetName)
    read("uuid", pynvml.nvmlDeviceGetUUID)
    read("pci", lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId)
    read("utilization", pynvml.nvmlDeviceGetUtilizationRates)
    read("memory", pynvml.nvmlDeviceGetMemoryInfo)
    read("power_mw", pynvml.nvmlDeviceGetPowerUsage)
    read("power_limit_mw", pynvml.nvmlDeviceGetEnforcedPowerLimit)
    read("temperature_c", pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
    read("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
    read("mem_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)
    read("throttle_reasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    read("fan_percent", pynvml.nvmlDeviceGetFanSpeed)
    read("compute_processes", pynvml.nvmlDeviceGetComputeRunningProcesses)
    read("graphics_processes", pynvml.nvmlDeviceGetGraphicsRunningProcesses)
    read("ecc_volatile_uncorrected", pynvml.nvmlDeviceGetTotalEccErrors,
         pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)  # fmt: skip
    read("pcie_tx_kbps", pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    read("pcie_rx_kbps", pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    read("mig_mode", pynvml.nvmlDeviceGetMigMode)
    return out


def record_nvml(out: Path) -> None:
    import psutil
    import pynvml
    import torch

    pynvml.nvmlInit()
    doc: dict[str, Any] = {
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml_version": pynvml.nvmlSystemGetNVMLVersion(),
        "cuda_driver_version": pynvml.nvmlSystemGetCudaDriverVersion(),
        "device_count": pynvml.nvmlDeviceGetCount(),
        "pynvml_module_file": pynvml.__file__,
    }
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(doc["device_count"])]
    doc["idle"] = [_nvml_reading(pynvml, h) for h in handles]

    # Under load: a matrix-product loop in a thread while we read, so utilisation,
    # power, clocks and this process in the process list are real readings.
    stop = threading.Event()

    def load() -> None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    time.sleep(3.0)
    doc["busy"] = []
    for _ in range(3):
        doc["busy"].append([_nvml_reading(pynvml, h) for h in handles])
        time.sleep(0.5)
    stop.set()
    worker.join(30)
    doc["this_pid"] = __import__("os").getpid()

    cpu = psutil.cpu_times_percent(interval=0.5)
    doc["psutil"] = {
        "cpu_count": psutil.cpu_count(),
        "cpu_percent_per_core": psutil.cpu_percent(interval=0.5, percpu=True),
        "cpu_times_percent": cpu._asdict(),
        "virtual_memory": psutil.virtual_memory()._asdict(),
        "swap_memory": psutil.swap_memory()._asdict(),
        "disk_usage_root": psutil.disk_usage("/")._asdict(),
        "disk_io": (psutil.disk_io_counters() or None) and psutil.disk_io_counters()._asdict(),
        "net_io": psutil.net_io_counters()._asdict(),
        "loadavg": list(psutil.getloadavg()),
    }
    pynvml.nvmlShutdown()
    (out / "nvml.json").write_text(json.dumps(doc, indent=1, default=str))


def record_cuda_run(out: Path) -> None:
    import torch

    from training_platform.callbacks.platform_callback import PlatformCallback
    from training_platform.callbacks.profiling.step_profiler import StepProfiler, TraceSchedule

    run_dir = out / "cuda_run"
    run_dir.mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    profiler = StepProfiler("gpu1", run_dir, trace=TraceSchedule(wait=2, warmup=1, active=2))
    callback = PlatformCallback("gpu1", run_dir, contributors=[profiler])
    profiler.mark_baseline()
    for step in range(12):
        callback.on_step_begin(step)
        with profiler.stage("rollout"):
            x = torch.randn(64, 256, device="cuda")
        with profiler.stage("update"):
            loss = (model(x) - x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            value = float(loss)
        profiler.add_batch(samples=64, tokens=64 * 256)
        callback.on_step_end(step, {"loss": {"actor_loss": value}})
    callback.on_train_end()
    profiler.close()


def record_gpu_check(out: Path) -> None:
    from training_platform.tools.gpu_check import gpu_check_report

    report = gpu_check_report(["1.5B", "7B", "70B"], benchmark=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    _try("nvml", record_nvml, out)
    _try("cuda_run", record_cuda_run, out)
    _try("gpu_check", record_gpu_check, out)
    (out / "errors.json").write_text(json.dumps(ERRORS, indent=1))
    print(json.dumps({"errors": list(ERRORS)}, indent=1))


if __name__ == "__main__":
    main()
