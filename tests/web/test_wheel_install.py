"""The package as users get it: a wheel built from a clone, installed in a fresh virtualenv.

The clone is the checkout's git-tracked and untracked-but-not-ignored files,
copied aside: no node_modules/, no web/vendor/, no .venv. The wheel is built
with pip, as `pip install .` does (build isolation, so npm runs from setup.py
and nothing of this test environment leaks in); a wheel also built from the
sdist with npm off the PATH must hold the same files. Then, from a directory
outside the source tree, the venv's own `training-platform migrate` and
`training-platform serve` run, and real Chromium checks the dashboard and
`/docs` and `/redoc`, with every request that would leave the server aborted.

The same wheel without extras, in a second fresh venv, is what a training
machine gets: exactly the trainer side's packages, a callback that writes its
metrics file, and a `serve` that names the install it needs in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.run_once import once
from tests.web.conftest import COUNT_LINE_PIXELS, make_record
from tests.web.test_degraded import assert_api_docs_render_offline
from training_platform.callbacks.wire.lines import encode_record
from training_platform.store.database import head_revision

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "training_platform" / "web"
JOB = "wheel-run"
STEPS = 120
START_TIMEOUT = 60.0


@dataclass
class Built:
    wheel: Path
    wheel_from_sdist: Path
    sdist: Path
    build_output: str  # what building the wheel from the clone printed


@dataclass
class Installed:
    venv: Path
    workdir: Path  # outside the source tree: where the commands run
    env: dict[str, str]

    def command(self, name: str) -> str:
        return str(self.venv / "bin" / name)


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=400, **kwargs)
    assert result.returncode == 0, f"{args}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would point Python at the checkout."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP"}
    }
    return {**env, **extra}


def _clone(target: Path) -> Path:
    listing = _run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO).stdout
    for name in filter(None, listing.split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted in the work tree is still listed
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _build(root: Path) -> dict[str, str]:
    source = _clone(root / "clone")
    assert not (source / "training_platform" / "web" / "node_modules").exists()
    dist = root / "dist"
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(source)])
    (wheel,) = dist.glob("*.whl")
    sdist_name = _run(
        [
            sys.executable,
            "-c",
            "from setuptools import build_meta; print(build_meta.build_sdist('sd'))",
        ],
        cwd=source,
    ).stdout.split()[-1]
    sdist = source / "sd" / sdist_name
    # npm off the PATH: the sdist must carry the assets itself.
    path_without_npm = str(Path(sys.executable).parent)
    assert shutil.which("npm", path=path_without_npm) is None
    from_sdist = root / "dist-sdist"
    _run(
        # No build isolation here (this venv's setuptools): it is the files that count.
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(from_sdist),
            str(sdist),
        ],
        env=_clean_env(PATH=path_without_npm),
    )
    (wheel_from_sdist,) = from_sdist.glob("*.whl")
    return {
        "wheel": str(wheel),
        "wheel_from_sdist": str(wheel_from_sdist),
        "sdist": str(sdist),
        "build_output": build.stdout + build.stderr,
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if shutil.which("npm") is None:
        pytest.skip("no npm: building the wheel fetches the pinned browser assets with it")
    made = once(tmp_path_factory, "wheel-build", _build)
    return Built(
        Path(made["wheel"]),
        Path(made["wheel_from_sdist"]),
        Path(made["sdist"]),
        made["build_output"],
    )


def _install(tmp_path_factory: pytest.TempPathFactory, name: str, requirement: str) -> Installed:
    """A venv with `requirement`, shared by the run's workers; a work folder of this
    worker's own (the tests write into it)."""

    def make(root: Path) -> dict[str, str]:
        venv = root / "venv"
        _run([sys.executable, "-m", "venv", str(venv)])  # a clean venv: no system site-packages
        # --no-compile: the server compiles what it imports; precompiling every
        # dependency would only slow the test down.
        pip = str(venv / "bin" / "pip")
        _run([pip, "install", "-q", "--no-compile", requirement], env=_clean_env())
        return {"venv": str(venv)}

    venv = Path(once(tmp_path_factory, name, make)["venv"])
    return Installed(venv, tmp_path_factory.mktemp(f"{name}-work"), _clean_env())


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The server's install: the wheel with its `server` extra."""
    return _install(tmp_path_factory, "server-venv", f"{built.wheel}[server]")


