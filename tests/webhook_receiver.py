"""A webhook receiver on 127.0.0.1 for the tests (the `receiver` fixture, tests/conftest.py):
it keeps every request posted to it and answers with scripted statuses."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """An HTTP server on 127.0.0.1 answering POSTs with scripted statuses."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []  # consumed one per request; 200 once empty
        self.release = threading.Event()
        self.release.set()
        self.arrived = threading.Event()  # a request is in, maybe held by `release`
        self.received = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.arrived.set()
                receiver.release.wait(10)
                with receiver.received:
                    receiver.requests.append((dict(self.headers), body))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.received.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        with self.received:
            return self.received.wait_for(lambda: len(self.requests) >= count, timeout)

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.requests]

    def events(self, event: str) -> list[dict[str, Any]]:
        """The JSON bodies received so far whose `event` is `event`."""
        with self.received:
            return [payload for payload in self.payloads() if payload.get("event") == event]
