"""What the API's WebSockets share: handshake checks, parameters, bounded sends, closing.

Before `accept()`: the `Origin` header is checked against the allow-list
(CORS does not apply to WebSocket upgrades, so without this any web page a
user visits could open a stream to a server on their network), then the API
token (a Bearer header, the token subprotocol, or `?token=`). The `Host`
header was checked before that, for HTTP too (`api/security.py`). A refusal
there is an HTTP response (403/401 with the usual JSON error body) where the
server supports it, else a plain close.

After `accept()`: bad parameters and unknown jobs are told as one
``{"type": "error", "code": ..., "detail": ...}`` message followed by a close
with code 1008 (policy violation) and the detail as reason, since a browser's
WebSocket API shows a close reason but never an HTTP body.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from training_platform.api.errors import status_for
from training_platform.api.ws_protocol import protocol_class
from training_platform.callbacks.wire.schema import JOB_ID_PATTERN, MAX_STEP
from training_platform.errors import InvalidParameterError, PlatformError
from training_platform.settings import Settings
from training_platform.store.storable import unstorable_character

logger = logging.getLogger(__name__)

CLOSE_NORMAL: Final = 1000
CLOSE_POLICY: Final = 1008  # bad parameters, unknown job
CLOSE_TOO_BIG: Final = 1009  # a client message over the size cap
CLOSE_INTERNAL: Final = 1011
CLOSE_TRY_AGAIN: Final = 1013  # too slow to keep up: reconnect (with since_step)
# Browsers cannot set headers on a WebSocket handshake, and a token in the URL
# lands in access logs: they offer ["training-platform",
# "training-platform.token.<base64url of the token>"] as subprotocols instead;
# the server answers with "training-platform".
SUBPROTOCOL: Final = "training-platform"
TOKEN_SUBPROTOCOL_PREFIX: Final = "training-platform.token."
_MAX_REASON_BYTES: Final = 123  # RFC 6455: a close frame's reason fits in 123 bytes
_CLOSE_TIMEOUT: Final = 5.0


def uvicorn_ws_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn options that carry the WebSocket settings (pings, size cap, deflate).

    Heartbeats are WebSocket pings, which only the server protocol can send:
    pass these to `uvicorn.run` / `uvicorn.Config` so dead clients are noticed.
    `ws` is uvicorn's protocol with bounded closes (`ws_protocol`): a client
    that stopped reading is reset `live_send_timeout` seconds after its close,
    rather than holding its buffers (and a graceful shutdown) for ever.
    """
    return {
        "ws": protocol_class(settings.live_send_timeout),
        "ws_ping_interval": settings.ws_ping_interval or None,
        "ws_ping_timeout": settings.ws_ping_timeout,
        "ws_max_size": settings.live_max_client_message_bytes,
        "ws_per_message_deflate": settings.ws_per_message_deflate,
    }


class ClientGone(Exception):
    """The client disconnected, or is too slow to take a message within the send timeout."""


def origin_allowed(origin: str, host: str | None, allowed: list[str]) -> bool:
    """A browser page's origin may connect if listed, or if it is this server itself."""
    origin = origin.strip().lower().rstrip("/")
    if "*" in allowed or origin in allowed:
        return True
    netloc = urlsplit(origin).netloc
    return bool(netloc) and host is not None and netloc == host.strip().lower()


def subprotocol_token(websocket: WebSocket) -> str:
    """The token a browser sent as a `training-platform.token.<base64url>` subprotocol."""
    for offered in websocket.scope.get("subprotocols", []):
        if offered.startswith(TOKEN_SUBPROTOCOL_PREFIX):
            encoded = offered[len(TOKEN_SUBPROTOCOL_PREFIX) :]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return ""
    return ""


def chosen_subprotocol(websocket: WebSocket) -> str | None:
    """`training-platform` when the client offered it (a browser that offered
    subprotocols fails the connection unless one is echoed); never the token."""
    return SUBPROTOCOL if SUBPROTOCOL in websocket.scope.get("subprotocols", []) else None


