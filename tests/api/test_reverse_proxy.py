"""Several server processes behind a real nginx, as deployed (docs/platform.md,
"Several processes behind a proxy"): deploy/nginx/, scripts/replicas.py and the
compose file.

No Docker engine runs here, so `docker compose up --scale api=3` itself is not
run: the compose file's structure is checked, both renderings of the nginx
configuration pass `nginx -t`, and the local equivalent (scripts/replicas.py:
the same template, Debian's nginx, real `training-platform serve` processes on
one PostgreSQL database) is driven end to end, every request through the proxy
only. Skipped with a reason without nginx (`scripts/setup.sh test` installs it)
or without PostgreSQL.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import yaml  # PyYAML: in the dev install (omegaconf needs it)
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection

from scripts import replicas
from tests.api.live_support import append_steps, metric_steps, open_ws, receive, wait_for

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "replicas.py"
LIVE = "/api/monitoring/run1/live"
CLIENTS = 6

NO_NGINX = "no nginx: `scripts/setup.sh test` installs Debian's (apt-get install nginx)"
try:
    NGINX: str | None = replicas.find_nginx()
except replicas.ReplicasError:
    NGINX = None
needs_nginx = pytest.mark.skipif(NGINX is None, reason=NO_NGINX)


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PLATFORM_API_TOKEN", None)
    return env


# --- the compose file and the configuration files, checked without Docker ---------------


def upstream_servers(config: str) -> list[str]:
    block = re.search(r"^upstream training_platform \{\n(.*?)^\}", config, re.M | re.S)
    assert block is not None, "no upstream block"
    return re.findall(r"^\s*server\s+(\S+);", block.group(1), re.M)


def listen_port(config: str) -> str:
    found = re.search(r"^\s*listen\s+(?:\S+:)?(\d+);", config, re.M)
    assert found is not None, "no listen directive"
    return found.group(1)


def test_the_compose_file_scales_the_api_behind_the_proxy() -> None:
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    api, proxy, migrate = services["api"], services["proxy"], services["migrate"]

    # Replicas share nothing fixed: no host port, no container name.
    assert "ports" not in api and "container_name" not in api
    assert api["expose"] == ["8000"]
    # One PostgreSQL database, migrated once before any replica starts.
    assert api["environment"]["DATABASE_URL"].startswith("postgresql+psycopg://")
    assert migrate["environment"]["DATABASE_URL"] == api["environment"]["DATABASE_URL"]
    assert api["environment"]["PLATFORM_AUTO_MIGRATE"] == "false"
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"

    # The proxy: the official image at a pinned version, after the replicas are healthy,
    # the only published port, and the rendered configuration for upstream api:8000.
    image, _, tag = proxy["image"].partition(":")
    assert image == "nginx" and re.fullmatch(r"\d+\.\d+", tag), proxy["image"]
    assert proxy["depends_on"]["api"]["condition"] == "service_healthy"
    (published,) = proxy["ports"]
    host_ip, host_port, container_port = published.split(":")
    assert (host_ip, host_port) == ("127.0.0.1", "8000")
    (mount,) = proxy["volumes"]
    source, target, mode = mount.split(":")
    assert (target, mode) == ("/etc/nginx/conf.d/default.conf", "ro")
    config = (REPO / source).read_text()
    assert config == replicas.render_compose_site(), (
        f"{source} is stale: run `.venv/bin/python scripts/replicas.py --render-compose`"
    )
    assert upstream_servers(config) == ["api:8000"]
    assert listen_port(config) == container_port
    assert "PLATFORM_PORT=8000" in (REPO / "Dockerfile").read_text()


def test_only_postgresql_is_accepted_for_several_processes(tmp_path: Path) -> None:
    with pytest.raises(replicas.ReplicasError, match="SQLite stays one process"):
        replicas.check_database_url(f"sqlite:///{tmp_path / 'platform.db'}")
    assert replicas.check_database_url("postgresql://u@h/db") == "postgresql://u@h/db"

    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--database-url", f"sqlite:///{tmp_path / 'x.db'}"],
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "SQLite stays one process" in done.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything touched it


def nginx_check(site_text: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    """`nginx -t` on `site_text` inside the main configuration scripts/replicas.py writes."""
    assert NGINX is not None
    run_dir.mkdir()
    site = run_dir / "platform.conf"
    site.write_text(site_text)
    config = run_dir / "nginx.conf"
    config.write_text(replicas.render_main(site, run_dir, as_root=os.geteuid() == 0))
    return subprocess.run(
        [*replicas.nginx_command(NGINX, run_dir, config), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@needs_nginx
def test_both_renderings_pass_nginx_t(tmp_path: Path) -> None:
    local = replicas.render_site(["127.0.0.1:18001", "127.0.0.1:18002"], "127.0.0.1:18000")
    assert upstream_servers(local) == ["127.0.0.1:18001", "127.0.0.1:18002"]
    checked = nginx_check(local, tmp_path / "local")
    assert checked.returncode == 0, checked.stderr

    # `nginx -t` resolves upstream host names, and `api` resolves only on the compose
    # network: the committed file is checked with that one name replaced.
    compose = (REPO / "deploy" / "nginx" / "compose.conf").read_text()
    assert compose.count("server api:8000;") == 1
    checked = nginx_check(compose.replace("server api:8000;", "server 127.0.0.1:8000;"),
                          tmp_path / "compose")  # fmt: skip
    assert checked.returncode == 0, checked.stderr

    broken = nginx_check(local.replace("proxy_buffering off;", "proxy_buffering of;"),
                         tmp_path / "broken")  # fmt: skip
    assert broken.returncode != 0 and "proxy_buffering" in broken.stderr


# --- the local equivalent, end to end ----------------------------------------------------


@pytest.fixture
def cluster(
    scratch_postgres: Callable[[], str], metrics_dir: Path, tmp_path: Path
) -> Iterator[replicas.Cluster]:
    """Three processes behind nginx on a fresh database, started as the script starts
    them (migrated first); every process stopped when the test ends, however it ends."""
    if NGINX is None:
        pytest.skip(NO_NGINX)
    options = replicas.Options(
        database_url=scratch_postgres(),
        replicas=3,
        port=replicas.free_port(),
        run_dir=tmp_path / "run",
        metrics_dir=metrics_dir,
        poll_interval=0.2,
        log_level="warning",
        env=server_env(),
    )
    with replicas.running_replicas(options) as running:
        yield running


def scrape(url: str) -> dict[str, float]:
    """One process's /metrics, read directly (not through the proxy): name{labels} -> value."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def jobs_requests(url: str) -> float:
    name = "training_platform_http_request_duration_seconds_count"
    return scrape(url).get(name + "{method=GET,route=/api/jobs,status=200}", 0.0)


