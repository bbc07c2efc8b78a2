"""The host's CPU, memory, disk and network, read with psutil (docs/contract.md, System metrics).

Rates (CPU percent, disk and network MiB/s) are deltas of the kernel's
counters between two reads of this reader, over the monotonic time between
them: no state is shared with other psutil users (``psutil.cpu_percent()``
keeps one module-wide baseline that any other caller would move). The first
read has no baseline, so it has no rates; a counter that went backwards (a
disk or interface removed) gives no rate that time rather than a negative one.
Each group is read on its own: one that fails is absent from the sample and
logged once, the others are still there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import psutil

logger = logging.getLogger(__name__)

GIB: Final = float(1 << 30)
MIB: Final = float(1 << 20)


class HostReader:
    """Reads the groups ``cpu``, ``memory``, ``disk`` and ``network`` of a sample.

    `disk_path`: the file system whose use is reported (the output directory's).
    """

    def __init__(self, disk_path: Path, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.disk_path = disk_path
        self._monotonic = monotonic
        self._cpu_count = psutil.cpu_count() or os.cpu_count() or 1
        self._cpu: tuple[float, float] | None = None  # (busy, total) seconds of every CPU
        self._disk: tuple[float, int, int] | None = None  # (time, read bytes, written bytes)
        self._net: tuple[float, int, int] | None = None  # (time, received, sent)
        self._failed: set[str] = set()

    def read(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, dict[str, Any]] = {}
        for name, read in (
            ("cpu", self.cpu),
            ("memory", self.memory),
            ("disk", self.disk),
            ("network", self.network),
        ):
            try:
                group = read()
            except Exception:  # a platform without the counter, a vanished path, ...
                if name not in self._failed:
                    self._failed.add(name)
                    logger.warning("system metrics: reading %s failed", name, exc_info=True)
                continue
            if group:
                groups[name] = group
        return groups

    def cpu(self) -> dict[str, Any]:
        """``percent`` as ``top`` counts it (100 per busy CPU, up to 100 × ``count``),
        ``count`` (logical CPUs), ``load1`` (where the system has a load average)."""
        times = psutil.cpu_times()
        total = sum(times)
        # Time not spent idle or waiting on I/O is busy time (as psutil.cpu_percent counts it).
        busy = total - times.idle - getattr(times, "iowait", 0.0)
        group: dict[str, Any] = {}
        previous, self._cpu = self._cpu, (busy, total)
        if previous is not None and total > previous[1]:
            share = (busy - previous[0]) / (total - previous[1])
            group["percent"] = round(min(max(share, 0.0), 1.0) * 100.0 * self._cpu_count, 1)
        group["count"] = self._cpu_count
        if hasattr(os, "getloadavg"):  # not on Windows (psutil would start a thread there)
            group["load1"] = round(os.getloadavg()[0], 2)
        return group

    def memory(self) -> dict[str, Any]:
        """Used is total minus available, so ``used_gib / total_gib`` is ``percent``."""
        memory = psutil.virtual_memory()
        return {
            "used_gib": round((memory.total - memory.available) / GIB, 2),
            "total_gib": round(memory.total / GIB, 2),
            "percent": round(memory.percent, 1),
        }

    def disk(self) -> dict[str, Any]:
        """The output directory's file system in use (%, as ``df``), and every disk's
        read and write rates (MiB/s) where the system counts them."""
        group: dict[str, Any] = {
            "used_percent": round(psutil.disk_usage(str(self.disk_path)).percent, 1)
        }
        counters = psutil.disk_io_counters()
        if counters is not None:  # None where no disk is counted (some containers)
            now = (self._monotonic(), counters.read_bytes, counters.write_bytes)
            previous, self._disk = self._disk, now
            rates = _rates(previous, now)
            if rates is not None:
                group["read_mib_s"], group["write_mib_s"] = rates
        return group

    def network(self) -> dict[str, Any]:
        """Every interface's received and sent MiB/s (from the second read on)."""
        counters = psutil.net_io_counters()
        now = (self._monotonic(), counters.bytes_recv, counters.bytes_sent)
        previous, self._net = self._net, now
        rates = _rates(previous, now)
        if rates is None:
            return {}
        return {"recv_mib_s": rates[0], "sent_mib_s": rates[1]}


def _rates(
    previous: tuple[float, int, int] | None, now: tuple[float, int, int]
) -> tuple[float, float] | None:
    """Two counters' MiB/s between reads; None without a baseline, time, or when a
    counter went backwards."""
    if previous is None:
        return None
    elapsed = now[0] - previous[0]
    first, second = now[1] - previous[1], now[2] - previous[2]
    if elapsed <= 0 or first < 0 or second < 0:
        return None
    return round(first / MIB / elapsed, 3), round(second / MIB / elapsed, 3)
