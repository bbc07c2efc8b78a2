"""Browser-facing exposure: the Host check (DNS rebinding), security headers, and the
WebSocket token kept out of URLs and logs."""

from __future__ import annotations

import base64
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient
from websockets.exceptions import InvalidStatus

from tests.api.live_support import LiveServer, live_server, live_settings, open_ws, receive
from training_platform.api.main import create_app
from training_platform.api.routers.dashboard import DOCS_CSP
from training_platform.api.security import DASHBOARD_CSP, host_allowed
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"


def client_for(settings: Settings, base_url: str) -> TestClient:
    return TestClient(create_app(settings), base_url=base_url)


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8000",
        "http://localhost:8000",
        "http://[::1]:8000",
        "http://10.1.2.3",  # any IP literal: a rebinding page cannot use one
        "http://dash.example.com",  # configured
        "http://a.lab.example",  # configured as *.lab.example
    ],
)
def test_allowed_hosts_are_answered(settings: Settings, base_url: str) -> None:
    configured = settings.model_copy(
        update={"allowed_hosts": ["dash.example.com", "*.lab.example"]}
    )
    with client_for(configured, base_url) as client:
        assert client.get("/api/jobs").status_code == 200


@pytest.mark.parametrize("base_url", ["http://attacker.example", "http://lab.example.evil"])
def test_a_foreign_host_is_refused_without_a_token(settings: Settings, base_url: str) -> None:
    configured = settings.model_copy(update={"allowed_hosts": ["*.lab.example"]})
    with client_for(configured, base_url) as client:
        response = client.get("/api/jobs")
        page = client.get("/")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_host" and "PLATFORM_ALLOWED_HOSTS" in body["detail"]
    assert page.status_code == 400


def test_a_star_turns_the_host_check_off_for_deployments_behind_a_proxy(
    settings: Settings,
) -> None:
    behind_proxy = settings.model_copy(update={"allowed_hosts": ["*"]})
    with client_for(behind_proxy, "http://platform.internal.example") as client:
        assert client.get("/api/jobs").status_code == 200


def test_the_setting_reads_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_ALLOWED_HOSTS", " a.example , *.b.example ,")
    assert Settings().allowed_hosts == ["a.example", "*.b.example"]


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("LOCALHOST:8000", True),
        ("app.localhost", True),
        ("127.0.0.1", True),
        ("[::1]:8000", True),
        ("rebind.attacker.example:8000", False),
        ("", False),
    ],
)
def test_host_rules(header: str, ok: bool) -> None:
    assert host_allowed(header, frozenset({"localhost"})) is ok


def handshake_status(port: int, host: str, origin: str) -> bytes:
    """The status line a WebSocket upgrade with this Host and Origin gets."""
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            (
                f"GET {LIVE} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        response = b""
        while b"\r\n" not in response:
            chunk = sock.recv(4096)
            if not chunk:
                break
            response += chunk
    return response.split(b"\r\n", 1)[0]


def test_a_rebinding_page_cannot_open_the_live_socket(settings: Settings, run1: Path) -> None:
    """Origin equal to Host passes the Origin check; the Host check refuses it."""
    with live_server(settings) as server:
        rebound = "rebind.attacker.example:8000"
        status = handshake_status(server.port, rebound, f"http://{rebound}")
        assert status.startswith(b"HTTP/1.1 400"), status
        # The same page served from this server itself gets in.
        here = f"127.0.0.1:{server.port}"
        assert handshake_status(server.port, here, f"http://{here}").startswith(b"HTTP/1.1 101")


@pytest.mark.parametrize(
    "path", ["/", "/api/jobs", "/healthz", "/api/nowhere", "/static/js/api.js"]
)
def test_responses_carry_the_security_headers(client: TestClient, path: str) -> None:
    headers = client.get(path).headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-frame-options"] == "DENY"
    assert headers["content-security-policy"] == DASHBOARD_CSP
    assert "frame-ancestors 'none'" in DASHBOARD_CSP and "'unsafe-inline'" not in DASHBOARD_CSP


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_keep_their_own_policy(client: TestClient, path: str) -> None:
    headers = client.get(path).headers
    assert headers["content-security-policy"] == DOCS_CSP
    assert headers["x-content-type-options"] == "nosniff"


def _token_protocol(token: str) -> str:
    encoded = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
    return f"training-platform.token.{encoded}"


TOKEN = "s3cr/et+token=="  # characters base64url must carry
QUOTED = quote(TOKEN, safe="")


@pytest.fixture
def secured(settings: Settings, run1: Path) -> Iterator[LiveServer]:
    with live_server(live_settings(settings, api_token=TOKEN)) as server:
        yield server


def test_the_token_travels_as_a_subprotocol(secured: LiveServer) -> None:
    url = secured.ws_url(LIVE)
    with open_ws(url, subprotocols=["training-platform", _token_protocol(TOKEN)]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "training-platform"  # never the token one
        assert receive(ws)["type"] in ("status", "waiting")
    with pytest.raises(InvalidStatus) as refused:
        open_ws(url, subprotocols=["training-platform", _token_protocol("wrong")])  # type: ignore[list-item]
    assert refused.value.response.status_code == 401


def test_a_token_in_the_url_is_scrubbed_from_the_server_log(secured: LiveServer) -> None:
    """`?token=` still works for older clients, but uvicorn's log line must not show it."""
    seen: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("uvicorn.error")
    capture, level = Capture(), logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    try:
        with open_ws(secured.ws_url(f"{LIVE}?token={QUOTED}")) as ws:
            assert receive(ws)["type"] in ("status", "waiting")
        httpx.get(secured.http_url(f"/healthz?token={QUOTED}"), timeout=10)
    finally:
        logger.removeHandler(capture)
        logger.setLevel(level)
    accepted = [line for line in seen if "WebSocket" in line]
    assert accepted, seen
    assert not [line for line in seen if TOKEN in line or QUOTED in line], seen
    assert any("token=***" in line for line in accepted)


def test_http_and_websocket_share_one_host_rule(settings: Settings, run1: Path) -> None:
    with live_server(settings) as server:
        response = httpx.get(
            server.http_url("/api/jobs"), headers={"Host": "rebind.attacker.example"}, timeout=10
        )
        assert response.status_code == 400
        assert response.headers["x-content-type-options"] == "nosniff"
