"""Artifact downloads under a hostile or careless trainer (issue 12 §3, §4, §5).

The trainer owns the profiles folder and may change it while the server reads
it: a file swapped for a symlink or a FIFO between a check and the open, a
directory symlinked out of the job, clients that never read their download.
None of it may leak a byte from outside the folder, pin a worker thread or a
pooled database connection, or answer 500.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.api.live_support import live_server
from tests.api.test_artifacts_api import TRACE, make_profiles
from tests.fixtures_sshd import SSHD
from training_platform.settings import Settings

SECRET = b"TOP-SECRET-outside-the-profiles-folder"

# Runs in its own process (truly in parallel with the server, no shared GIL):
# swaps `target` between a regular file and `other` (a symlink or a FIFO) as
# fast as renames go, until `stop` exists.
SWAPPER = """
import os, sys
target, regular, kind, other, stop = sys.argv[1:6]
spare = target + ".spare"
while not os.path.exists(stop):
    for make in ("regular", kind):
        try:
            os.unlink(spare)
        except FileNotFoundError:
            pass
        if make == "regular":
            os.link(regular, spare)
        elif kind == "symlink":
            os.symlink(other, spare)
        else:
            os.mkfifo(spare)
        os.replace(spare, target)
"""


@contextmanager
def swapping(target: Path, kind: str, other: Path | None = None) -> Iterator[None]:
    """`target` flips between its regular content and a `kind` ("symlink"/"fifo")."""
    regular = target.with_name(target.name + ".regular")
    os.link(target, regular)
    stop = target.with_name("stop-swapping")
    process = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(target), str(regular), kind, str(other), str(stop)]
    )
    try:
        yield
    finally:
        stop.touch()
        process.wait(10)


def test_a_file_swapped_for_a_symlink_never_leaks_the_outside(
    client: TestClient, metrics_dir: Path
) -> None:
    root = make_profiles(metrics_dir, "run1")
    secret = metrics_dir.parent / "secret.txt"
    secret.write_bytes(SECRET)
    target = root / "step_10" / "trace.json"

    answers: dict[int, int] = {}
    with swapping(target, "symlink", secret):
        # At least 4 s of requests, and on a loaded machine up to 30 s, until the race
        # was seen both ways (the swapper is another process: it may start late).
        start = time.monotonic()
        while time.monotonic() - start < 4 or (
            time.monotonic() - start < 30 and not (answers.get(200) and answers.get(404))
        ):
            response = client.get("/api/jobs/run1/artifacts/step_10/trace.json")
            assert SECRET not in response.content
            if response.status_code == 200:
                assert response.content == TRACE
            answers[response.status_code] = answers.get(response.status_code, 0) + 1

    assert set(answers) <= {200, 404}, answers
    assert answers.get(200) and answers.get(404), answers  # the race really ran both ways


def test_a_file_swapped_for_a_fifo_answers_promptly_and_pins_nothing(
    settings: Settings, metrics_dir: Path
) -> None:
    root = make_profiles(metrics_dir, "run1")
    target = root / "step_10" / "trace.json"

    with live_server(settings) as server, httpx.Client(timeout=5) as http:
        url = server.http_url("/api/jobs/run1/artifacts/step_10/trace.json")
        answers: dict[int, int] = {}
        with swapping(target, "fifo"):
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                # Before the fix, a request that opened the FIFO waited for a
                # writer forever: here a ReadTimeout after 5 s.
                response = http.get(url)
                if response.status_code == 200:
                    assert response.content == TRACE
                answers[response.status_code] = answers.get(response.status_code, 0) + 1
        assert set(answers) <= {200, 404}, answers
        assert answers.get(404), answers
        assert http.get(server.http_url("/api/jobs")).status_code == 200


def test_a_fifo_artifact_is_refused_at_once(client: TestClient, metrics_dir: Path) -> None:
    root = make_profiles(metrics_dir, "run1")
    os.mkfifo(root / "step_10" / "pipe.json")
    started = time.monotonic()
    assert client.get("/api/jobs/run1/artifacts/step_10/pipe.json").status_code == 404
    assert time.monotonic() - started < 2


def _stalled_download(port: int, path: str) -> socket.socket:
    """A client that asks for `path` and never reads a byte of the answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return sock


def test_downloads_that_are_never_read_hold_no_database_connection(
    settings: Settings, metrics_dir: Path
) -> None:
    root = make_profiles(metrics_dir, "run1")
    (root / "big.bin").write_bytes(os.urandom(16 << 20))  # far beyond the socket buffers
    stalled: list[socket.socket] = []
    with live_server(settings) as server, httpx.Client(timeout=10) as http:
        engine = server.app.state.engine
        try:
            # More than the default pool (5 + 10 overflow): before the fix the
            # 16th download and every other route waited 30 s, then answered 500.
            for _ in range(16):
                stalled.append(_stalled_download(server.port, "/api/jobs/run1/artifacts/big.bin"))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(_open_fds_named(root / "big.bin")) < 16:
                time.sleep(0.05)
            assert len(_open_fds_named(root / "big.bin")) == 16  # all 16 are streaming
            assert engine.pool.checkedout() == 0

            started = time.monotonic()
            assert http.get(server.http_url("/api/jobs")).status_code == 200
            assert http.get(server.http_url("/api/jobs/run1")).status_code == 200
            assert time.monotonic() - started < 5
        finally:
            for sock in stalled:
                sock.close()
        # Clients gone: every download ends and closes its file (no descriptor leaks).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _open_fds_named(root / "big.bin"):
            time.sleep(0.05)
        assert _open_fds_named(root / "big.bin") == []