@pytest.fixture(scope="module")
def trainer_only(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A training machine's install: the wheel and no extra."""
    return _install(tmp_path_factory, "trainer-venv", str(built.wheel))


def test_the_wheel_holds_the_migrations_and_pinned_assets_not_node_modules(built: Built) -> None:
    names = set(zipfile.ZipFile(built.wheel).namelist())
    assert not [name for name in names if "node_modules" in name]
    migrations = {
        f"training_platform/_migrations/versions/{path.name}"
        for path in (REPO / "migrations" / "versions").glob("*.py")
    }
    assert migrations <= names
    assert {
        "training_platform/_migrations/env.py",
        "training_platform/_migrations/script.py.mako",
    } <= names
    manifest = json.loads((WEB / "package.json").read_text())
    locked = json.loads((WEB / "package-lock.json").read_text())["packages"]
    vendor = "training_platform/web/vendor"
    for package, files in manifest["servedFiles"].items():
        for file in files:
            assert f"{vendor}/{package}/{Path(file).name}" in names, (package, file)
        assert f"{vendor}/{package}/LICENSE" in names, package
    stamp = json.loads(zipfile.ZipFile(built.wheel).read(f"{vendor}/versions.json"))
    assert stamp == {p: locked[f"node_modules/{p}"]["version"] for p in manifest["servedFiles"]}
    # The sdist carries the assets, so a wheel built from it without npm is the same.
    assert set(zipfile.ZipFile(built.wheel_from_sdist).namelist()) == names


def test_the_wheel_builds_without_setuptools_warnings_about_the_data(built: Built) -> None:
    # web/ is package data, not a package: setuptools warned once per folder of it.
    assert "Building wheel" in built.build_output  # the backend's output is there to read
    assert "is absent from the" not in built.build_output, built.build_output
    assert "BuildBackendWarning" not in built.build_output, built.build_output


def test_migrate_runs_from_the_wheel(installed: Installed) -> None:
    where = _run(
        [
            installed.command("python"),
            "-c",
            "import training_platform; print(training_platform.__file__)",
        ],
        cwd=installed.workdir,
        env=installed.env,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.venv), where  # not the checkout
    env = {**installed.env, "DATABASE_URL": f"sqlite:///{installed.workdir / 'migrated.db'}"}
    cli = [installed.command("training-platform"), "migrate"]
    first = _run(cli, cwd=installed.workdir, env=env).stdout
    second = _run(cli, cwd=installed.workdir, env=env).stdout
    assert f"migrated from empty to {head_revision()}" in first
    assert f"already at revision {head_revision()}" in second


# What `pip install training-platform` may bring; pip and setuptools come with the venv.
TRAINER_DISTRIBUTIONS = {"training-platform", "orjson", "psutil", "nvidia-ml-py", "platformdirs"}
SERVER_DISTRIBUTIONS = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "pydantic",
    "pydantic-settings",
    "paramiko",
    "psycopg",
    "watchfiles",
    "websockets",
    "typer",
}
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, re\n"
    "for d in m.distributions(): print(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower())"
)
TINY_RUN = """
import sys
from training_platform.callbacks import PlatformCallback

callback = PlatformCallback("lean-run", "out", background=False)
callback.on_train_begin(total_steps=3)
for step in range(3):
    callback.on_step_end(step, {"loss": 1.0 / (step + 1), "kl": 0.01})
callback.on_train_end()
servers = ("fastapi", "sqlalchemy", "uvicorn", "pydantic", "typer", "torch")
print("loaded:", sorted(name for name in sys.modules if name.split(".")[0] in servers))
"""


def test_the_trainer_install_holds_the_trainer_side_only(trainer_only: Installed) -> None:
    listing = _run([trainer_only.command("python"), "-c", LIST_DISTRIBUTIONS], env=trainer_only.env)
    installed = set(listing.stdout.split()) - {"pip", "setuptools"}
    assert installed == TRAINER_DISTRIBUTIONS
    assert not installed & SERVER_DISTRIBUTIONS


