"""`POST /api/jobs`: which local directories and SSH hosts may be registered (issue 23 §4).

Before, any directory the server could read registered (`/proc/self/fd` -> 201)
and any text passed as an SSH host. `PLATFORM_ALLOWED_JOB_ROOTS` confines
local directories (symlinks resolved); a host must be a host name or an address.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from training_platform.api.main import create_app
from training_platform.ingest.host_names import check_ssh_host
from training_platform.settings import Settings


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    root = tmp_path / "allowed"
    (root / "runs").mkdir(parents=True)
    return root


@pytest.fixture
def confined(settings: Settings, allowed: Path) -> Iterator[TestClient]:
    """An app that registers local directories under `allowed` only."""
    confining = settings.model_copy(update={"allowed_job_roots": [allowed.resolve()]})
    with TestClient(create_app(confining)) as client:
        yield client


def register(client: TestClient, job_id: str, **source: object) -> tuple[int, dict]:
    response = client.post("/api/jobs", json={"job_id": job_id, **source})
    return response.status_code, response.json()


# --- local directories -------------------------------------------------------------


def test_without_allowed_roots_any_readable_directory_registers_as_before(
    client: TestClient,
) -> None:
    status, _ = register(client, "anywhere", metrics_dir="/proc/self/fd")
    assert status == 201  # the documented default: no confinement


@pytest.mark.parametrize(
    "where",
    ["/proc/self/fd", "/", "{tmp}", "{allowed}/../outside", "{allowed}/link_out"],
)
def test_a_directory_outside_the_allowed_roots_is_refused_naming_the_setting(
    confined: TestClient, allowed: Path, tmp_path: Path, where: str
) -> None:
    (tmp_path / "outside").mkdir()
    (allowed / "link_out").symlink_to(tmp_path / "outside", target_is_directory=True)
    path = where.format(tmp=tmp_path, allowed=allowed)

    status, body = register(confined, "escape", metrics_dir=path)

    assert (status, body["code"]) == (422, "invalid_source")
    assert "PLATFORM_ALLOWED_JOB_ROOTS" in body["detail"]
    assert str(tmp_path / "outside") not in body["detail"]  # where a link leads stays unsaid
    assert confined.get("/api/jobs").json() == {"jobs": []}


def test_a_missing_directory_outside_the_roots_is_refused_for_the_root_not_its_absence(
    confined: TestClient, tmp_path: Path
) -> None:
    # Saying "not a directory" out there would tell a caller what exists outside.
    status, body = register(confined, "probe", metrics_dir=str(tmp_path / "nope"))
    assert (status, body["code"]) == (422, "invalid_source")
    assert "PLATFORM_ALLOWED_JOB_ROOTS" in body["detail"]


def test_a_directory_under_an_allowed_root_registers_even_through_a_link_inside_it(
    confined: TestClient, allowed: Path
) -> None:
    (allowed / "alias").symlink_to(allowed / "runs", target_is_directory=True)

    assert register(confined, "inside", metrics_dir=str(allowed / "runs"))[0] == 201
    status, body = register(confined, "aliased", metrics_dir=str(allowed / "alias"))
    assert status == 201
    assert body["metrics_dir"] == str((allowed / "runs").resolve())


def test_the_metrics_directory_is_always_allowed(confined: TestClient, metrics_dir: Path) -> None:
    assert register(confined, "local", metrics_dir=str(metrics_dir))[0] == 201


def test_a_rollout_directory_outside_the_allowed_roots_is_refused(
    confined: TestClient, allowed: Path, tmp_path: Path
) -> None:
    status, body = register(
        confined, "verl", metrics_dir=str(allowed / "runs"), rollout_dir=str(tmp_path)
    )
    assert (status, body["code"]) == (422, "invalid_source")
    assert "rollout_dir" in body["detail"] and "PLATFORM_ALLOWED_JOB_ROOTS" in body["detail"]
    inside = str(allowed / "rollouts")  # may not exist yet: verl makes it at its first dump
    status, _ = register(confined, "verl", metrics_dir=str(allowed / "runs"), rollout_dir=inside)
    assert status == 201


@pytest.mark.parametrize("field", ["metrics_dir", "rollout_dir"])
@pytest.mark.parametrize("roots", ["none", "some"])
def test_a_symlink_loop_is_422_not_500(
    settings: Settings, allowed: Path, field: str, roots: str
) -> None:
    (allowed / "loop").symlink_to(allowed / "loop")
    if roots == "some":
        settings = settings.model_copy(update={"allowed_job_roots": [allowed.resolve()]})
    source = {"metrics_dir": str(allowed / "runs"), field: str(allowed / "loop")}
    with TestClient(create_app(settings)) as client:
        status, body = register(client, "loop", **source)
    assert (status, body["code"]) == (422, "invalid_source")
    assert field in body["detail"]


def test_the_setting_is_a_comma_separated_list_of_resolved_paths(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    later = tmp_path / "not_yet"  # a root may be made after the server starts
    settings = Settings(PLATFORM_ALLOWED_JOB_ROOTS=f" {tmp_path / 'link'} , {later},")
    assert settings.allowed_job_roots == [(tmp_path / "real").resolve(), later.resolve()]
    assert Settings().allowed_job_roots == []


# --- SSH hosts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "stored"),
    [
        ("gpu-node-3", "gpu-node-3"),
        ("GPU-Node-3.Cluster.example.com", "GPU-Node-3.Cluster.example.com"),
        ("gpu.example.com.", "gpu.example.com."),
        ("trainer_1", "trainer_1"),  # compose service names; nothing ssh or a shell reads
        ("a" * 63 + ".example.com", "a" * 63 + ".example.com"),
        ("127.0.0.1", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("::1", "::1"),
        ("2001:db8::7", "2001:db8::7"),
        ("[2001:db8::7]", "2001:db8::7"),  # bracketed as in URLs: paramiko wants it bare
        ("fe80::1%eth0", "fe80::1%eth0"),
    ],
)
def test_host_names_and_addresses_are_accepted(host: str, stored: str) -> None:
    assert check_ssh_host(host) == stored


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("", "empty"),
        ("gpu node", "not a host name"),
        ("-oProxyCommand=touch /tmp/pwned", "not a host name"),
        ("-gpu", "not a host name"),
        ("gpu-", "not a host name"),
        ("gpu;id", "not a host name"),
        ("$(id)", "not a host name"),
        ("`id`", "not a host name"),
        ("gpu|cat", "not a host name"),
        ("gpu\nnode", "not a host name"),
        ("gpu\x00node", "not a host name"),
        ("alice@gpu", "'username'"),
        ("gpu:2222", "'port'"),
        ("[gpu]", "not an IPv6 address"),
        ("[::1", "not a host name"),
        ("a..b", "not a host name"),
        (".gpu", "not a host name"),
        ("a" * 64 + ".example.com", "not a host name"),
        ("a." * 127 + "com", "longer than 253"),
        ("127.1", "not a host name"),
        ("1.2.3.256", "not a host name"),
        ("fe80::1%eth0;id", "not a host name"),
        ("gpü.example.com", "ASCII"),
    ],
)
def test_anything_else_is_refused_with_the_reason(host: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_ssh_host(host)


@pytest.mark.parametrize(
    "host",
    ["-oProxyCommand=touch /tmp/pwned", "gpu node", "alice@gpu", "gpu:22", "$(id)", "a\x00b"],
)
def test_a_bad_ssh_host_is_422_naming_the_field_and_registers_nothing(
    client: TestClient, settings: Settings, host: str
) -> None:
    key = settings.ssh_key_dir / "id_ed25519"
    key.write_text("not used: the host is refused first")
    ssh = {"host": host, "username": "alice", "key_path": str(key), "remote_dir": "/r"}

    status, body = register(client, "remote", ssh=ssh)

    assert (status, body["code"]) == (422, "validation_error")
    assert [error["loc"] for error in body["detail"]] == [["body", "ssh", "host"]]
    assert client.get("/api/jobs").json() == {"jobs": []}


def test_a_good_ssh_host_still_registers_when_it_is_unreachable(
    client: TestClient, settings: Settings
) -> None:
    key = settings.ssh_key_dir / "id_ed25519"
    key.write_text("unused: nothing listens there")
    with socket.socket() as sock:  # a port nobody listens on: refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ssh = {
        "host": "[::1]" if socket.has_ipv6 else "127.0.0.1",
        "port": port,
        "username": "alice",
        "key_path": str(key),
        "remote_dir": "/r",
    }

    status, body = register(client, "remote", ssh=ssh)

    assert status == 201, body
    assert body["ssh"]["host"] in ("::1", "127.0.0.1")
    assert body["last_sync_error"]
