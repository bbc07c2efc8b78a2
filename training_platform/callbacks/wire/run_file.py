"""`{job_id}_run.json`: who a run is (docs/contract.md, "run metadata").

Written once at train begin, atomically, next to the metrics file: the
project, name and tags the user gave, the config made JSON-safe with secrets
masked, the framework, the git state of the working directory, the host, the
command line and the start time. Everything here runs once per run, so it
favours completeness over speed (one `git` call, a walk over the config).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, Final

import orjson

from training_platform.callbacks.wire.line_file import write_json_atomic
from training_platform.callbacks.wire.secrets import mask_argv, mask_config, mask_run

logger = logging.getLogger(__name__)

RUN_SUFFIX: Final = "_run.json"
MAX_CONFIG_BYTES: Final = 512 * 1024  # the platform refuses a run file over 1 MiB
MAX_DEPTH: Final = 64
MAX_TENSOR_ITEMS: Final = 64  # a bigger tensor or array is described, not listed
MAX_REPR_CHARS: Final = 1000

_NONFINITE: Final = {math.inf: "Infinity", -math.inf: "-Infinity"}


class _Converter:
    """Turns any config into plain JSON values, noting what it had to guess."""

    def __init__(self) -> None:
        self.converted: list[str] = []  # paths whose value became a repr
        self._active: set[int] = set()  # containers on the current path (cycles)

    def value(self, value: Any, path: str, depth: int = 0) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value if -(2**63) <= value < 2**63 else str(value)
        if isinstance(value, float):
            if math.isnan(value):
                return "NaN"
            return _NONFINITE.get(value, value)
        if depth >= MAX_DEPTH:
            self.converted.append(path or "<root>")
            return "<too deep>"
        if isinstance(value, enum.Enum):
            return self.value(value.value, path, depth + 1)
        if isinstance(value, PurePath):
            return str(value)
        if isinstance(value, (datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, (bytes, bytearray)):
            return f"<{len(value)} bytes>"
        marker = id(value)
        if marker in self._active:
            self.converted.append(path or "<root>")
            return "<cycle>"
        self._active.add(marker)
        try:
            return self._container(value, path, depth)
        finally:
            self._active.discard(marker)

    def _container(self, value: Any, path: str, depth: int) -> Any:
        # Library types first: an OmegaConf DictConfig is a Mapping whose items()
        # raises on an interpolation that cannot resolve.
        if type(value).__module__.split(".", 1)[0] in _LIBRARY_MODULES:
            plain = _plain(value)
            if plain is not _UNCONVERTED:
                return self.value(plain, path, depth + 1)
        if isinstance(value, Mapping):
            return self.mapping(value, path, depth)
        if isinstance(value, (list, tuple, set, frozenset)):
            items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
            return [self.value(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(items)]
        plain = _plain(value)
        if plain is not _UNCONVERTED:
            return self.value(plain, path, depth + 1)
        self.converted.append(path or "<root>")
        text = repr(value)
        return text if len(text) <= MAX_REPR_CHARS else text[:MAX_REPR_CHARS] + "..."

    def mapping(self, value: Mapping[Any, Any], path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for raw_key, item in value.items():
            key = str(raw_key)
            where = f"{path}.{key}" if path else key
            out[key] = self.value(item, where, depth + 1)
        return out


_UNCONVERTED: Final = object()
_LIBRARY_MODULES: Final = frozenset({"omegaconf", "torch", "numpy"})


def _plain(value: Any) -> Any:
    """`value` as builtin containers/scalars when a known library type, else `_UNCONVERTED`."""
    kind = type(value).__module__.split(".", 1)[0]
    try:
        if kind == "omegaconf":
            from omegaconf import OmegaConf

            try:
                return OmegaConf.to_container(value, resolve=True)
            except Exception:  # an interpolation that cannot resolve here
                return OmegaConf.to_container(value, resolve=False)
        if kind in ("torch", "numpy") and hasattr(value, "tolist"):
            size = int(getattr(value, "numel", lambda: getattr(value, "size", 1))())
            if size <= MAX_TENSOR_ITEMS:
                return value.detach().cpu().tolist() if kind == "torch" else value.tolist()
            shape = list(getattr(value, "shape", ()))
            return f"<{type(value).__name__} shape={shape} dtype={getattr(value, 'dtype', '?')}>"
        to_dict = getattr(value, "to_dict", None)  # transformers' TrainingArguments
        if callable(to_dict) and not isinstance(value, type):
            return to_dict()
        model_dump = getattr(value, "model_dump", None)  # pydantic
        if callable(model_dump) and not isinstance(value, type):
            return model_dump()
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    except Exception:  # a library object that refuses: fall back to its repr
        return _UNCONVERTED
    return _UNCONVERTED


def json_config(config: Any) -> tuple[dict[str, Any] | None, str | None]:
    """`config` as a JSON object with secrets masked, and why it was dropped (if it was).

    A config that is not a mapping (a dataclass, an OmegaConf object, ...) is
    converted first; one that still is not an object becomes ``{"value": ...}``.
    Conversions that lost information are logged once, naming the keys.
    """
    if config is None:
        return None, None
    converter = _Converter()
    converted = converter.value(config, "")
    if not isinstance(converted, dict):
        converted = {"value": converted}
    # Masked once plain: the rules see what the platform will (callbacks/wire/secrets.py).
    converted = mask_config(converted)
    if converter.converted:
        shown = ", ".join(converter.converted[:10])
        more = len(converter.converted) - 10
        logger.warning(
            "run config: stored as text (not JSON-serialisable, cyclic or too deep): %s%s",
            shown,
            f" and {more} more" if more > 0 else "",
        )
    size = len(orjson.dumps(converted))
    if size > MAX_CONFIG_BYTES:
        reason = f"config too large ({size} bytes encoded, limit {MAX_CONFIG_BYTES})"
        logger.warning("run config dropped from the run file: %s", reason)
        return None, reason
    return converted, None


def masked_command(argv: Sequence[str]) -> list[str]:
    """The command line with its secrets hidden (`callbacks/wire/secrets.py`)."""
    return mask_argv(argv)


def git_state(directory: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git work tree holding `directory` (the
    working directory by default); None outside one or without git."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=directory or os.getcwd(),
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": bool(status and status.strip())}


def default_framework() -> dict[str, str]:
    """torch when the process imported it (a hand-written loop), else Python."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    if version:
        return {"name": "torch", "version": str(version)}
    return {"name": "python", "version": platform.python_version()}


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