def test_the_trainer_install_runs_a_callback(trainer_only: Installed) -> None:
    result = _run(
        [trainer_only.command("python"), "-c", TINY_RUN],
        cwd=trainer_only.workdir,
        env=trainer_only.env,
    )
    assert "loaded: []" in result.stdout
    lines = (trainer_only.workdir / "out" / "lean-run_metrics.jsonl").read_bytes().splitlines()
    assert len(lines) == 3
    # The system sampler ran too: psutil (and NVML, or its one warning) from the base install.
    system = (trainer_only.workdir / "out" / "lean-run_system.jsonl").read_bytes().splitlines()
    assert system and all(b'"memory"' in line for line in system)


def test_sysmon_runs_on_the_trainer_install(trainer_only: Installed) -> None:
    """No typer there: `sysmon` is handed its arguments by entry.py, with argparse."""
    out = trainer_only.workdir / "sysmon"
    command = [trainer_only.command("training-platform"), "sysmon", "lean-run"]
    process = subprocess.Popen(
        [*command, "--output-dir", str(out), "--interval", "0.05", "--host", "node 2"],
        stderr=subprocess.PIPE,
        text=True,
        env=trainer_only.env,
    )
    path = out / "lean-run_system.node_2.jsonl"
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_bytes().count(b"\n") >= 2):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.terminate()
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert path.read_bytes().endswith(b"\n")


def test_serve_on_the_trainer_install_names_the_server_install(trainer_only: Installed) -> None:
    for command in (
        [trainer_only.command("training-platform")],
        [trainer_only.command("python"), "-m", "training_platform"],
    ):
        result = subprocess.run(
            [*command, "serve"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=trainer_only.workdir,
            env=trainer_only.env,
        )
        assert result.returncode == 1
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith(
            "training-platform serve needs the server install: "
            "pip install 'training-platform[server]'"
        ), line


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def served(installed: Installed) -> Iterator[str]:
    """`training-platform serve` from the venv, a finished job in its metrics directory."""
    metrics = installed.workdir / "metrics"
    metrics.mkdir()
    with (metrics / f"{JOB}_metrics.jsonl").open("wb") as handle:
        for step in range(STEPS):
            handle.write(encode_record(make_record(step)))
    now = time.time()
    status = {
        "job_id": JOB,
        "status": "completed",
        "current_step": STEPS - 1,
        "total_steps": STEPS,
        "anomaly_detected": False,
        "anomaly_reason": None,
        "started_at": now - 60,
        "updated_at": now,
    }
    (metrics / f"{JOB}_status.json").write_text(json.dumps(status))
    port = _free_port()
    env = {
        **installed.env,
        "DATABASE_URL": f"sqlite:///{installed.workdir / 'served.db'}",
        "PLATFORM_METRICS_DIR": str(metrics),
        "PLATFORM_HOST": "127.0.0.1",
        "PLATFORM_PORT": str(port),
        "PLATFORM_POLL_INTERVAL": "0.25",
    }
    log = (installed.workdir / "serve.log").open("w")
    server = subprocess.Popen(
        [installed.command("training-platform"), "serve", "--log-level", "warning"],
        cwd=installed.workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(
                    f"serve did not start:\n{(installed.workdir / 'serve.log').read_text()}"
                )
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def local_page(page: Any, served: str) -> tuple[Any, list[str]]:
    """The conftest page (console errors fail the test); requests off the server are aborted."""
    outside: list[str] = []

    def only_local(route: Any) -> None:
        if route.request.url.startswith(served + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    return page, outside


def test_the_installed_dashboard_lists_the_job_and_draws_its_charts(
    served: str, local_page: tuple[Any, list[str]]
) -> None:
    page, outside = local_page
    page.goto(f"{served}/#/")
    page.locator(f'tr[data-job="{JOB}"] a.job-link').click()
    page.wait_for_function(
        """(text) => {
            const el = document.querySelector('.chart[data-chart="losses"] .legend-step');
            return el !== null && el.textContent === text;
        }""",
        arg=f"step {STEPS - 1}",
        timeout=20_000,
    )
    for chart in ("losses", "reward", "kl"):
        assert page.evaluate(COUNT_LINE_PIXELS, f'.chart[data-chart="{chart}"]') > 50, chart
    assert page.locator("#asset-banner").is_hidden()
    assert outside == []


def test_the_installed_api_docs_render_offline(served: str, browser: Any) -> None:
    assert_api_docs_render_offline(browser, served)
