"""Webhook delivery against a local receiver: payload, signature, retries, never blocking."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from tests.webhook_receiver import Receiver
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.ingest.sync_service import SyncService
from training_platform.live.diagnostics import PlatformDiagnostics
from training_platform.live.pipeline import LivePipeline
from training_platform.live.webhooks import WebhookNotifier
from training_platform.settings import Settings


def notifier(url: str, **options: Any) -> WebhookNotifier:
    return WebhookNotifier(url, **{"attempts": 4, "timeout": 5.0, "backoff": 0.01, **options})


def test_a_payload_is_posted_as_signed_json(receiver: Receiver) -> None:
    hook = notifier(receiver.url, secret="k3y")
    try:
        assert hook.notify({"event": "anomaly", "step": 3, "message": "kl 5.0 > 1"})
        assert receiver.wait_for(1)
    finally:
        hook.close()

    headers, body = receiver.requests[0]
    assert json.loads(body) == {"event": "anomaly", "step": 3, "message": "kl 5.0 > 1"}
    assert headers["Content-Type"] == "application/json"
    expected = hmac.new(b"k3y", body, hashlib.sha256).hexdigest()
    assert headers["X-Platform-Signature"] == f"sha256={expected}"


def test_server_errors_are_retried_until_one_succeeds(receiver: Receiver) -> None:
    receiver.statuses = [500, 503, 200]
    hook = notifier(receiver.url)
    try:
        hook.notify({"n": 1})
        assert receiver.wait_for(3)
        hook.notify({"n": 2})  # delivered after the first, in order
        assert receiver.wait_for(4)
    finally:
        hook.close()

    assert [p["n"] for p in receiver.payloads()] == [1, 1, 1, 2]
    assert (hook.stats.delivered, hook.stats.failed) == (2, 0)


def test_delivery_gives_up_after_its_attempts_and_does_not_retry_a_refusal(
    receiver: Receiver,
) -> None:
    receiver.statuses = [500, 500, 500, 400]
    hook = notifier(receiver.url, attempts=3)
    try:
        hook.notify({"n": 1})
        hook.notify({"n": 2})  # 400: the receiver will never take it
        hook.notify({"n": 3})
        assert receiver.wait_for(5)
    finally:
        hook.close()

    assert [p["n"] for p in receiver.payloads()] == [1, 1, 1, 2, 3]
    assert (hook.stats.delivered, hook.stats.failed) == (1, 2)


def test_notify_never_waits_for_the_receiver_and_the_queue_is_bounded(
    receiver: Receiver,
) -> None:
    receiver.release.clear()  # the receiver holds every request until released
    hook = notifier(receiver.url, queue_size=2)
    try:
        first = hook.notify({"n": 0})
        assert receiver.arrived.wait(10)  # in flight, and hanging
        # Two fit in the queue, the next is dropped: none of these calls waits.
        queued = [hook.notify({"n": n}) for n in (1, 2, 3)]
        receiver.release.set()
        assert receiver.wait_for(3)
    finally:
        hook.close()

    assert first and queued == [True, True, False]
    assert hook.stats.dropped == 1
    assert [p["n"] for p in receiver.payloads()] == [0, 1, 2]


def test_an_unreachable_receiver_costs_ingestion_nothing(
    session_factory: sessionmaker[Session], settings: Settings, metrics_dir: Path
) -> None:
    hook = notifier("http://127.0.0.1:9/unreachable", attempts=2)
    pipeline = LivePipeline(
        queue_size=10,
        max_message_bytes=1 << 20,
        diagnostics=PlatformDiagnostics(session_factory, AnomalyConfig()),
        webhook=hook,
    )
    service = SyncService(session_factory, settings, listener=pipeline)
    with (metrics_dir / "run1_metrics.jsonl").open("wb") as handle:
        handle.write(encode_record(build_record(0, {"kl": {"mean": 9.0}}, timestamp=1.0)))
    try:
        assert service.sync_job("run1").result.new_metrics == 1
    finally:
        hook.close()


def test_each_new_anomaly_is_posted_once_across_a_restart(
    receiver: Receiver,
    session_factory: sessionmaker[Session],
    settings: Settings,
    metrics_dir: Path,
) -> None:
    path = metrics_dir / "run1_metrics.jsonl"

    def server_process() -> tuple[SyncService, WebhookNotifier]:
        hook = notifier(receiver.url)
        pipeline = LivePipeline(
            queue_size=10,
            max_message_bytes=1 << 20,
            diagnostics=PlatformDiagnostics(session_factory, AnomalyConfig()),
            webhook=hook,
        )
        return SyncService(session_factory, settings, listener=pipeline), hook

    def write(steps: range) -> None:
        with path.open("ab") as handle:
            for step in steps:
                handle.write(
                    encode_record(build_record(step, {"kl": {"mean": 4.0}}, timestamp=1.0))
                )

    write(range(5))
    service, hook = server_process()
    service.sync_job("run1")
    assert receiver.wait_for(1)
    hook.close()
    write(range(5, 10))  # the explosion goes on while the server restarts
    service, hook = server_process()
    service.sync_job("run1")
    hook.close()

    (payload,) = receiver.payloads()
    assert payload["event"] == "anomaly" and payload["job_id"] == "run1"
    assert (payload["step"], payload["type"], payload["source"]) == (0, "kl_explosion", "platform")
    assert payload["severity"] == "critical" and "kl.mean" in payload["message"]
