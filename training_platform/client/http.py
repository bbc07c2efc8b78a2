"""The HTTP side of the client: stdlib `urllib` (the trainer-side install has nothing
else), a bearer token, retries with backoff on connection errors and 5xx."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from training_platform.client.errors import ServerUnavailableError, error_from_answer

RETRIES: Final = 3  # tries after the first, for connection errors and 5xx answers
BACKOFF: Final = 0.5  # seconds before the first retry, doubled each time
_RETRIED_STATUSES: Final = frozenset({500, 502, 503, 504})
Query = Mapping[str, Any]


def query_string(params: Query) -> str:
    """`params` without the None values; a list or tuple repeats its name."""
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        if value is None:
            continue
        values: Sequence[Any] = value if isinstance(value, list | tuple) else [value]
        pairs.extend((name, _text(one)) for one in values)
    return urllib.parse.urlencode(pairs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Http:
    """GETs against one server, each retried a few times when the server is away."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = RETRIES,
        backoff: float = BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep

    def get(self, path: str, params: Query | None = None, *, what: str) -> tuple[bytes, Any]:
        """The body and headers of a 200 answer to `path`; a `ClientError` otherwise."""
        url = f"{self.url}{path}"
        if params and (query := query_string(params)):
            url = f"{url}?{query}"
        request = urllib.request.Request(url, headers=self._headers())
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    return answer.read(), answer.headers
            except urllib.error.HTTPError as error:
                body = error.read()
                if error.code in _RETRIED_STATUSES and not last and not _final(body):
                    self.sleep(delay)
                    delay *= 2
                    continue
                raise error_from_answer(error.code, _json_or_text(body), what) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                if last:
                    reason = getattr(error, "reason", error)
                    raise ServerUnavailableError(
                        f"{what}: cannot reach {self.url} ({reason}) after {self.retries + 1} tries"
                    ) from None
                self.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # the loop returns or raises

    def get_json(self, path: str, params: Query | None = None, *, what: str) -> Any:
        body, _ = self.get(path, params, what=what)
        return json.loads(body)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "*/*", "User-Agent": "training-platform-client"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")[:500]


def _final(body: bytes) -> bool:
    """A 5xx that trying again cannot change: an extra not installed (501 is not
    retried anyway; kept for a proxy answering 503 with our code)."""
    answer = _json_or_text(body)
    return isinstance(answer, dict) and answer.get("code") == "extra_not_installed"