@dataclasses.dataclass
class RunInfo:
    """What the run file will say; adapters fill what the user did not."""

    project: str | None = None
    name: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    config: Any = None
    framework: dict[str, str] | None = None

    def fill(self, *, config: Any = None, framework: dict[str, str] | None = None) -> None:
        """Defaults from an adapter: its config under the user's (the user's
        keys win), its framework unless one was set."""
        if config is not None:
            if self.config is None:
                self.config = config
            elif isinstance(self.config, Mapping):
                self.config = {"trainer_config": config, **self.config}
        if framework is not None and self.framework is None:
            self.framework = framework


def clean_tags(tags: Sequence[Any] | str | None) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = [tags]
    seen: dict[str, None] = {}
    for tag in tags:
        text = str(tag).strip()
        if text:
            seen.setdefault(text[:64])
    return list(seen)


def run_payload(
    job_id: str, info: RunInfo, started_at: float, argv: Sequence[str] | None = None
) -> dict[str, Any]:
    config, dropped = json_config(info.config)
    payload: dict[str, Any] = {"job_id": job_id}
    if info.project:
        payload["project"] = str(info.project)[:256]
    if info.name:
        payload["name"] = str(info.name)[:256]
    payload["tags"] = info.tags
    payload["config"] = config
    if dropped:
        payload["config_dropped"] = dropped
    payload["framework"] = info.framework or default_framework()
    git = git_state()
    if git is not None:
        payload["git"] = git
    payload["host"] = socket.gethostname()
    payload["command"] = masked_command(sys.argv if argv is None else argv)
    payload["started_at"] = started_at
    # The rest (name, tags, git, ...) by the same rules; the config's second
    # pass changes nothing (masking is idempotent) and runs once per run.
    return mask_run(payload)


def write_run_file(
    path: Path, job_id: str, info: RunInfo, clock: Callable[[], float]
) -> Path | None:
    """Write the run file; never raises (monitoring must not stop training)."""
    try:
        write_json_atomic(path, run_payload(job_id, info, clock()))
    except Exception:
        logger.exception("could not write the run file %s", path)
        return None
    return path
