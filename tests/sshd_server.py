"""A real OpenSSH server for tests: ``/usr/sbin/sshd -D -e`` on a loopback port.

Everything lives in one temporary directory: a generated config, a generated
ed25519 host key and client key, ``authorized_keys`` and a ``known_hosts``
file with the server's key. It runs as the current user; as root it may log
in as root with the key (never with a password). No pytest in here, so
benchmarks can use it too.

`stop()` kills the listener *and* its per-connection processes (OpenSSH puts
each in its own session, so they do not die with the listener): that is what
a host going down looks like to a client.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SSHD = Path("/usr/sbin/sshd")
HOST = "127.0.0.1"


def sshd_unavailable_reason() -> str | None:
    """Why a real sshd cannot run here, or None when it can."""
    if not SSHD.exists():
        return f"OpenSSH server not installed ({SSHD} missing; apt-get install openssh-server)"
    if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
        try:  # sshd running as root insists on its privilege separation directory
            Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot create /run/sshd for sshd: {exc}"
    return None


def write_keypair(private_path: Path) -> str:
    """Write a new unencrypted ed25519 key in OpenSSH format; return the public key line."""
    key = Ed25519PrivateKey.generate()
    private_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    private_path.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def known_hosts_line(port: int, public_key: str) -> str:
    return f"[{HOST}]:{port} {public_key}\n"


def _children(pid: int) -> list[int]:
    """All descendants of `pid`, deepest first, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may contain spaces
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found[::-1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class _BindFailed(RuntimeError):
    pass


class SSHServer:
    """One sshd with its keys and config under `root`; start/stop/restart at will."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = HOST
        self.username = getpass.getuser()
        self.port = free_port()
        self.host_key_path = root / "ssh_host_ed25519_key"
        self.client_key_dir = root / "keys"
        self.client_key_path = self.client_key_dir / "id_ed25519"
        self.known_hosts_path = root / "known_hosts"
        self.config_path = root / "sshd_config"
        self.log_path = root / "sshd.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False

        self.client_key_dir.mkdir(parents=True, exist_ok=True)
        self.host_public_key = write_keypair(self.host_key_path)
        (root / "authorized_keys").write_text(write_keypair(self.client_key_path) + "\n")
        self.known_hosts_path.write_text(known_hosts_line(self.port, self.host_public_key))
        self._write_config()

    def _write_config(self) -> None:
        self.config_path.write_text(
            f"Port {self.port}\n"
            f"ListenAddress {HOST}\n"
            f"HostKey {self.host_key_path}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\n"
            "StrictModes no\n"  # the temp dir's permissions are not sshd's business here
            "UseDNS no\n"
            "LogLevel ERROR\n"
            "Subsystem sftp internal-sftp\n"
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start sshd and wait until it answers with an SSH banner.

        The first start may lose the race for the free port to another
        process; it then moves to a new port. Restarts keep the port, since
        clients hold targets that name it.
        """
        if self.running:
            return
        for _ in range(3):
            try:
                self._start(timeout)
                self.started = True
                return
            except _BindFailed:
                if self.started:
                    raise
                self.port = free_port()
                self.known_hosts_path.write_text(known_hosts_line(self.port, self.host_public_key))
                self._write_config()
        raise RuntimeError("sshd could not bind a free port")

    def _start(self, timeout: float) -> None:
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                log_tail = self.log_path.read_bytes()[log_start:][-2000:].decode(errors="replace")
                if "Cannot bind" in log_tail or "Address already in use" in log_tail:
                    raise _BindFailed(log_tail)
                raise RuntimeError(f"sshd exited at start: {log_tail}")
            if self._answers():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"sshd did not answer within {timeout}s on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                return sock.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def drop_sessions(self) -> None:
        """Kill every client connection's processes; the listener keeps running."""
        if self.process is not None:
            self._kill(_children(self.process.pid))

    def freeze_sessions(self) -> None:
        """SIGSTOP every client connection's processes: a host that hangs, not one that is down.

        Undo with `drop_sessions()` (SIGKILL works on stopped processes) or `stop()`.
        """
        if self.process is not None:
            for pid in _children(self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)

    def stop(self) -> None:
        """Kill sshd and all its sessions at once (SIGKILL), like a host going down."""
        if self.process is None:
            return
        self.drop_sessions()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @staticmethod
    def _kill(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