def ws_url(cluster: replicas.Cluster) -> str:
    return cluster.proxy_url.replace("http://", "ws://")


def urls(cluster: replicas.Cluster) -> list[str]:
    """The processes still running, each addressed directly."""
    return [replica.url for replica in cluster.replicas if replica.process.poll() is None]


def live_clients(url: str) -> int:
    return int(scrape(url).get("training_platform_live_clients{kind=live}", 0.0))


@pytest.mark.slow
def test_rest_requests_through_the_proxy_land_on_more_than_one_process(
    cluster: replicas.Cluster, metrics_dir: Path
) -> None:
    append_steps(metrics_dir / "run1_metrics.jsonl", range(5))
    with httpx.Client(base_url=cluster.proxy_url, timeout=30) as client:
        assert client.post("/api/monitoring/run1/metrics/sync").is_success
        for _ in range(12):
            answer = client.get("/api/jobs")
            assert answer.status_code == 200
            assert [job["job_id"] for job in answer.json()["jobs"]] == ["run1"]

    # Each process counts the requests it served: all 12 are accounted for, and more
    # than one process served them (no stickiness; least_conn ties go round robin).
    # A request is counted once its answer is sent, so the client may hold the last
    # answer a moment before its process counted it: looked at until all 12 are in.
    def served_by_each() -> list[float]:
        return [jobs_requests(replica.url) for replica in cluster.replicas]

    wait_for(lambda: sum(served_by_each()) >= 12, timeout=10)
    served = served_by_each()
    assert sum(served) == 12, served
    assert sum(count > 0 for count in served) >= 2, served
    # The proxy's access log says the same, and keeps query strings (tokens) out.
    log = (cluster.run_dir / "access.log").read_text()
    upstreams = set(re.findall(r'"GET /api/jobs HTTP/1.1" 200 .* upstream=(\S+)', log))
    assert len(upstreams) >= 2, log


