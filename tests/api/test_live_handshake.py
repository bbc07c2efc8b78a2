"""The live WebSocket's handshake and refusals: Origin, token, parameters, sizes, SSH jobs."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from tests.api.live_support import (
    append_steps,
    close_code,
    has_step,
    live_server,
    live_settings,
    metric_steps,
    open_ws,
    receive,
    receive_until,
)
from tests.fixtures_sshd import SSHD
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"


def refusal(error: pytest.ExceptionInfo[InvalidStatus]) -> tuple[int, dict[str, str]]:
    response = error.value.response
    return response.status_code, json.loads(response.body or b"{}")


def test_a_foreign_origin_is_refused_before_accept(settings: Settings, run1: Path) -> None:
    allowed = live_settings(settings, ws_allowed_origins=["https://dash.example"])
    with live_server(allowed) as server:
        with pytest.raises(InvalidStatus) as error:
            open_ws(server.ws_url(LIVE), origin=Origin("https://evil.example"))
        status, body = refusal(error)
        assert status == 403 and body["code"] == "forbidden_origin"
        assert "evil.example" in body["detail"]

        for origin in ("https://dash.example", f"http://127.0.0.1:{server.port}"):
            with open_ws(server.ws_url(LIVE), origin=Origin(origin)) as ws:
                assert receive(ws)["type"] == "status"  # listed, and same-origin
        with open_ws(server.ws_url(LIVE)) as ws:  # no Origin: not a browser
            assert receive(ws)["type"] == "status"


def test_a_missing_or_wrong_token_is_refused_when_one_is_configured(
    settings: Settings, run1: Path
) -> None:
    with live_server(live_settings(settings, api_token="s3cret")) as server:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(InvalidStatus) as error:
                open_ws(server.ws_url(LIVE), additional_headers=headers)
            status, body = refusal(error)
            assert status == 401 and body["code"] == "unauthorized"

        bearer = {"Authorization": "Bearer s3cret"}
        with open_ws(server.ws_url(LIVE), additional_headers=bearer) as ws:
            assert receive(ws)["type"] == "status"
        with open_ws(server.ws_url(f"{LIVE}?token=s3cret")) as ws:  # browsers cannot set headers
            assert receive(ws)["type"] == "status"


@pytest.mark.parametrize(
    ("path", "code", "words"),
    [
        ("/api/monitoring/nope/live", "job_not_found", "not found"),
        ("/api/monitoring/bad%20id/live", "invalid_parameter", "invalid job id"),
        (f"{LIVE}?since_step=-1", "invalid_parameter", "since_step"),
        (f"{LIVE}?since_step=abc", "invalid_parameter", "since_step"),
        (f"{LIVE}?since_step=99999999999999999999", "invalid_parameter", "since_step"),
        (f"{LIVE}?sinse_step=1", "invalid_parameter", "unknown parameter"),
        (f"{LIVE}?since_step=1&since_step=2", "invalid_parameter", "more than once"),
    ],
)
def test_bad_requests_get_an_error_message_and_a_policy_close(
    settings: Settings, run1: Path, path: str, code: str, words: str
) -> None:
    # An unknown but valid job id is waited for (briefly here) before it is refused.
    waiting = live_settings(settings, live_job_wait=0.3)
    with live_server(waiting) as server, open_ws(server.ws_url(path)) as ws:
        error = receive(ws)
        if code == "job_not_found":
            assert error == {"type": "waiting", "job_id": "nope", "timeout": 0.3}
            error = receive(ws)
        close, reason = close_code(ws)

    assert error["type"] == "error" and error["code"] == code
    assert words in error["detail"]
    assert close == 1008 and words in reason


@pytest.mark.parametrize("checked_by", ["uvicorn", "app"])
def test_an_oversized_client_message_closes_with_1009(
    settings: Settings, run1: Path, checked_by: str
) -> None:
    small = live_settings(settings, live_max_client_message_bytes=64)
    # The server's protocol limit comes from the same setting; without it the
    # app still checks (another ASGI server, or one configured by hand).
    overrides = {} if checked_by == "uvicorn" else {"ws_max_size": 1 << 20}
    with live_server(small, **overrides) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"
        ws.send("x" * 65)
        code, reason = close_code(ws)

    assert code == 1009 and "64 bytes" in reason


def test_a_record_over_the_message_cap_is_sent_truncated(settings: Settings, run1: Path) -> None:
    capped = live_settings(settings, live_max_message_bytes=1024)
    with live_server(capped) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"
        append_steps(run1, [0], extra={f"metric/{i}": float(i) for i in range(200)})
        append_steps(run1, [1])
        messages = receive_until(ws, has_step(1))

    big, small = (m for m in messages if m["type"] == "metric")
    assert big == {
        "type": "metric",
        "data": {
            "step": 0,
            "timestamp": 1_700_000_000.0,
            "timestamp_iso": "2023-11-14T22:13:20.000Z",
        },
        "truncated": True,
    }
    assert "truncated" not in small and small["data"]["reward"]["mean"] == 0.1
    assert small["data"]["timestamp_iso"] == "2023-11-14T22:13:21.000Z"  # a second later


def test_an_ssh_job_streams_live_from_a_real_sshd(settings: Settings, sshd: SSHD) -> None:
    trusting = live_settings(
        settings,
        ssh_key_dir=sshd.key_dir,
        ssh_known_hosts=sshd.known_hosts_path,
        ssh_timeout=5.0,
    )
    remote = sshd.remote_dir / "remote1_metrics.jsonl"
    append_steps(remote, range(3))
    body = sshd.job_body()
    with live_server(trusting) as server:
        created = httpx.post(server.http_url("/api/jobs"), json=body, timeout=30)
        assert created.status_code == 201, created.text
        sync = httpx.post(server.http_url("/api/monitoring/remote1/metrics/sync"), timeout=30)
        assert sync.json()["new_metrics"] in (0, 3)  # 0: the background poll was first
        url = server.ws_url("/api/monitoring/remote1/live?since_step=0")
        with open_ws(url) as ws:
            first = receive_until(ws, has_step(2))
            append_steps(remote, range(3, 8))
            rest = receive_until(ws, has_step(8), after=lambda: append_steps(remote, [8]))

    # Every step after 0 once, in order. Step 0 comes too when the first sync was still
    # committing as the client subscribed (the POST answered a background sync's
    # progress under load): then it is news to the client, and sent once as well.
    assert metric_steps(first + rest) in (list(range(1, 9)), list(range(9)))
