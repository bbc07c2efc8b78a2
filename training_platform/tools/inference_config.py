"""`profile-inference --config FILE`: the settings of a run in YAML or TOML.

Keys are the long options' names with underscores (``batch_sizes``,
``hf_model``, ``max_length``, ...); a flag given on the command line wins
over the file. Example (YAML)::

    hf_model: ./models/verifier
    dtype: float32
    dataset: data/dev.csv
    text_column: text
    label_column: label
    batch_sizes: [1, 8, 32]
    max_length: 256
    warmup: 3
    runs: 20
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

KEYS = frozenset(
    {
        "model",
        "hf_model",
        "dtype",
        "device",
        "dataset",
        "text_column",
        "label_column",
        "label_map",
        "batch_sizes",
        "max_length",
        "warmup",
        "runs",
        "min_time_s",
        "max_latency_ms",
        "output_dir",
        "inputs",
        "input_shape",
        "accuracy",
        "skip_profiling",
        "skip_viz",
    }
)


def load_config(path: Path) -> dict[str, Any]:
    """The file's settings (a ValueError for an unreadable file or an unknown key)."""
    if not path.is_file():
        raise ValueError(f"--config {str(path)!r}: no such file")
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"--config {path.name}: {exc}") from None
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError("YAML configs need PyYAML (pip install pyyaml), or use TOML") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"--config {path.name}: {exc}") from None
    else:
        raise ValueError(f"--config {path.name}: use a .yaml, .yml or .toml file")
    if not isinstance(data, dict):
        raise ValueError(f"--config {path.name}: expected a mapping of settings")
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise ValueError(
            f"--config {path.name}: unknown settings {', '.join(unknown)}; "
            f"known: {', '.join(sorted(KEYS))}"
        )
    return data


def int_list(value: Any, name: str) -> list[int]:
    """``[1, 8, 32]`` or ``"1,8,32"`` as integers >= 1."""
    parts = value if isinstance(value, list) else str(value).replace(" ", "").split(",")
    try:
        values = [int(part) for part in parts if part != ""]
    except (TypeError, ValueError):
        raise ValueError(f"{name} {value!r}: comma-separated integers") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} {value!r}: integers >= 1")
    return values
