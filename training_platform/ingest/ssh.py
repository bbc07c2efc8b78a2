"""SSH connections for reading a job's files on a remote host (paramiko + SFTP).

Security posture, on purpose and not configurable per job:

- host keys are checked against ``~/.ssh/known_hosts`` of the user the server
  runs as plus the configured extra files; an unknown host and a changed host
  key are both refused (`HostKeyError`), never trusted on first use;
- authentication is by private key only: no agent, no keys found by looking
  around, no passwords (nothing secret is ever stored by the platform);
- the key must lie inside the configured key directory (`resolve_key_path`), so
  an API caller cannot make the server read arbitrary files as "keys";
- every network step has a timeout, so a dead host costs seconds, not a hung
  worker thread.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from training_platform.errors import HostKeyError, InvalidSourceError, MetricsSourceError

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class SSHTarget:
    """Where and as whom to connect. Build it with keyword arguments."""

    host: str
    port: int = 22
    username: str
    key_path: Path
    known_hosts_files: tuple[Path, ...] = ()  # besides ~/.ssh/known_hosts of the current user
    timeout: float = 10.0

    @property
    def address(self) -> str:
        """``user@host:port``, for messages."""
        return f"{self.username}@{self.host}:{self.port}"


def resolve_key_path(key_path: str | Path, key_dir: Path) -> Path:
    """Return the real path of `key_path`, which must be a file inside `key_dir`.

    A relative `key_path` is taken relative to `key_dir`. Symlinks and ``..``
    are resolved before the check, so neither can lead outside the directory.
    Containment is checked before existence, so the error does not reveal
    which files exist elsewhere. Raises `InvalidSourceError`.
    """
    root = Path(key_dir).expanduser().resolve()
    candidate = Path(key_path).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    resolved = candidate.resolve()
    if not resolved.is_relative_to(root):
        raise InvalidSourceError(f"key_path {str(key_path)!r} is outside the key directory {root}")
    if not resolved.is_file():
        raise InvalidSourceError(f"key_path {str(key_path)!r} is not a file in {root}")
    return resolved


class _TransientSSHError(MetricsSourceError):
    """The host could not be reached or dropped us; trying again may help."""


class _RefuseUnknownHost(paramiko.RejectPolicy):  # type: ignore[misc]  # paramiko: untyped
    """RejectPolicy that says which host, which key and where we looked."""

    def __init__(self, target: SSHTarget) -> None:
        self.target = target

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        files = ", ".join(["~/.ssh/known_hosts", *map(str, self.target.known_hosts_files)])
        raise HostKeyError(
            f"unknown SSH host {self.target.host} port {self.target.port}: its "
            f"{key.get_name()} host key {key.fingerprint} is not in {files}; refusing to "
            "connect. Verify the fingerprint, then add the key (e.g. ssh-keyscan -p "
            f"{self.target.port} {self.target.host}) to one of those files."
        )


def _load_private_key(path: Path) -> paramiko.PKey:
    try:
        return paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        raise MetricsSourceError(
            f"private key {path} is protected by a passphrase; the platform needs a key "
            "it can use unattended"
        ) from None
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise MetricsSourceError(f"cannot load private key {path}: {exc}") from None


def _open_sftp(transport: paramiko.Transport, timeout: float) -> paramiko.SFTPClient:
    channel = transport.open_session(timeout=timeout)
    channel.settimeout(timeout)  # every later SFTP request waits at most `timeout`
    # paramiko waits for the subsystem reply without a timeout: a watchdog closes
    # the transport if the server never answers, which wakes the wait up.
    watchdog = threading.Timer(timeout, transport.close)
    watchdog.daemon = True
    watchdog.start()
    try:
        channel.invoke_subsystem("sftp")
    finally:
        watchdog.cancel()
    return paramiko.SFTPClient(channel)


def connect_sftp(target: SSHTarget) -> tuple[paramiko.SSHClient, paramiko.SFTPClient]:
    """Connect, verify the host key, authenticate with the key, open SFTP.

    Raises `HostKeyError` (unknown or changed host key), `MetricsSourceError`
    for problems another try will not fix (authentication, key file,
    known_hosts file), and a transient `MetricsSourceError` subclass for
    network failures, which `SSHConnection` retries.
    """
    client = paramiko.SSHClient()
    try:
        client.load_system_host_keys()  # ~/.ssh/known_hosts; silently absent is fine
        for path in target.known_hosts_files:
            try:
                client.load_host_keys(str(path))
            except (OSError, paramiko.SSHException) as exc:
                raise MetricsSourceError(f"cannot read known_hosts file {path}: {exc}") from None
        client.set_missing_host_key_policy(_RefuseUnknownHost(target))
        client.connect(
            target.host,
            port=target.port,
            username=target.username,
            pkey=_load_private_key(target.key_path),
            look_for_keys=False,
            allow_agent=False,
            timeout=target.timeout,
            banner_timeout=target.timeout,
            auth_timeout=target.timeout,
            channel_timeout=target.timeout,
        )
        transport = client.get_transport()
        if transport is None:  # connect() succeeded, so this is not expected
            raise _TransientSSHError(f"SSH connection to {target.address} has no transport")
        return client, _open_sftp(transport, target.timeout)
    except BaseException as exc:
        client.close()
        raise _convert_connect_error(exc, target) from None


def _convert_connect_error(exc: BaseException, target: SSHTarget) -> BaseException:
    if isinstance(exc, MetricsSourceError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostKeyError(
            f"SSH host key of {target.host} port {target.port} has CHANGED: it presented "
            f"{exc.key.get_name()} {exc.key.fingerprint}, known_hosts has "
            f"{exc.expected_key.get_name()} {exc.expected_key.fingerprint}; refusing to "
            "connect (the host was reinstalled, or someone is intercepting the connection)"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return MetricsSourceError(
            f"SSH authentication failed for {target.address} with key {target.key_path}: "
            f"{exc} (is its public key in the remote authorized_keys?)"
        )
    if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
        return _TransientSSHError(f"cannot connect to SSH host {target.address}: {_describe(exc)}")
    return exc


def check_ssh_connection(target: SSHTarget) -> None:
    """Connect and open SFTP once, then disconnect; raise with a clear message if not.

    Raises `HostKeyError` for an unknown or changed host key and
    `MetricsSourceError` for everything else (unreachable, authentication).
    """
    client, sftp = connect_sftp(target)
    sftp.close()
    client.close()


def _describe(exc: BaseException) -> str:
    """`str(exc)`, or the class name for the exceptions that say nothing (timeouts)."""
    return str(exc) or type(exc).__name__


def _is_transient(exc: BaseException, transport: paramiko.Transport | None) -> bool:
    """Does `exc` from an SFTP operation mean the connection, not the file, failed?"""
    if isinstance(exc, (paramiko.SSHException, EOFError, socket.timeout, ConnectionError)):
        return True
    # SFTP status errors (no such file, permission denied) are OSErrors too; they
    # arrive over a live transport, while a dead transport means the network failed.
    return isinstance(exc, OSError) and (transport is None or not transport.is_active())


class SSHConnection:
    """One SSH connection + SFTP session, kept open and re-established on demand.

    `run(operation)` hands the SFTP client to `operation`; if the connection
    fails during it, the connection is rebuilt and `operation` is run again
    from the start, so operations must be repeatable (readers pass the
    caller's position, never state left by a failed try). Bounded: `attempts`
    fresh connections per call, `backoff`, ``2*backoff``, ... seconds apart,
    then `MetricsSourceError`.
    """

    def __init__(
        self,
        target: SSHTarget,
        *,
        attempts: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        self.target = target
        self.attempts = attempts
        self.backoff = backoff
        self._sleep = sleep
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        # paramiko's SFTP client is not meant for interleaved use from threads.
        self._lock = threading.Lock()

    def run(self, operation: Callable[[paramiko.SFTPClient], T]) -> T:
        with self._lock:
            failed_connects = 0
            while True:
                reused = self._sftp is not None
                try:
                    sftp = self._sftp if self._sftp is not None else self._connect()
                    return operation(sftp)
                except _TransientSSHError as exc:
                    error: BaseException = exc
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    transport = self._client.get_transport() if self._client else None
                    if not _is_transient(exc, transport):
                        raise MetricsSourceError(
                            f"SFTP error on {self.target.address}: {_describe(exc)}"
                        ) from None
                    error = exc
                self._drop()
                if reused:
                    # A kept connection went stale (server restarted, network
                    # blip): reconnect at once; only fresh connects count.
                    logger.info(
                        "SSH connection to %s lost (%s); reconnecting",
                        self.target.address,
                        _describe(error),
                    )
                    continue
                failed_connects += 1
                if failed_connects >= self.attempts:
                    raise MetricsSourceError(
                        f"SSH host {self.target.address} unreachable after "
                        f"{failed_connects} attempts: {_describe(error)}"
                    ) from None
                delay = self.backoff * 2 ** (failed_connects - 1)
                logger.warning(
                    "SSH %s failed (%s); retrying in %.2fs",
                    self.target.address,
                    _describe(error),
                    delay,
                )
                self._sleep(delay)

    def _connect(self) -> paramiko.SFTPClient:
        self._client, self._sftp = connect_sftp(self.target)
        return self._sftp

    def _drop(self) -> None:
        sftp, client = self._sftp, self._client
        self._sftp = self._client = None
        for closeable in (sftp, client):
            if closeable is not None:
                try:
                    closeable.close()
                except Exception:  # closing a broken connection may fail; it is gone anyway
                    logger.debug("error while closing SSH connection", exc_info=True)

    def close(self) -> None:
        with self._lock:
            self._drop()


def sftp_read_at(file: paramiko.SFTPFile, offset: int, size: int) -> bytes:
    """Read up to `size` bytes at `offset` with pipelined SFTP requests.

    A plain `read` sends one 32 KiB request per round trip; `readv` keeps all of
    a chunk's requests in flight at once (faster even on loopback, far more on
    a real network, where every round trip costs a network latency). Asking
    for request-sized pieces and joining them once avoids paramiko's buffer
    growing by repeated concatenation.
    """
    step = file.MAX_REQUEST_SIZE
    if size <= step:
        file.seek(offset)
        data: bytes = file.read(size)
        return data
    end = offset + size
    ranges = [(start, min(step, end - start)) for start in range(offset, end, step)]
    pieces = []
    for (_, wanted), piece in zip(ranges, file.readv(ranges), strict=False):
        pieces.append(piece)
        if len(piece) < wanted:  # end of file: later pieces would not be contiguous
            break
    return b"".join(pieces)
