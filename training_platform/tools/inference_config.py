"""`profile-inference --config FILE`: the settings of a run in YAML or TOML.

Two spellings, mixable. Flat keys are the long options' names with
underscores (``batch_sizes``, ``hf_model``, ``max_length``, ...). The nested
layout is the Week-1 baseline's ``configs/config.yaml``::

    model:
      name: distilbert-base-uncased-finetuned-sst-2-english  # hub name, directory or module:factory
      device: cuda
      dtype: float16
    dataset:
      path: data/dev.csv        # or name: a CSV file, or a Hugging Face dataset
      split: test
      text_column: text
      label_column: label
      sample_sizes: [100, 500, 1000]
    profiling:
      batch_sizes: [1, 8, 16, 32]
      num_warmup_runs: 3
      num_measurement_runs: 10
      max_length: 512
    output:
      dir: results

Every nested key maps onto one flat key (`SECTIONS`); a flag given on the
command line wins over the file. An unknown key is an error naming it and
the known ones.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from training_platform.tools.inference_target import BUILTIN_MODELS

KEYS = frozenset(
    {
        "model",
        "hf_model",
        "dtype",
        "device",
        "dataset",
        "dataset_name",
        "split",
        "text_column",
        "label_column",
        "label_map",
        "sample_sizes",
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
# section -> {nested key: flat key}. ``model.name`` and ``dataset.name`` are
# resolved by `_model_key` / `_dataset_key`: their value decides the flat key.
SECTIONS: dict[str, dict[str, str]] = {
    "model": {
        "name": "",
        "device": "device",
        "dtype": "dtype",
        "inputs": "inputs",
        "input_shape": "input_shape",
        "accuracy": "accuracy",
    },
    "dataset": {
        "name": "",
        "path": "dataset",
        "split": "split",
        "text_column": "text_column",
        "label_column": "label_column",
        "label_map": "label_map",
        "sample_sizes": "sample_sizes",
    },
    "profiling": {
        "batch_sizes": "batch_sizes",
        "num_warmup_runs": "warmup",
        "num_measurement_runs": "runs",
        "max_length": "max_length",
        "min_time_s": "min_time_s",
        "max_latency_ms": "max_latency_ms",
        "skip_profiling": "skip_profiling",
    },
    "output": {"dir": "output_dir", "skip_viz": "skip_viz"},
}
DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def load_config(path: Path) -> dict[str, Any]:
    """The file's settings under their flat names (a ValueError for a bad file or key)."""
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
    return flatten(data, path.name)


def flatten(data: dict[str, Any], name: str = "config") -> dict[str, Any]:
    """Nested sections and flat keys as one flat mapping; the same setting twice is an error."""
    flat: dict[str, Any] = {}
    where: dict[str, str] = {}

    def put(key: str, value: Any, spelled: str) -> None:
        if key in flat:
            raise ValueError(f"--config {name}: {spelled} and {where[key]} both set {key}")
        flat[key], where[key] = value, spelled

    for key, value in data.items():
        # `model` and `dataset` are flat keys (strings) and sections (mappings):
        # the value's type says which one the file means.
        if key in SECTIONS and isinstance(value, dict):
            known = SECTIONS[key]
            for sub, sub_value in value.items():
                if sub not in known:
                    raise ValueError(
                        f"--config {name}: unknown setting {key}.{sub}; "
                        f"known in {key}: {', '.join(known)}"
                    )
                target = known[sub] or _named_key(key, sub_value)
                put(target, sub_value, f"{key}.{sub}")
        elif key in KEYS:
            put(key, value, key)
        else:
            raise ValueError(
                f"--config {name}: unknown settings {key}; known: {', '.join(sorted(KEYS))} "
                f"and the sections {', '.join(SECTIONS)}"
            )
    if "dtype" in flat:
        flat["dtype"] = normalise_dtype(str(flat["dtype"]))
    return flat


def _named_key(section: str, value: Any) -> str:
    """Which flat key ``model.name`` / ``dataset.name`` fills, from what it names."""
    text = str(value)
    if section == "model":
        # A built-in name or module:factory is a torch factory; anything else
        # (a directory, a hub name such as org/model) a Hugging Face model.
        return "model" if text in BUILTIN_MODELS or _FACTORY.match(text) else "hf_model"
    return "dataset" if Path(text).expanduser().is_file() else "dataset_name"


def normalise_dtype(value: str) -> str:
    """``torch.float16``, ``fp16`` and ``half`` as ``float16`` (the documents write all three)."""
    text = value.strip().lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(text, text)


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
