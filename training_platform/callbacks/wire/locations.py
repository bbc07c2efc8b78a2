"""Where the trainer writes and the platform reads when nobody says: one directory per user.

A training script and ``training-platform serve`` started from different
folders must still meet, so the default is not relative to the working
directory but the user's data directory, as Trackio and TensorBoard habits go
(platformdirs): ``$XDG_DATA_HOME/training-platform/metrics`` on Linux
(``~/.local/share/training-platform/metrics`` by default), ``~/Library/
Application Support/training-platform/metrics`` on macOS,
``%LOCALAPPDATA%\\training-platform\\metrics`` on Windows. ``$PLATFORM_METRICS_DIR``
overrides it on both sides (docs/contract.md §1).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from training_platform.errors import MetricsDirError

APP_NAME = "training-platform"
ENV_VAR = "PLATFORM_METRICS_DIR"


def user_metrics_dir() -> Path:
    """The per-user default: ``<user data dir>/training-platform/metrics`` (absolute)."""
    # appauthor=False: no "<author>\" level on Windows, the same name everywhere.
    return platformdirs.user_data_path(APP_NAME, appauthor=False) / "metrics"


def default_output_dir() -> Path:
    """``$PLATFORM_METRICS_DIR`` when set and not empty, else `user_metrics_dir()`.

    The server's `Settings.metrics_dir` follows the same rule, so a trainer and a
    server on one machine agree without being told.
    """
    return Path(os.environ.get(ENV_VAR) or user_metrics_dir())


def ensure_metrics_dir(directory: Path) -> Path:
    """Create `directory` (and its parents) when missing; `MetricsDirError` when it cannot be.

    The error names the directory and the way out (``PLATFORM_METRICS_DIR``),
    rather than a bare `OSError` from deep inside the first write.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise MetricsDirError(
            f"metrics directory {str(directory)!r} cannot be used: a file of that name is "
            f"in the way (move it, or set {ENV_VAR} to another directory)"
        ) from None
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise MetricsDirError(
            f"metrics directory {str(directory)!r} cannot be created: {reason} "
            f"(set {ENV_VAR} to a directory you can write)"
        ) from exc
    return directory
