"""SSH specifics against a real sshd on 127.0.0.1: host keys, keys, outages, timeouts.

The incremental-reading semantics shared with the local reader are tested,
over SSH too, in ``test_metrics_reader.py``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures_sshd import SSHD
from tests.sshd_server import free_port, known_hosts_line, write_keypair
from training_platform.callbacks.wire.lines import encode_record
from training_platform.errors import HostKeyError, InvalidSourceError, MetricsSourceError
from training_platform.ingest import ssh
from training_platform.ingest.readers import ReadPosition
from training_platform.ingest.ssh import SSHTarget, check_ssh_connection, resolve_key_path
from training_platform.ingest.ssh_reader import SSHMetricsReader

pytestmark = pytest.mark.ssh


def lines(steps: range) -> bytes:
    return b"".join(encode_record({"step": s, "timestamp": 1.0 + s}) for s in steps)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


@pytest.fixture
def metrics_path(sshd: SSHD) -> Path:
    return sshd.remote_dir / "job_metrics.jsonl"


def test_a_known_host_with_the_right_key_is_accepted(sshd: SSHD) -> None:
    check_ssh_connection(sshd.target())


def test_an_unknown_host_key_is_refused(sshd: SSHD, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    target = sshd.target(known_hosts_files=(empty,))
    with pytest.raises(HostKeyError, match=rf"unknown SSH host 127\.0\.0\.1 port {sshd.port}"):
        check_ssh_connection(target)
    reader = SSHMetricsReader("job", str(sshd.remote_dir), target, backoff=5.0)
    started = time.monotonic()
    with pytest.raises(HostKeyError, match="refusing to connect"):
        reader.read_metrics_incremental(0)
    assert time.monotonic() - started < 5.0  # refused at once, never retried


def test_a_changed_host_key_is_refused(sshd: SSHD, tmp_path: Path) -> None:
    other = tmp_path / "known_hosts"
    other.write_text(known_hosts_line(sshd.port, write_keypair(tmp_path / "other_host_key")))
    with pytest.raises(HostKeyError, match=rf"127\.0\.0\.1 port {sshd.port} has CHANGED"):
        check_ssh_connection(sshd.target(known_hosts_files=(other,)))


def test_a_missing_known_hosts_file_is_a_clear_error(sshd: SSHD, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(MetricsSourceError, match=f"cannot read known_hosts file {missing}"):
        check_ssh_connection(sshd.target(known_hosts_files=(missing,)))


def test_a_key_the_server_does_not_accept_is_refused(sshd: SSHD, tmp_path: Path) -> None:
    stranger = tmp_path / "id_stranger"
    write_keypair(stranger)
    with pytest.raises(MetricsSourceError, match="authentication failed") as caught:
        check_ssh_connection(sshd.target(key_path=stranger))
    assert not isinstance(caught.value, HostKeyError)


def test_one_connection_is_kept_between_reads(
    sshd: SSHD, metrics_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects = 0
    real_connect = ssh.connect_sftp

    def counting_connect(target: SSHTarget) -> object:
        nonlocal connects
        connects += 1
        return real_connect(target)

    monkeypatch.setattr(ssh, "connect_sftp", counting_connect)
    append(metrics_path, lines(range(3)))
    with SSHMetricsReader("job", str(sshd.remote_dir), sshd.target()) as reader:
        position = reader.read_metrics_incremental(0).position
        append(metrics_path, lines(range(3, 5)))
        assert [r["step"] for r in reader.read_metrics_incremental(position).records] == [3, 4]
        assert reader.read_status() is None and reader.metrics_file_exists()
    assert connects == 1


def test_a_dropped_connection_is_reestablished_without_an_error(
    sshd: SSHD, metrics_path: Path
) -> None:
    append(metrics_path, lines(range(3)))
    with SSHMetricsReader("job", str(sshd.remote_dir), sshd.target()) as reader:
        position = reader.read_metrics_incremental(0).position
        sshd.drop_sessions()  # the server side of our connection dies
        append(metrics_path, lines(range(3, 6)))
        batch = reader.read_metrics_incremental(position)
    assert [r["step"] for r in batch.records] == [3, 4, 5]


def test_sshd_killed_mid_sync_then_restarted_resumes_without_loss_or_duplicates(
    sshd: SSHD, metrics_path: Path
) -> None:
    append(metrics_path, lines(range(300)))
    target = sshd.target(timeout=2.0)
    reader = SSHMetricsReader(
        "job", str(sshd.remote_dir), target, max_bytes=2000, attempts=2, backoff=0.01
    )
    seen: list[int] = []
    committed = ReadPosition()
    first = reader.read_metrics_incremental(committed)
    assert not first.at_eof  # a catch-up in pages, interrupted after the first
    seen += [r["step"] for r in first.records]
    committed = first.position

    sshd.stop()  # the host goes down: listener and sessions killed
    with pytest.raises(MetricsSourceError, match="unreachable after 2 attempts"):
        reader.read_metrics_incremental(committed)
    append(metrics_path, lines(range(300, 400)))  # the run kept writing meanwhile
    sshd.start()

    for _ in range(1000):
        batch = reader.read_metrics_incremental(committed)
        seen += [r["step"] for r in batch.records]
        committed = batch.position
        if batch.at_eof:
            break
    reader.close()
    assert seen == list(range(400))
    assert not batch.reset


def test_a_hung_server_times_out_and_the_reader_reconnects(sshd: SSHD, metrics_path: Path) -> None:
    append(metrics_path, lines(range(3)))
    with SSHMetricsReader("job", str(sshd.remote_dir), sshd.target(timeout=0.5)) as reader:
        position = reader.read_metrics_incremental(0).position
        sshd.freeze_sessions()  # our session stops answering, the listener does not
        append(metrics_path, lines(range(3, 5)))
        started = time.monotonic()
        batch = reader.read_metrics_incremental(position)
        assert time.monotonic() - started < 5.0
    assert [r["step"] for r in batch.records] == [3, 4]


@pytest.fixture
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A TCP port that accepts connections and never says a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=5)
    listener.close()
    for conn in accepted:
        conn.close()


def test_a_silent_host_costs_bounded_attempts_with_a_timeout_each(
    sshd: SSHD, silent_server: tuple[int, list[socket.socket]]
) -> None:
    port, accepted = silent_server
    target = sshd.target(port=port, timeout=0.3)
    reader = SSHMetricsReader("job", "/tmp", target, attempts=3, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(MetricsSourceError, match="unreachable after 3 attempts"):
        reader.read_metrics_incremental(0)
    assert time.monotonic() - started < 5.0
    assert len(accepted) == 3


def test_retries_back_off_exponentially_then_give_up(tmp_path: Path) -> None:
    write_keypair(tmp_path / "id_ed25519")
    target = SSHTarget(
        host="127.0.0.1", port=free_port(), username="nobody", key_path=tmp_path / "id_ed25519"
    )  # nothing listens there: every connect is refused at once
    sleeps: list[float] = []
    connection = ssh.SSHConnection(target, attempts=4, backoff=0.5, sleep=sleeps.append)
    with pytest.raises(MetricsSourceError, match="unreachable after 4 attempts"):
        connection.run(lambda sftp: None)
    assert sleeps == [0.5, 1.0, 2.0]


def test_a_missing_remote_file_is_a_clear_error(sshd: SSHD) -> None:
    reader = SSHMetricsReader("job", str(sshd.remote_dir), sshd.target())
    with pytest.raises(MetricsSourceError, match=rf"127\.0\.0\.1:{sshd.port}:.*does not exist"):
        reader.read_metrics_incremental(0)
    reader.close()


def test_a_key_inside_the_key_dir_is_resolved(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir()
    key.write_text("key")
    assert resolve_key_path(key, tmp_path / "keys") == key.resolve()
    assert resolve_key_path("id_ed25519", tmp_path / "keys") == key.resolve()  # relative


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_key_outside_the_key_dir_is_refused(tmp_path: Path, how: str) -> None:
    key_dir = tmp_path / "keys"
    key_dir.mkdir()
    outside = tmp_path / "secret"
    outside.write_text("not a key for you")
    candidates: dict[str, str | Path] = {
        "absolute": outside,
        "dotdot": "../secret",
        "symlink": key_dir / "link",
    }
    candidate = candidates[how]
    if how == "symlink":
        (key_dir / "link").symlink_to(outside)
    with pytest.raises(InvalidSourceError, match="outside the key directory"):
        resolve_key_path(candidate, key_dir)


def test_a_key_path_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "subdir").mkdir()
    for candidate in ("subdir", "missing"):
        with pytest.raises(InvalidSourceError, match="is not a file"):
            resolve_key_path(candidate, tmp_path)
