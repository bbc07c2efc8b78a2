"""Run the server in this process and say where it is once it answers.

What `uvicorn.run` does for one process, with one addition: the command
line's banner (the URL, the metrics directory) comes from `announce`, called
inside the event loop once the lifespan has started (migrations, services) and
the sockets listen, so a request to the printed URL is served at once. It used
to be printed before the server started, a second or more too early.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from training_platform.logging_setup import LogFile, configure_logging

if TYPE_CHECKING:
    import socket

    from training_platform.settings import Settings

# uvicorn.run's exit status when the application did not start.
STARTUP_FAILURE = 3


def server_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_server(
    settings: Settings,
    log_level: str,
    *,
    announce: Callable[[str], None],
    access_log: bool = True,
) -> None:
    """Serve until stopped; `announce(url)` once the server answers at `url`.

    The URL has the port actually bound, so port 0 (any free port) works too.
    """
    import uvicorn

    from training_platform.api.main import create_app
    from training_platform.api.websocket import uvicorn_ws_options

    # Text or JSON lines with the pid, uvicorn's own included (logging_setup.py),
    # to stderr and to PLATFORM_LOG_FILE when it is set.
    log_file = None
    if settings.log_file is not None:
        log_file = LogFile(
            settings.log_file, settings.log_file_max_bytes, settings.log_file_backups
        )
    configure_logging(log_level, settings.log_format, log_file)
    # watchfiles logs every batch of changes at INFO: noise for a long-running server.
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        log_config=None,  # configured above: uvicorn's own config would replace the format
        access_log=access_log,
        **uvicorn_ws_options(settings),  # heartbeats, client message cap, bounded closes
        # A backstop for SIGTERM: requests still running this long after it are
        # cancelled (stalled WebSockets are already reset within 2 s).
        timeout_graceful_shutdown=10,
    )

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                bound = [sock.getsockname()[1] for srv in self.servers for sock in srv.sockets]
                announce(server_url(settings.host, bound[0] if bound else settings.port))

    server = AnnouncingServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()  # re-raises a SIGINT it handled once the server is down
    if not server.started:
        sys.exit(STARTUP_FAILURE)
