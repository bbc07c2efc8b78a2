"""The default metrics directory: the user's data directory, unless PLATFORM_METRICS_DIR says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from training_platform.callbacks.wire.locations import (
    default_output_dir,
    ensure_metrics_dir,
    user_metrics_dir,
)
from training_platform.errors import MetricsDirError

xdg_only = pytest.mark.skipif(
    sys.platform in ("darwin", "win32"), reason="XDG_DATA_HOME is the Linux (freedesktop) rule"
)


@pytest.fixture
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLATFORM_METRICS_DIR", raising=False)


@xdg_only
@pytest.mark.usefixtures("no_override")
def test_the_default_is_under_xdg_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    expected = tmp_path / "data" / "training-platform" / "metrics"
    assert user_metrics_dir() == expected
    assert default_output_dir() == expected


@xdg_only
@pytest.mark.usefixtures("no_override")
def test_without_xdg_data_home_the_default_is_under_home_local_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".local" / "share" / "training-platform" / "metrics"
    assert default_output_dir() == expected


@pytest.mark.usefixtures("no_override")
def test_the_default_does_not_depend_on_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "elsewhere").mkdir()
    here = default_output_dir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert default_output_dir() == here
    assert here.is_absolute()


def test_platform_metrics_dir_overrides_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_METRICS_DIR", str(tmp_path / "runs"))
    assert default_output_dir() == tmp_path / "runs"
    monkeypatch.setenv("PLATFORM_METRICS_DIR", "")  # empty means unset
    assert default_output_dir() == user_metrics_dir()


def test_a_missing_directory_is_created_with_its_parents(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b" / "metrics"
    assert ensure_metrics_dir(directory) == directory
    assert directory.is_dir()
    assert ensure_metrics_dir(directory) == directory  # existing: nothing to do


def test_a_directory_that_cannot_be_created_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(MetricsDirError, match=r"'.*taken'.*a file of that name is in the way"):
        ensure_metrics_dir(tmp_path / "taken")
    with pytest.raises(MetricsDirError, match=r"cannot be created: .*PLATFORM_METRICS_DIR") as info:
        ensure_metrics_dir(tmp_path / "taken" / "metrics")
    assert isinstance(info.value, OSError)  # callers that catch OSError still do