def token_matches(websocket: WebSocket, expected: str) -> bool:
    """`Authorization: Bearer <token>`; from browsers (which cannot set headers) the
    token subprotocol, or `?token=` (kept for older clients; scrubbed from the logs)."""
    scheme, _, credentials = websocket.headers.get("authorization", "").partition(" ")
    offered = credentials.strip() if scheme.lower() == "bearer" else ""
    offered = offered or subprotocol_token(websocket)
    offered = offered or websocket.query_params.get("token", "")
    # compare_digest: the time taken must not tell how much of the token matched.
    return bool(offered) and secrets.compare_digest(offered.encode(), expected.encode())


async def admit(websocket: WebSocket, settings: Settings) -> bool:
    """Check Origin and token before `accept()`; refuse (and return False) if either fails.

    A missing Origin is allowed: browsers always send one, so its absence means
    a non-browser client, which the token (when configured) still has to pass.
    """
    origin = websocket.headers.get("origin")
    if origin is not None and not origin_allowed(
        origin, websocket.headers.get("host"), settings.ws_allowed_origins
    ):
        await _deny(
            websocket,
            403,
            "forbidden_origin",
            f"origin {origin!r} may not open WebSockets here (see PLATFORM_WS_ALLOWED_ORIGINS)",
        )
        return False
    if settings.api_token and not token_matches(websocket, settings.api_token):
        await _deny(websocket, 401, "unauthorized", "missing or invalid API token")
        return False
    return True


async def _deny(websocket: WebSocket, status: int, code: str, detail: str) -> None:
    logger.info("WebSocket %s refused: %s", websocket.url.path, detail)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        response = JSONResponse({"detail": detail, "code": code}, status, headers=headers)
        await websocket.send_denial_response(response)
    else:  # the server cannot send a response body: a close before accept is a 403
        await websocket.close(CLOSE_POLICY, close_reason(detail))


def close_reason(text: str) -> str:
    """`text` cut to fit a close frame (123 bytes of UTF-8), marked with "..." when cut."""
    data = text.encode()
    if len(data) <= _MAX_REASON_BYTES:
        return text
    return data[: _MAX_REASON_BYTES - 3].decode(errors="ignore") + "..."


