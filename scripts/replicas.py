"""N `training-platform serve` processes behind nginx on this machine: the local
equivalent of `docker compose up --scale api=N` (docs/platform.md, "Several
processes behind a proxy").

    .venv/bin/python scripts/replicas.py --replicas 3 --port 8080
    .venv/bin/python scripts/replicas.py --render-compose   # rewrite deploy/nginx/compose.conf

What it does, in order: refuses any database but PostgreSQL (SQLite stays one
process); runs `training-platform migrate` once, so the processes never race
migrations (they start with PLATFORM_AUTO_MIGRATE=false); starts N processes on
free loopback ports, one database, one metrics directory; waits until each
answers /readyz; renders deploy/nginx/platform.conf.template for their ports and
runs Debian's nginx in the foreground with a run directory of its own (config,
logs, temp files: no root-owned path, not the system service); waits until the
proxy answers /readyz; and on SIGINT or SIGTERM stops the proxy, then the
processes. Each child dies with this script even if it is killed with SIGKILL
(Linux). tests/api/test_reverse_proxy.py runs it this way.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "deploy" / "nginx" / "platform.conf.template"
COMPOSE_CONFIG = REPO / "deploy" / "nginx" / "compose.conf"
# Compose: the service name, which Docker's DNS resolves to every replica's address
# when nginx starts, and the port the nginx image listens on inside its container.
COMPOSE_UPSTREAMS = ("api:8000",)
COMPOSE_LISTEN = "80"
RENDERED_HEADER = (
    "# Rendered from deploy/nginx/platform.conf.template by scripts/replicas.py:\n"
    "# edit the template, not this file.\n"
)
LOOPBACK = "127.0.0.1"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ReplicasError(Exception):
    """Something the user can act on: said in one line, no traceback."""


class Stopped(Exception):
    """SIGINT or SIGTERM arrived: stop everything and exit."""


def render_site(upstreams: Sequence[str], listen: str, template: str | None = None) -> str:
    """The http-context configuration for these `host:port` upstreams, listening on `listen`."""
    if not upstreams:
        raise ValueError("at least one upstream server is needed")
    text = TEMPLATE.read_text() if template is None else template
    servers = "\n".join(f"    server {address};" for address in upstreams)
    rendered = text.replace("@UPSTREAM_SERVERS@", servers).replace("@LISTEN@", listen)
    return RENDERED_HEADER + rendered


def render_compose_site() -> str:
    """deploy/nginx/compose.conf as it must read (tests compare the file with this)."""
    return render_site(COMPOSE_UPSTREAMS, COMPOSE_LISTEN)


def render_main(site: Path, run_dir: Path, *, as_root: bool) -> str:
    """nginx's main configuration for a local run: everything it writes stays in `run_dir`."""
    user = (
        # As root, nginx hands its workers to `nobody`, who cannot enter a private run
        # directory (its temp files); as anyone else they run as that user anyway.
        "user root;\n" if as_root else ""
    )
    temp = "\n".join(
        # Debian's compiled-in temp paths are under /var/lib/nginx (root's); nginx
        # creates each one at start even when unused.
        f'    {kind}_temp_path "{run_dir / (kind + "_temp")}";'
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        "# Written by scripts/replicas.py for one local run; the proxy itself is in\n"
        f"# {site.name}, rendered from deploy/nginx/platform.conf.template.\n"
        f"{user}"
        "# One loopback proxy: a single worker handles thousands of connections.\n"
        "worker_processes 1;\n"
        "error_log stderr notice;\n"
        "events {\n    worker_connections 1024;\n}\n"
        "http {\n"
        f"{temp}\n"
        f'    include "{site}";\n'
        "}\n"
    )


def check_database_url(url: str | None) -> str:
    """The URL when it is PostgreSQL; otherwise a ReplicasError saying why."""
    if not url:
        raise ReplicasError(
            "set DATABASE_URL (or --database-url) to a PostgreSQL database, e.g. "
            "postgresql+psycopg://user@127.0.0.1:5432/platform"
        )
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme not in ("postgresql", "postgres"):
        raise ReplicasError(
            f"several server processes need PostgreSQL, not {scheme or url!r}: they share "
            "the database and announce live records through it. SQLite stays one process: "
            "run `training-platform serve` instead."
        )
    return url


