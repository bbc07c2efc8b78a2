"""Which processes of this host the lease keeper judges gone (their jobs move at once)."""

from __future__ import annotations

import os
import subprocess
import time

from training_platform.ingest.lease_keeper import pid_is_running


def test_a_killed_process_not_yet_reaped_is_not_running() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_is_running(child.pid)
        os.kill(child.pid, 9)  # a zombie until its parent (this test) reaps it
        deadline = time.monotonic() + 10
        while pid_is_running(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pid_is_running(child.pid)
        assert child.returncode is None  # still unreaped: it was the zombie that was judged
    finally:
        child.kill()
        child.wait(timeout=10)
    assert not pid_is_running(child.pid)
