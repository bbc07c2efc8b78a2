"""Settings: the metrics directory defaults to the trainer's (one rule, both sides)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from training_platform.callbacks.wire.locations import default_output_dir
from training_platform.settings import Settings


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("PLATFORM_METRICS_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_server_default_is_the_trainer_default(
    data_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings().metrics_dir == default_output_dir()
    if sys.platform not in ("darwin", "win32"):
        assert Settings().metrics_dir == data_home / "training-platform" / "metrics"


def test_platform_metrics_dir_overrides_both_sides(
    data_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_METRICS_DIR", str(tmp_path / "runs"))
    assert Settings().metrics_dir == default_output_dir() == tmp_path / "runs"


def test_an_empty_platform_metrics_dir_means_the_default_on_both_sides(
    data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_METRICS_DIR", "")
    assert Settings().metrics_dir == default_output_dir()
    assert Settings().metrics_dir != Path()


def test_an_explicit_metrics_dir_wins(data_home: Path, tmp_path: Path) -> None:
    assert Settings(PLATFORM_METRICS_DIR=tmp_path / "mine").metrics_dir == tmp_path / "mine"
