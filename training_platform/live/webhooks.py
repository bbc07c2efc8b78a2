"""A JSON POST per new anomaly to a configured URL, off the ingestion path.

`notify` only puts the payload on a bounded queue and returns: ingestion
never waits for the receiver. One daemon thread delivers in order, retrying
each POST a few times with exponential backoff (network errors, 5xx, 408,
429); a payload that still fails, or that finds the queue full, is dropped
and logged: an alerting side channel must not grow without bound while its
receiver is down. The stdlib client keeps the server free of another HTTP
dependency.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from training_platform import __version__

logger = logging.getLogger(__name__)

QUEUE_SIZE: Final = 1000
_RETRY_STATUSES: Final = frozenset({408, 429})
_STOP: Final = object()


@dataclass
class WebhookStats:
    delivered: int = 0
    failed: int = 0  # gave up after every attempt, or refused outright (4xx)
    dropped: int = 0  # the queue was full
    attempts: int = 0


class WebhookNotifier:
    """Delivers payloads to `url` from a background thread; `close()` flushes and stops it."""

    def __init__(
        self,
        url: str,
        *,
        secret: str | None = None,
        attempts: int = 4,
        timeout: float = 5.0,
        backoff: float = 1.0,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.url = url
        self._secret = secret.encode() if secret else None
        self.attempts = max(1, attempts)
        self.timeout = timeout
        self.backoff = backoff
        self.stats = WebhookStats()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook", daemon=True)
        self._thread.start()

    def notify(self, payload: Mapping[str, Any]) -> bool:
        """Queue one POST; False (and logged) when the queue is full. Never blocks."""
        try:
            self._queue.put_nowait(dict(payload))
        except queue.Full:
            self.stats.dropped += 1
            logger.warning("webhook queue full: dropped a notification for %s", self.url)
            return False
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued, within `timeout`; then abandon the rest and stop."""
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():  # the receiver is down: give up on the backlog
            self._stopping.set()
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_STOP)
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP or self._stopping.is_set():
                    return
                assert isinstance(item, dict)
                self._deliver(item)
            except Exception:  # a bug here must not kill the thread for good
                logger.exception("webhook delivery failed unexpectedly")
            finally:
                self._queue.task_done()

    def _deliver(self, payload: dict[str, Any]) -> None:
        body = orjson.dumps(payload)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"training-platform/{__version__}",
        }
        if self._secret is not None:
            digest = hmac.new(self._secret, body, hashlib.sha256).hexdigest()
            headers["X-Platform-Signature"] = f"sha256={digest}"
        for attempt in range(self.attempts):
            if attempt and self._stopping.wait(self.backoff * 2 ** (attempt - 1)):
                return  # shutting down: abandon the retries
            self.stats.attempts += 1
            error = self._post(body, headers)
            if error is None:
                self.stats.delivered += 1
                return
            retry, reason = error
            if not retry:
                break
            logger.info("webhook POST to %s failed (%s); attempt %d", self.url, reason, attempt + 1)
        self.stats.failed += 1
        logger.warning("webhook POST to %s given up: %s", self.url, payload.get("type"))

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[bool, str] | None:
        """None on success, else (worth retrying, why)."""
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read(1 << 16)
                return None
        except urllib.error.HTTPError as exc:
            return exc.code >= 500 or exc.code in _RETRY_STATUSES, f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:  # refused, timed out, DNS, bad response
            return True, str(exc) or type(exc).__name__