@dataclass
class Follower:
    """A live client through the proxy that reconnects, from the last step it has,
    whenever its connection drops."""

    ws_base: str
    stack: ExitStack  # closes every socket it opens
    ws: ClientConnection = field(init=False)
    steps: list[int] = field(default_factory=list)
    reconnects: int = 0

    def __post_init__(self) -> None:
        self.ws = self.stack.enter_context(open_ws(self.ws_base + LIVE))

    def follow_until(self, last: int, timeout: float = 60.0) -> list[int]:
        deadline = time.monotonic() + timeout
        while last not in self.steps and time.monotonic() < deadline:
            try:
                message = receive(self.ws, timeout=max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
            except ConnectionClosed:
                self.reconnect(deadline)
                continue
            self.steps += metric_steps([message])
        return self.steps

    def reconnect(self, deadline: float) -> None:
        assert self.steps, "a client resumes from the last step it has"
        self.reconnects += 1
        url = f"{self.ws_base}{LIVE}?since_step={self.steps[-1]}"
        while True:
            try:
                self.ws = self.stack.enter_context(open_ws(url))
                return
            except (OSError, WebSocketException):  # refused, or the proxy answered 502
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def append_slowly(path: Path, steps: range) -> None:
    """Ten steps every 50 ms: appends land between the processes' rounds."""
    for start in range(steps.start, steps.stop, 10):
        append_steps(path, range(start, min(start + 10, steps.stop)))
        time.sleep(0.05)


@pytest.mark.slow
def test_live_clients_through_the_proxy_get_every_step_once_in_order_through_a_kill(
    cluster: replicas.Cluster, metrics_dir: Path
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    run1.write_bytes(b"")
    sync = httpx.post(cluster.proxy_url + "/api/monitoring/run1/metrics/sync", timeout=30)
    assert sync.is_success
    with ExitStack() as stack:
        followers: list[Follower] = []
        for _ in range(CLIENTS):
            follower = Follower(ws_url(cluster), stack)
            assert receive(follower.ws, timeout=20)["type"] == "status"  # subscribed
            followers.append(follower)
        # The sockets went through the proxy to more than one process.
        assert wait_for(lambda: sum(map(live_clients, urls(cluster))) == CLIENTS, timeout=20)
        per_process = [live_clients(replica.url) for replica in cluster.replicas]
        assert sum(count > 0 for count in per_process) >= 2, per_process

        append_slowly(run1, range(0, 100))
        for index, follower in enumerate(followers):
            assert follower.follow_until(99) == list(range(100)), f"client {index}"

        # Mid-stream: steps 100-149 are in the file, on their way to the clients, when
        # the process with the most clients is killed without a chance to clean up.
        victim = max(range(len(cluster.replicas)), key=per_process.__getitem__)
        append_steps(run1, range(100, 150))
        cluster.replicas[victim].process.kill()
        cluster.replicas[victim].process.wait(timeout=10)
        append_slowly(run1, range(150, 300))

        # A sentinel: messages arrive in commit order, so a late duplicate of any
        # earlier step would show up before it.
        append_steps(run1, [300])
        for index, follower in enumerate(followers):
            steps = follower.follow_until(300)
            assert steps == list(range(301)), f"client {index}: {len(steps)} steps"
        # Exactly the killed process's clients dropped, and each came back once.
        assert sorted(f.reconnects for f in followers) == sorted(
            [0] * (CLIENTS - per_process[victim]) + [1] * per_process[victim]
        )


@pytest.mark.slow
@needs_nginx
def test_the_script_stops_the_proxy_and_every_process_on_sigterm(
    scratch_postgres: Callable[[], str], metrics_dir: Path, tmp_path: Path
) -> None:
    port = replicas.free_port()
    output = tmp_path / "replicas.out"
    command = [sys.executable, str(SCRIPT), "--replicas", "2", "--port", str(port),
               "--metrics-dir", str(metrics_dir), "--run-dir", str(tmp_path / "run"),
               "--log-level", "warning", "--database-url", scratch_postgres()]  # fmt: skip
    with output.open("wb") as sink:
        script = subprocess.Popen(command, env=server_env(), stdout=sink, stderr=subprocess.STDOUT)
    try:
        ready = wait_for(
            lambda: script.poll() is not None or "stops them all" in output.read_text(), 60
        )
        assert ready and script.poll() is None, output.read_text()
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
        children = psutil.Process(script.pid).children(recursive=True)
        names = sorted(child.name() for child in children)
        # Two servers (and whatever they start), nginx's master and its worker.
        assert len(children) >= 4 and names.count("nginx") == 2, names

        script.send_signal(signal.SIGTERM)
        assert script.wait(timeout=45) == 0
        assert "SIGTERM: stopped the proxy and 2 processes" in output.read_text()
        _, alive = psutil.wait_procs(children, timeout=5)
        assert alive == [], alive
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    finally:
        if script.poll() is None:
            script.kill()  # its children get SIGTERM from the kernel (PR_SET_PDEATHSIG)
            script.wait(timeout=30)
