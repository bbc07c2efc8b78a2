"""Browser-test fixtures: a real uvicorn server on a free loopback port, real headless Chromium.

Chromium is Debian's (`/usr/bin/chromium`, installed by `scripts/setup.sh
test`), driven by Playwright with `executable_path`: no browser download. Each
test gets a fresh browser context; its console errors and uncaught page errors
fail the test, and a full-page screenshot is saved under
`test-artifacts/web/` (git-ignored) whether it passed or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from training_platform.api.main import create_app
from training_platform.api.websocket import uvicorn_ws_options
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.settings import Settings

CHROMIUM = os.environ.get("TEST_CHROMIUM", "/usr/bin/chromium")
# Sandboxing needs privileges a container may not have; the rest keeps Chromium
# from calling out (nothing outside 127.0.0.1 is reachable in CI).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
START_TIMEOUT = 20.0
# Pixels of the first series colour (#2563eb) in a chart's canvas: > 0 once drawn.
COUNT_LINE_PIXELS = """(selector) => {
  const canvas = document.querySelector(selector + " canvas");
  if (!canvas) return 0;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (Math.abs(data[i] - 37) < 40 && Math.abs(data[i + 1] - 99) < 40
        && Math.abs(data[i + 2] - 235) < 40 && data[i + 3] > 150) n += 1;
  }
  return n;
}"""


@dataclass
class LiveServer:
    url: str
    metrics_dir: Path
    settings: Settings

    def write_records(self, job_id: str, records: list[dict[str, Any]]) -> None:
        """Append complete JSONL lines, as a training process does."""
        with (self.metrics_dir / f"{job_id}_metrics.jsonl").open("ab") as handle:
            for record in records:
                handle.write(encode_record(record))

    def write_status(self, job_id: str, status: str, current: int, total: int) -> None:
        """Replace the status file atomically (write, then rename), as the callback does."""
        path = self.metrics_dir / f"{job_id}_status.json"
        temporary = path.with_suffix(".tmp")
        now = time.time()
        temporary.write_text(
            json.dumps(
                {
                    "job_id": job_id,
                    "status": status,
                    "current_step": current,
                    "total_steps": total,
                    "anomaly_detected": False,
                    "anomaly_reason": None,
                    "started_at": now - 60,
                    "updated_at": now,
                }
            )
        )
        temporary.replace(path)

    def sync(self, job_id: str) -> None:
        """Ingest now, rather than waiting for the background round."""
        response = httpx.post(f"{self.url}/api/monitoring/{job_id}/metrics/sync", timeout=30)
        response.raise_for_status()


def make_record(step: int, **overrides: Any) -> dict[str, Any]:
    """A record with every chart's series; `overrides` replace whole groups."""
    groups: dict[str, Any] = {
        # A value loss that learns (a flat one from the start is `loss_not_decreasing`).
        "loss": {
            "actor_loss": 2.0 - step * 0.001,
            "critic_loss": max(1.0 - step * 0.001, 0.2),
            "total_loss": 3.0,
        },
        "reward": {"mean": 0.2 + step * 0.001, "min": -0.5, "max": 1.0, "std": 0.1},
        "kl": {"mean": 0.01, "max": 0.02},
        "gradient": {"actor_norm": 1.5, "critic_norm": 0.7},
        "performance": {
            "tokens_per_second": 1000.0 + step,
            "step_time": 0.5,
            "gpu_memory_allocated": 12.0,
        },
        "timing": {"rollout": 0.3, "reward": 0.05, "update_actor": 0.15},
        "extra": {"actor/entropy": 1.2, "response_length/mean": 200.0},
    }
    groups.update(overrides)
    return build_record(step, groups, timestamp=time.time())


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class _ThreadServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # not the main thread: leave signals alone
        pass


@contextlib.contextmanager
def serve_in_thread(settings: Settings, metrics_dir: Path) -> Iterator[LiveServer]:
    """The app (with the dashboard) for `settings`, served by uvicorn in a thread."""
    app = create_app(settings)
    sock = _free_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", **uvicorn_ws_options(settings))
    server = _ThreadServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", metrics_dir, settings)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextlib.contextmanager
def module_server(root: Path, sqlite_template: Path) -> Iterator[LiveServer]:
    """A server of its own under `root` (a copy of the migrated SQLite template, an empty
    metrics directory, background sync on), for a module's tests to share."""
    database = root / "platform.db"
    shutil.copyfile(sqlite_template, database)
    metrics_dir = root / "metrics"
    metrics_dir.mkdir()
    (root / "keys").mkdir()
    settings = Settings(
        DATABASE_URL=f"sqlite:///{database}",
        PLATFORM_METRICS_DIR=metrics_dir,
        PLATFORM_API_TOKEN=None,
        PLATFORM_SSH_KEY_DIR=root / "keys",
        PLATFORM_POLL_INTERVAL=0.25,
    )
    with serve_in_thread(settings, metrics_dir) as server:
        yield server


@pytest.fixture
def live_server(settings: Settings, metrics_dir: Path) -> Iterator[LiveServer]:
    """The app served by uvicorn in a thread, background sync on."""
    with serve_in_thread(settings.model_copy(update={"poll_interval": 0.25}), metrics_dir) as srv:
        yield srv


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (scripts/setup.sh test installs Debian's)")
    with sync_api.sync_playwright() as playwright:
        # launch() gives every run a fresh temporary profile (user-data-dir).
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh page; fails the test on any console error or uncaught exception."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    # A navigation loads the page's scripts while the server may be busy ingesting
    # (a loaded CI machine took 10 s once): a first paint has more room than a click.
    page.set_default_navigation_timeout(30_000)
    errors: list[str] = []
    # A test that provokes an error answer on purpose (a 422 the page shows) names
    # it here: Chromium logs every failed request as a console error.
    page.expected_console_errors = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        finally:
            context.close()
    unexpected = [e for e in errors if not any(x in e for x in page.expected_console_errors)]
    assert not unexpected, "\n".join(unexpected)