def find_nginx(explicit: str | None = None) -> str:
    """The nginx binary: `explicit`, else on PATH or in /usr/sbin (Debian's)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found = shutil.which(explicit or "nginx", path=search)
    if found is None:
        raise ReplicasError(
            f"no nginx found ({explicit or 'nginx'}): install Debian's (`apt-get install "
            "nginx`; `scripts/setup.sh test` does) or pass --nginx PATH"
        )
    return found


def nginx_command(nginx: str, run_dir: Path, config: Path) -> list[str]:
    """nginx in the foreground on `config`, with `run_dir` as its prefix and pid file's home.

    `-e stderr`: the error log before the configuration is read, which is otherwise
    Debian's /var/log/nginx/error.log. Add `-t` to only check the configuration.
    """
    options = f'daemon off; pid "{run_dir / "nginx.pid"}";'
    return [nginx, "-e", "stderr", "-p", str(run_dir), "-c", str(config), "-g", options]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 200 (never through an HTTP proxy from the environment)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when this script dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(command: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(
            list(command),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C in the terminal reaches this script only, which
            # stops the proxy first and then the processes, rather than all at once.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def stop_process(process: subprocess.Popen[bytes], sig: int, timeout: float) -> None:
    """Send `sig`, wait up to `timeout` seconds, then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@dataclass
class Replica:
    """One `training-platform serve` process."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


@dataclass
class Options:
    """What `running_replicas` starts; the command line's options."""

    database_url: str
    replicas: int = 3
    port: int = 8080
    run_dir: Path | None = None
    metrics_dir: Path | None = None
    poll_interval: float | None = None
    log_level: str = "info"
    nginx: str | None = None
    timeout: float = 60.0
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass
class Cluster:
    """The running processes, the proxy in front of them, and where their files are."""

    replicas: list[Replica]
    proxy: subprocess.Popen[bytes]
    proxy_url: str
    run_dir: Path


def _wait_until(
    condition: Callable[[], bool],
    timeout: float,
    watched: Sequence[tuple[subprocess.Popen[bytes], Path]],
    what: str,
) -> None:
    """Poll `condition` until it holds; fail at once when a watched process exits."""
    deadline = time.monotonic() + timeout
    while not condition():
        for process, log in watched:
            if process.poll() is not None:
                raise ReplicasError(
                    f"{what}: pid {process.pid} exited with {process.returncode}; "
                    f"the end of {log}:\n{_tail(log)}"
                )
        if time.monotonic() > deadline:
            raise ReplicasError(f"{what}: not ready within {timeout:g} s")
        time.sleep(0.1)


def _server_command() -> str:
    beside = Path(sys.executable).parent / "training-platform"
    found = str(beside) if beside.exists() else shutil.which("training-platform")
    if found is None:
        raise ReplicasError("no training-platform command: run scripts/setup.sh first")
    return found