def check_job_id(job_id: str) -> str:
    if not JOB_ID_PATTERN.fullmatch(job_id):
        raise InvalidParameterError(
            f"invalid job id {job_id!r}: 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return job_id


def query_params(websocket: WebSocket, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query parameters, refusing unknown or repeated ones (a typo must not be ignored)."""
    items = websocket.query_params.multi_items()
    names = [name for name, _ in items if name != "token"]
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise InvalidParameterError(
            f"unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidParameterError(f"parameter(s) given more than once: {', '.join(repeated)}")
    for name, value in items:
        bad = unstorable_character(value)
        if bad is not None:  # the same rule as the REST routes' (api/query_checks.py)
            raise InvalidParameterError(f"parameter {name!r} contains {bad}")
    return {name: value for name, value in items if name != "token"}


def step_param(params: Mapping[str, str], name: str) -> int | None:
    """An optional step: an integer from 0 to `MAX_STEP` (2**63-1)."""
    raw = params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParameterError(f"{name} must be an integer >= 0, got {raw!r}") from None
    if not 0 <= value <= MAX_STEP:
        raise InvalidParameterError(f"{name} must be an integer >= 0, got {raw!r}")
    return value


def number_between(value: Any, name: str, low: float, high: float) -> float:
    """`value` as a finite float within [low, high], else InvalidParameterError."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameterError(f"{name} must be a number from {low:g} to {high:g}")
    if not (math.isfinite(value) and low <= value <= high):
        raise InvalidParameterError(f"{name} must be from {low:g} to {high:g}, got {value!r}")
    return float(value)


class Connection:
    """An accepted WebSocket whose sends are bounded by a timeout. Use with `async with`.

    A send that cannot complete within `send_timeout` (the client stopped
    reading and the socket buffers are full) counts as a gone client, so one
    stuck client never holds anything else up. The timeout is kept by one
    watchdog per connection rather than a timer per message: at hundreds of
    clients times every record, per-message timers cost more than the sends.
    Leaving the block stops the watchdog and closes the connection.
    """

    def __init__(self, websocket: WebSocket, *, send_timeout: float, max_incoming: int) -> None:
        self.websocket = websocket
        self.send_timeout = send_timeout
        self.max_incoming = max_incoming
        self.closed = False
        self._sending_since: float | None = None
        self._sender: asyncio.Task[Any] | None = None
        self._stuck = False
        self._watchdog: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Connection:
        self._watchdog = asyncio.create_task(self._watch_sends())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        await self.close()

    async def _watch_sends(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.send_timeout / 4)
            started, sender = self._sending_since, self._sender
            if (
                started is not None
                and sender is not None
                and (loop.time() - started > self.send_timeout)
            ):
                self._stuck = True
                sender.cancel()

    async def send_text(self, text: str) -> None:
        """Send one message; raises `ClientGone`."""
        if self.closed or self._stuck:
            raise ClientGone("connection closed")
        self._sender = asyncio.current_task()
        self._sending_since = asyncio.get_running_loop().time()
        try:
            await self.websocket.send_text(text)
        except asyncio.CancelledError:
            if not self._stuck:
                raise
            # Cancelled by the watchdog, not by our caller: take the request back.
            if (task := asyncio.current_task()) is not None:
                task.uncancel()
            raise ClientGone(f"a send took longer than {self.send_timeout:g} s") from None
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise ClientGone(str(exc) or type(exc).__name__) from None
        finally:
            self._sending_since = None

    async def send_json(self, value: Any) -> None:
        await self.send_text(orjson.dumps(value).decode())

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Close once, never raising; gives up after a few seconds on a stuck client."""
        if self.closed:
            return
        self.closed = True
        if self.websocket.application_state == WebSocketState.DISCONNECTED:
            return
        # A stuck client cannot take the close frame either: do not wait long for it
        # (the protocol resets the connection once its linger runs out).
        timeout = min(_CLOSE_TIMEOUT, self.send_timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.websocket.close(code, close_reason(reason)), timeout)

    async def fail(self, exc: PlatformError) -> None:
        """Tell the client what was wrong with its request, then close (1008 or 1011)."""
        status, code = status_for(exc)
        with contextlib.suppress(ClientGone):
            await self.send_json({"type": "error", "code": code, "detail": str(exc)})
        await self.close(CLOSE_POLICY if status < 500 else CLOSE_INTERNAL, str(exc))

    async def receive_text(self) -> str | None:
        """The client's next message; None once it is gone (or was closed for size)."""
        if self.closed:
            return None
        try:
            message = await self.websocket.receive()
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True
            return None
        if message["type"] == "websocket.disconnect":
            self.closed = True
            return None
        text = message.get("text")
        if text is None:
            data = message.get("bytes") or b""
            text = data.decode(errors="replace")
        if len(text.encode()) > self.max_incoming:
            await self.close(
                CLOSE_TOO_BIG, f"messages to the server are limited to {self.max_incoming} bytes"
            )
            return None
        return text


async def serve_websocket(
    websocket: WebSocket, handler: Callable[[Connection], Awaitable[None]], what: str
) -> None:
    """Admit (Origin, token), accept, and run `handler` on a guarded `Connection`.

    Whatever the handler does not handle never leaves a client hanging: a
    client that left ends quietly, anything else is logged and closed with 1011.
    """
    settings: Settings = websocket.app.state.settings
    if not await admit(websocket, settings):
        return
    await websocket.accept(subprotocol=chosen_subprotocol(websocket))
    async with Connection(
        websocket,
        send_timeout=settings.live_send_timeout,
        max_incoming=settings.live_max_client_message_bytes,
    ) as connection:
        try:
            await handler(connection)
        except ClientGone:
            pass  # the client left, or stopped reading: nothing more to say to it
        except Exception:  # e.g. the database went away: say so
            logger.exception("%s failed", what)
            await connection.close(CLOSE_INTERNAL, "internal error; see the server log")