def _open_fds_named(path: Path) -> list[str]:
    """This process's descriptors open on `path` (the server runs in this process)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                found.append(fd)
        except OSError:
            continue
    return found


# --- §5: file-system errors are 4xx ---------------------------------------------------


def test_an_artifact_name_over_255_bytes_is_422(client: TestClient, metrics_dir: Path) -> None:
    make_profiles(metrics_dir, "run1")
    response = client.get(f"/api/jobs/run1/artifacts/step_10/{'a' * 300}.json")
    assert response.status_code == 422 and "too long" in response.json()["detail"]


def test_a_path_under_a_file_is_404(client: TestClient, metrics_dir: Path) -> None:
    make_profiles(metrics_dir, "run1")
    assert client.get("/api/jobs/run1/artifacts/stage_times.json/x").status_code == 404


def test_a_non_latin1_name_is_served_with_an_rfc5987_filename(
    client: TestClient, metrics_dir: Path
) -> None:
    root = make_profiles(metrics_dir, "run1")
    (root / "step_10" / "профиль_é.json").write_bytes(b"{}")

    response = client.get("/api/jobs/run1/artifacts/step_10/профиль_é.json")

    assert response.status_code == 200 and response.content == b"{}"
    disposition = response.headers["content-disposition"]
    assert "filename*=UTF-8''%D0%BF%D1%80%D0%BE%D1%84%D0%B8%D0%BB%D1%8C_%C3%A9.json" in disposition
    assert f'filename="{"_" * 9}.json"' in disposition


@pytest.mark.parametrize(
    "metrics_dir_text",
    ["/tmp/" + "x" * 300, "/tmp/" + "/".join(["y" * 200] * 25), "~nouser_tp_test/x", "/tmp/a\x00b"],
)
def test_registering_an_impossible_metrics_dir_is_422(
    client: TestClient, metrics_dir_text: str
) -> None:
    response = client.post("/api/jobs", json={"job_id": "bad", "metrics_dir": metrics_dir_text})
    assert response.status_code == 422, response.text
    assert client.get("/api/jobs/bad").status_code == 404


@pytest.mark.parametrize("path", ["/static/" + "a" * 5000, "/static/app%00.js", "/static/%00"])
def test_impossible_static_paths_are_404(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 404


# --- SSH ---------------------------------------------------------------------------------


@pytest.mark.ssh
def test_an_ssh_folder_symlinked_out_of_the_job_is_refused(
    ssh_client: TestClient, sshd: SSHD, tmp_path: Path
) -> None:
    root = make_profiles(sshd.remote_dir, "remote1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shadow").write_bytes(SECRET)
    (outside / "trace.json").write_bytes(SECRET)
    os.symlink(outside, root / "step_3")  # the `step_2 -> /etc` of the issue
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    for path in ("step_3/shadow", "step_3/trace.json"):
        response = ssh_client.get(f"/api/jobs/remote1/artifacts/{path}")
        assert response.status_code == 404 and SECRET not in response.content
    listing = ssh_client.get("/api/jobs/remote1/artifacts").json()
    assert not any(f["path"].startswith("step_3") for f in listing["files"])
    assert ssh_client.get("/api/jobs/remote1/artifacts/step_2/trace.json").content == TRACE


@pytest.mark.ssh
def test_an_ssh_profiles_folder_that_is_a_symlink_is_refused(
    ssh_client: TestClient, sshd: SSHD, tmp_path: Path
) -> None:
    (sshd.remote_dir / "remote1_metrics.jsonl").write_bytes(b"")
    outside = tmp_path / "outside"
    (outside / "step_1").mkdir(parents=True)
    (outside / "step_1" / "trace.json").write_bytes(SECRET)
    os.symlink(outside, sshd.remote_dir / "remote1_profiles")
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    assert ssh_client.get("/api/jobs/remote1/artifacts").json()["files"] == []
    response = ssh_client.get("/api/jobs/remote1/artifacts/step_1/trace.json")
    assert response.status_code == 404 and SECRET not in response.content


@pytest.mark.ssh
def test_an_ssh_fifo_artifact_is_refused_promptly(ssh_client: TestClient, sshd: SSHD) -> None:
    root = make_profiles(sshd.remote_dir, "remote1")
    os.mkfifo(root / "step_2" / "pipe.json")
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    started = time.monotonic()
    response = ssh_client.get("/api/jobs/remote1/artifacts/step_2/pipe.json")
    assert response.status_code == 404
    assert time.monotonic() - started < 3
    assert ssh_client.get("/api/jobs/remote1/artifacts/stage_times.json/x").status_code == 404
    assert ssh_client.get(f"/api/jobs/remote1/artifacts/{'b' * 300}").status_code == 422