def migrate(command: str, env: Mapping[str, str], timeout: float) -> str:
    """`training-platform migrate`, once, before any process starts; its one line."""
    try:
        done = subprocess.run(
            [command, "migrate"],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ReplicasError(f"training-platform migrate took over {timeout:g} s") from None
    if done.returncode != 0:
        raise ReplicasError(f"training-platform migrate failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


@contextlib.contextmanager
def running_replicas(options: Options) -> Iterator[Cluster]:
    """Migrate, start the processes and the proxy, yield them; stop all of them on exit."""
    database_url = check_database_url(options.database_url)
    if options.replicas < 1:
        raise ReplicasError("--replicas must be at least 1")
    nginx = find_nginx(options.nginx)
    command = _server_command()
    run_dir = options.run_dir or Path(tempfile.mkdtemp(prefix="training-platform-replicas-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**options.env, "DATABASE_URL": database_url}
    migrate(command, env, options.timeout)

    env.update(PLATFORM_HOST=LOOPBACK, PLATFORM_AUTO_MIGRATE="false")
    if options.metrics_dir is not None:
        env["PLATFORM_METRICS_DIR"] = str(options.metrics_dir)
    if options.poll_interval is not None:
        env["PLATFORM_POLL_INTERVAL"] = str(options.poll_interval)
    replicas: list[Replica] = []
    proxy: subprocess.Popen[bytes] | None = None
    try:
        for index in range(1, options.replicas + 1):
            port = free_port()
            log = run_dir / f"api-{index}.log"
            process = _spawn(
                [command, "serve", "--log-level", options.log_level],
                {**env, "PLATFORM_PORT": str(port)},
                log,
            )
            replicas.append(Replica(f"api-{index}", port, process, log))
        watched = [(replica.process, replica.log) for replica in replicas]
        for replica in replicas:
            _wait_until(
                functools.partial(answers, replica.url + "/readyz"),
                options.timeout,
                watched,
                f"{replica.name} ({replica.url})",
            )

        site = run_dir / "platform.conf"
        upstreams = [f"{LOOPBACK}:{replica.port}" for replica in replicas]
        site.write_text(render_site(upstreams, f"{LOOPBACK}:{options.port}"))
        config = run_dir / "nginx.conf"
        config.write_text(render_main(site, run_dir, as_root=os.geteuid() == 0))
        # stdout is the access log (/dev/stdout in the template, as in the nginx image).
        access_log, error_log = run_dir / "access.log", run_dir / "error.log"
        with access_log.open("ab") as access, error_log.open("ab") as errors:
            proxy = subprocess.Popen(
                nginx_command(nginx, run_dir, config),
                stdin=subprocess.DEVNULL,
                stdout=access,
                stderr=errors,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        proxy_url = f"http://{LOOPBACK}:{options.port}"
        _wait_until(
            lambda: answers(proxy_url + "/readyz"),
            options.timeout,
            [(proxy, error_log)],
            f"nginx ({proxy_url})",
        )
        yield Cluster(replicas, proxy, proxy_url, run_dir)
    finally:
        # The proxy first (SIGTERM: its fast shutdown, open sockets closed), so no new
        # request reaches a process that is stopping; then the processes, in parallel
        # (SIGTERM: uvicorn's graceful shutdown, bounded by serve's own 10 s backstop).
        if proxy is not None:
            stop_process(proxy, signal.SIGTERM, timeout=10)
        for replica in replicas:
            if replica.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    replica.process.send_signal(signal.SIGTERM)
        for replica in replicas:
            stop_process(replica.process, signal.SIGTERM, timeout=20)


def describe(cluster: Cluster) -> str:
    """Where everything is: the banner printed once the proxy answers."""
    url, run_dir = cluster.proxy_url, cluster.run_dir
    lines = [f"\n  training_platform: {url}/   (API docs: {url}/docs)"]
    lines += [f"  {r.name}: pid {r.process.pid}, {r.url}, log {r.log}" for r in cluster.replicas]
    lines.append(f"  nginx: pid {cluster.proxy.pid}, config {run_dir / 'nginx.conf'}, logs")
    lines.append(f"    {run_dir / 'access.log'}, {run_dir / 'error.log'}")
    lines.append("  Ctrl-C or SIGTERM stops them all.\n")
    return "\n".join(lines)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    # Once: a second Ctrl-C must not interrupt the stopping itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="N training-platform serve processes on one PostgreSQL database behind "
        "nginx: the local equivalent of `docker compose up --scale api=N`."
    )
    parser.add_argument("--replicas", type=int, default=3, help="server processes (3)")
    parser.add_argument("--port", type=int, default=8080, help="the proxy's port on 127.0.0.1")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="PostgreSQL URL (default: $DATABASE_URL)",
    )
    parser.add_argument(
        "--metrics-dir", type=Path, help="shared metrics directory (default: serve's)"
    )
    parser.add_argument("--poll-interval", type=float, help="PLATFORM_POLL_INTERVAL for each")
    parser.add_argument("--log-level", default="info", help="the processes' log level (info)")
    parser.add_argument("--run-dir", type=Path, help="config and logs (default: a new temp dir)")
    parser.add_argument("--nginx", help="the nginx binary (default: nginx on PATH, /usr/sbin)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to get ready (60)")
    parser.add_argument(
        "--render-compose",
        action="store_true",
        help=f"only rewrite {COMPOSE_CONFIG.relative_to(REPO)} from the template, and exit",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render_compose:
        COMPOSE_CONFIG.write_text(render_compose_site())
        print(f"wrote {COMPOSE_CONFIG.relative_to(REPO)}")
        return 0
    options = Options(
        database_url=args.database_url or "",
        replicas=args.replicas,
        port=args.port,
        run_dir=args.run_dir,
        metrics_dir=args.metrics_dir,
        poll_interval=args.poll_interval,
        log_level=args.log_level,
        nginx=args.nginx,
        timeout=args.timeout,
    )
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        with running_replicas(options) as cluster:
            print(describe(cluster), flush=True)
            cluster.proxy.wait()  # until nginx exits, or a signal raises Stopped
            raise ReplicasError(
                f"nginx exited with {cluster.proxy.returncode}; the end of its error log:\n"
                + _tail(cluster.run_dir / "error.log")
            )
    except Stopped as stopped:
        print(f"{stopped}: stopped the proxy and {options.replicas} processes", flush=True)
        return 0
    except ReplicasError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
