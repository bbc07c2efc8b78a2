"""The host reader on the real counters of this machine (psutil): values in range, rates."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from training_platform.callbacks.system.host import HostReader


def test_the_first_read_has_the_levels_and_no_rates(tmp_path: Path) -> None:
    groups = HostReader(tmp_path).read()
    cpu, memory, disk = groups["cpu"], groups["memory"], groups["disk"]
    assert cpu["count"] == psutil.cpu_count() and "percent" not in cpu
    if hasattr(os, "getloadavg"):
        assert cpu["load1"] >= 0
    assert 0 < memory["used_gib"] <= memory["total_gib"]
    assert abs(memory["total_gib"] - psutil.virtual_memory().total / 2**30) < 0.01
    assert 0 <= memory["percent"] <= 100
    assert abs(memory["used_gib"] / memory["total_gib"] * 100 - memory["percent"]) < 1.0
    assert set(disk) == {"used_percent"} and "network" not in groups


def test_the_disk_is_the_one_holding_the_directory(tmp_path: Path) -> None:
    reported = HostReader(tmp_path).read()["disk"]["used_percent"]
    assert abs(reported - psutil.disk_usage(str(tmp_path)).percent) < 0.5
    assert 0 <= reported <= 100


def test_rates_from_the_second_read_are_non_negative_and_cpu_is_counted_per_core(
    tmp_path: Path,
) -> None:
    reader = HostReader(tmp_path)
    reader.read()
    (tmp_path / "written").write_bytes(os.urandom(1 << 20))  # some disk activity, maybe
    sum(i * i for i in range(300_000))  # and some CPU
    groups = reader.read()
    cpu = groups["cpu"]
    assert 0 <= cpu["percent"] <= 100 * cpu["count"]
    for key in ("read_mib_s", "write_mib_s"):
        if psutil.disk_io_counters() is not None:
            assert groups["disk"][key] >= 0
    assert groups["network"]["recv_mib_s"] >= 0 and groups["network"]["sent_mib_s"] >= 0


def test_a_counter_that_went_backwards_gives_no_rate_that_time(tmp_path: Path) -> None:
    reader = HostReader(tmp_path)
    reader.read()
    assert reader._net is not None
    time, received, sent = reader._net
    reader._net = (time, received + 10**15, sent)  # as if an interface had gone away
    assert "network" not in reader.read()
    assert "network" in reader.read()  # the next read has a baseline again


def test_a_group_that_fails_is_absent_and_logged_once(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    reader = HostReader(tmp_path / "gone")  # no such directory: disk_usage raises
    first, second = reader.read(), reader.read()
    assert "disk" not in first and "disk" not in second and "memory" in second
    assert [r.getMessage() for r in caplog.records] == ["system metrics: reading disk failed"]
