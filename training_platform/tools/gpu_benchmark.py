"""`gpu-check`'s measurements: memory in use now, and a short throughput benchmark.

The benchmark is two numbers that bound most training and inference work:
dense matmul throughput (TFLOP/s in the chosen dtype; what the tensor cores
or the CPU's vector units deliver) and memory bandwidth (GB/s of a large
device-to-device copy, counted as bytes read plus bytes written). Each is
repeated for at least `min_time_s` after a warm-up, and the median repetition
is reported, so one preempted repetition on a shared machine does not set it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from training_platform.callbacks.profiling.memory import GIB, rss_reader

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def memory_now(device: torch.device) -> dict[str, Any]:
    """Free/total memory of the device, and what this process holds there."""
    rss = rss_reader()()
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return {
            "device": str(device),
            "free_gib": free / GIB,
            "total_gib": total / GIB,
            "used_by_all_processes_gib": (total - free) / GIB,
            "allocated_by_this_process_gib": torch.cuda.memory_allocated(device) / GIB,
            "reserved_by_this_process_gib": torch.cuda.memory_reserved(device) / GIB,
            "process_rss_gib": rss / GIB if rss else None,
        }
    out: dict[str, Any] = {"device": "cpu", "process_rss_gib": rss / GIB if rss else None}
    try:
        import psutil

        memory = psutil.virtual_memory()
        out.update(free_gib=memory.available / GIB, total_gib=memory.total / GIB)
    except ImportError:
        out.update(free_gib=None, total_gib=None)
    return out


def _timed(
    device: torch.device, action: Callable[[], Any], min_time_s: float, max_reps: int
) -> list[float]:
    """Seconds per repetition after one warm-up; at least 3 repetitions."""
    action()
    _sync(device)
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - began < min_time_s and len(times) < max_reps):
        start = time.perf_counter()
        action()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(
    device: torch.device, dtype: str, *, size: int | None = None, min_time_s: float = 0.25
) -> dict[str, Any]:
    """Median TFLOP/s of an n x n matmul (2 n^3 floating-point operations)."""
    n = size or (8192 if device.type == "cuda" else 512)
    a = torch.randn(n, n, device=device, dtype=_DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=_DTYPES[dtype])
    times = _timed(device, lambda: a @ b, min_time_s, max_reps=200)
    median = statistics.median(times)
    return {
        "dtype": dtype,
        "size": n,
        "repetitions": len(times),
        "median_ms": median * 1000,
        "tflops": 2 * n**3 / median / 1e12,
        "best_tflops": 2 * n**3 / min(times) / 1e12,
    }


def memory_bandwidth(
    device: torch.device, *, mib: int | None = None, min_time_s: float = 0.25
) -> dict[str, Any]:
    """Median GB/s (10^9 bytes) of copying a large buffer: bytes read + bytes written."""
    size = (mib or (1024 if device.type == "cuda" else 64)) * (1 << 20)
    src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    times = _timed(device, lambda: dst.copy_(src), min_time_s, max_reps=200)
    median = statistics.median(times)
    return {
        "buffer_mib": size >> 20,
        "repetitions": len(times),
        "median_ms": median * 1000,
        "gb_per_s": 2 * size / median / 1e9,
    }


def run_benchmark(device: torch.device, dtype: str, *, min_time_s: float = 0.25) -> dict[str, Any]:
    """Both measurements on one device, with what was measured said plainly."""
    what = str(device) if device.type == "cuda" else "the CPU (no GPU measured)"
    return {
        "device": str(device),
        "measured": what,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "matmul": matmul_tflops(device, dtype, min_time_s=min_time_s),
        "bandwidth": memory_bandwidth(device, min_time_s=min_time_s),
    }
