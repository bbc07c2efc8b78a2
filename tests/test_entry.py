"""The console script on a partial install: one line naming the extra, never a traceback.

The real trainer-only install is tested from a built wheel in
tests/web/test_wheel_install.py; these tests block modules instead.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from training_platform.entry import command_of, missing_install

REPO = Path(__file__).resolve().parents[1]
SERVER_HINT = "pip install 'training-platform[server]'"


def only(*present: str) -> Callable[[str], bool]:
    """An `installed` probe for an environment that has only `present`."""
    return lambda module: module in present


@pytest.mark.parametrize("command", ["serve", "migrate", "sync"])
def test_a_server_command_without_the_server_names_the_server_extra(command: str) -> None:
    message = missing_install([command, "--port", "9000"], only("typer", "torch"))
    assert message == (
        f"training-platform {command} needs the server install: {SERVER_HINT}"
        " (fastapi is not installed)"
    )


def test_the_demo_names_each_missing_extra_once() -> None:
    message = missing_install(["demo"], only())
    assert message is not None
    assert "needs the server and torch installs: pip install 'training-platform[server,torch]'" in (
        message
    )
    assert missing_install(["demo"], only("torch")) == (
        f"training-platform demo needs the server install: {SERVER_HINT} (fastapi is not installed)"
    )


def test_the_tools_need_only_typer() -> None:
    assert missing_install(["gpu-check"], only("typer")) is None
    assert missing_install(["profile-report", "dir"], only("typer")) is None
    assert missing_install(["profile-report"], only()) == (
        "training-platform profile-report needs the tools install: "
        "pip install 'training-platform[tools]' (typer is not installed)"
    )


def test_no_command_or_help_needs_typer_only() -> None:
    assert missing_install([], only("typer")) is None
    assert missing_install(["--help"], only("typer")) is None
    message = missing_install(["--help"], only())
    assert message is not None
    assert SERVER_HINT in message and "'training-platform[tools]'" in message


def test_a_full_install_passes_every_command() -> None:
    for command in ("serve", "demo", "gpu-check", "profile-inference", "nonsense"):
        assert missing_install([command], lambda _: True) is None


def test_the_command_is_the_first_word_that_is_not_an_option() -> None:
    assert command_of(["--help", "serve"]) == "serve"
    assert command_of(["sync", "job-1"]) == "sync"
    assert command_of([]) is None


def run_blocked(blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m training_platform ARGS` with `blocked` missing, as if not installed."""
    script = textwrap.dedent(
        f"""
        import runpy, sys

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {blocked!r}:
                    raise ImportError(f"{{name}} is blocked for this test")
                return None

        sys.meta_path.insert(0, Blocker())
        sys.argv = ["training-platform", *{list(args)!r}]
        runpy.run_module("training_platform", run_name="__main__")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_serve_without_the_server_is_one_line_and_exit_1() -> None:
    result = run_blocked(("fastapi", "sqlalchemy", "uvicorn", "typer", "pydantic"), "serve")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"training-platform serve needs the server install: {SERVER_HINT}"
        " (fastapi is not installed)"
    ]


def test_the_tools_run_without_the_servers_settings() -> None:
    # The tools extra brings typer, not pydantic-settings: the CLI module still imports.
    result = run_blocked(("pydantic_settings", "fastapi", "sqlalchemy"), "profile-report", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout
