"""The trainer side imports cheaply: no server, no database layer, no torch needed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BLOCK_IMPORTS = """
import sys

class Blocker:
    # Import of these fails as if they were not installed.
    blocked = ("torch", "numpy", "transformers", "fastapi", "sqlalchemy", "starlette")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ImportError(f"{name} is blocked for this test")
        return None

sys.meta_path.insert(0, Blocker())
"""


def run_blocked(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = BLOCK_IMPORTS + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={"PATH": "", "PYTHONPATH": str(Path(__file__).parents[2])},
    )


def test_the_callbacks_package_imports_and_works_without_torch_or_server_packages(
    tmp_path: Path,
) -> None:
    result = run_blocked(
        """
        import training_platform.callbacks as callbacks
        from training_platform.callbacks import AnomalyMonitor, platform_run

        with platform_run("no-torch", "out", total_steps=3) as run:
            for step in range(3):
                run.log(step, {"loss": 1.0, "kl": 0.1})
        loaded = sorted(name for name in sys.modules if name.split(".")[0] in (
            "torch", "numpy", "fastapi", "sqlalchemy", "starlette", "transformers", "uvicorn"))
        print("loaded:", loaded)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout
    assert (tmp_path / "out" / "no-torch_metrics.jsonl").read_bytes().count(b"\n") == 3


def test_the_demo_package_imports_without_torch_until_it_runs(tmp_path: Path) -> None:
    result = run_blocked(
        """
        from training_platform.demo import DemoConfig, run_demo
        from training_platform.demo.cli import demo_train
        try:
            run_demo("x", "out", DemoConfig(steps=1))
        except ImportError as exc:
            print("needs torch:", exc)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "needs torch: torch is blocked" in result.stdout
