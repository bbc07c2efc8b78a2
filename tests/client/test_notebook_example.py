"""docs/data-out.md's notebook example runs as written, against a real server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.client.conftest import reward
from tests.web.conftest import LiveServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "data-out.md"


def example_code() -> str:
    """The python block right after the `<!-- notebook-example -->` marker."""
    found = re.search(r"<!-- notebook-example -->\n```python\n(.*?)\n```", DOC.read_text(), re.S)
    assert found is not None, "docs/data-out.md lost its notebook example"
    return found.group(1)


def test_the_notebook_example_plots_two_runs_and_their_final_mean(
    server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = example_code().replace('"http://localhost:8000"', repr(server.url))
    namespace: dict[str, object] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    assert (tmp_path / "reward.png").stat().st_size > 1_000
    final = namespace["final"]
    assert isinstance(final, dict)
    for job_id, lr in (("fast", 0.05), ("slow", 0.01)):
        expected = sum(reward(step, lr) for step in range(200, 300)) / 100
        assert final[job_id] == pytest.approx(expected)
