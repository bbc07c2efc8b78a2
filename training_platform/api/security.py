"""What protects the API and dashboard from the browser side (docs/platform.md, "Security").

- **Host check.** Without a token (the default) a page on any site could
  rebind its own DNS name to 127.0.0.1 and then read the API as "same
  origin", live socket included. Such a request always carries the attacker's
  name in `Host`, so requests are answered only for: IP literals (a DNS
  rebinding page cannot use one), `localhost`, this machine's names, the bind
  host, and `PLATFORM_ALLOWED_HOSTS` (`*` turns the check off, e.g. behind a
  proxy that already checks). Others get 400 with a JSON body naming the
  setting; WebSocket upgrades too.
- **Security headers** on every HTTP response: a CSP that allows only this
  server's own scripts, styles and sockets (pages that set their own CSP, the
  API docs, keep theirs), `nosniff`, no referrer, no framing.
- **No token in logs.** The dashboard sends the token in a WebSocket
  subprotocol (see `api/websocket.py`); `?token=` still works for older
  clients, so uvicorn's log lines (which show the query string) are scrubbed.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from typing import Final

import orjson
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from training_platform.settings import Settings

# The dashboard's own policy: it loads only its own files (vendor ones
# included) and talks only to this server (connect-src 'self' covers ws/wss
# to the same host). No inline script or style anywhere.
DASHBOARD_CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
_WILDCARD_BINDS: Final = frozenset({"0.0.0.0", "::", ""})
_TOKEN_IN_QUERY: Final = re.compile(r"(?i)(\btoken=)[^&\s\"']*")


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """The host names requests may carry (lower case, no port); None: any host."""
    configured = [host.strip().lower() for host in settings.allowed_hosts]
    if "*" in configured:
        return None
    names = {"localhost", *configured}
    bind = settings.host.strip().lower().strip("[]")
    if bind not in _WILDCARD_BINDS:
        names.add(bind)
    # This machine's own names are not something a rebinding page controls.
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower())
    return frozenset(names)


def host_of(header: str) -> str:
    """`Host` without its port, lower case, IPv6 brackets removed."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def host_allowed(header: str, allowed: frozenset[str] | None) -> bool:
    if allowed is None:
        return True
    host = host_of(header)
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
        return True  # an IP literal: no DNS name an attacker could rebind
    except ValueError:
        pass
    if host in allowed or host.endswith(".localhost"):
        return True
    # "*.example.com" in the setting allows its subdomains.
    return any(name.startswith("*.") and host.endswith(name[1:]) for name in allowed)


class HostCheckMiddleware:
    """Refuse (400) HTTP requests and WebSocket upgrades whose `Host` is not allowed."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed is None:
            await self.app(scope, receive, send)
            return
        header = _header(scope, b"host")
        if host_allowed(header, self.allowed):
            await self.app(scope, receive, send)
            return
        logging.getLogger(__name__).warning("refused a request for host %r", header[:200])
        body = orjson.dumps(
            {
                "detail": f"host {header[:200]!r} is not served here: add it to "
                "PLATFORM_ALLOWED_HOSTS (or '*' behind a proxy that checks Host)",
                "code": "invalid_host",
            }
        )
        prefix = "websocket." if scope["type"] == "websocket" else ""
        if prefix and "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": "host not allowed"})
            return
        await send(
            {
                "type": f"{prefix}http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": f"{prefix}http.response.body", "body": body})


class SecurityHeadersMiddleware:
    """Add the security headers (and the dashboard CSP) to HTTP responses lacking them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                if b"content-security-policy" not in present:
                    extra.append((b"content-security-policy", DASHBOARD_CSP.encode()))
                message = {**message, "headers": headers + extra}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class ScrubTokens(logging.Filter):
    """Replace `token=<value>` in a log record's message and arguments by `token=***`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "token=" in record.msg.lower():
            record.msg = _scrub(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_scrub(a) if isinstance(a, str) else a for a in record.args)
        return True


def _scrub(text: str) -> str:
    return _TOKEN_IN_QUERY.sub(r"\1***", text)


def scrub_tokens_from(logger_names: Iterable[str]) -> None:
    """Install `ScrubTokens` on these loggers, once each."""
    for name in logger_names:
        target = logging.getLogger(name)
        if not any(isinstance(f, ScrubTokens) for f in target.filters):
            target.addFilter(ScrubTokens())


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def install_security(app: FastAPI, settings: Settings) -> None:
    """Host check outermost, then the headers; and scrubbed uvicorn logs."""
    app.add_middleware(SecurityHeadersMiddleware)
    # Added last, so it runs first: a refused host reaches nothing else.
    app.add_middleware(HostCheckMiddleware, allowed=allowed_hosts(settings))
    scrub_tokens_from(("uvicorn.error", "uvicorn.access"))
