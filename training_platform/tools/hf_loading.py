"""Load a Hugging Face classifier and tokenizer (and a hub dataset) by path or hub name.

Order: a local directory; the local Hugging Face cache (no network call, so a
cached model loads offline and without the Hub's update checks); then the
download step, `from_pretrained` with the network. Offline
(``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``, or the Hub's host not
reachable) that last step is refused in one line up front, rather than after
huggingface_hub's retries (half a minute of warnings without a network).
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

logger = logging.getLogger("training_platform.tools.profile_inference")
_TRUE = {"1", "true", "yes", "on"}
_CONNECT_TIMEOUT_S = 3.0


def load_model_and_tokenizer(name: str) -> tuple[Any, Any, str]:
    """(model, tokenizer, where they came from: directory, cache or download)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    def load(local_only: bool) -> tuple[Any, Any]:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local_only)
        model = AutoModelForSequenceClassification.from_pretrained(
            name, local_files_only=local_only
        )
        return model, tokenizer

    if looks_local(name):
        if not Path(name).expanduser().is_dir():
            raise ValueError(f"--hf-model {name!r}: no such directory")
        try:
            return (*load(True), "directory")
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"--hf-model {name!r}: no model and tokenizer could be loaded from this "
                f"directory: {first_line(exc)}"
            ) from None
    try:
        return (*load(True), "local Hugging Face cache")
    except (OSError, ValueError):
        pass  # not cached (or only partly): the download step below
    offline = offline_reason()
    if offline:
        raise ValueError(
            f"--hf-model {name!r} is not in the local Hugging Face cache and {offline}: "
            "download it once online, or give a local directory"
        )
    logger.info("downloading %s from the Hugging Face Hub", name)
    try:
        return (*load(False), "downloaded from the Hugging Face Hub")
    except (OSError, ValueError) as exc:
        raise ValueError(f"--hf-model {name!r}: {first_line(exc)}") from None


def load_hub_dataset(
    name: str, split: str, text_column: str, label_column: str
) -> tuple[list[str], list[str]]:
    """Texts and labels (as strings) of a dataset on the Hub or a local dataset directory."""
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"dataset {name!r} is not a file; hub datasets need the `datasets` package "
            "(pip install datasets), or give a CSV (dataset.path / --dataset)"
        ) from None
    offline = None if Path(name).expanduser().is_dir() else offline_reason()
    if offline and not datasets.config.HF_HUB_OFFLINE:
        # An unreachable Hub, offline mode not declared: datasets would retry
        # for a while before failing. Declared offline, it reads its cache.
        raise ValueError(f"dataset {name!r}: {offline}; give a CSV (dataset.path / --dataset)")
    try:
        data = datasets.load_dataset(name, split=split)
    except Exception as exc:  # datasets raises many types (ConnectionError, DatasetNotFoundError)
        why = f" ({offline})" if offline else ""
        raise ValueError(f"dataset {name!r} split {split!r}{why}: {first_line(exc)}") from None
    missing = [c for c in (text_column, label_column) if c not in data.column_names]
    if missing:
        raise ValueError(
            f"dataset {name!r}: no column {', '.join(map(repr, missing))}; its columns are "
            f"{', '.join(map(repr, data.column_names))} "
            "(choose with --text-column / --label-column)"
        )
    texts = [str(text or "") for text in data[text_column]]
    labels = [str(label).strip() for label in data[label_column]]
    if not texts:
        raise ValueError(f"dataset {name!r} split {split!r}: no rows")
    return texts, labels


def looks_local(name: str) -> bool:
    """A path rather than a hub id (``org/name``): it exists, or is spelled like a path."""
    if Path(name).expanduser().exists():
        return True
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def offline_reason() -> str | None:
    """Why the Hub cannot be used now (None: go ahead and download)."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(variable, "").strip().lower() in _TRUE:
            return f"the machine is offline ({variable}=1)"
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:  # read when huggingface_hub was imported
        return "the machine is offline (HF_HUB_OFFLINE=1)"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # a proxy decides what is reachable: let the download try
    return unreachable(constants.ENDPOINT)


def unreachable(endpoint: str) -> str | None:
    """One TCP connection to the Hub's host: a reason when it fails, else None."""
    parsed = urlparse(endpoint)
    host = parsed.hostname or endpoint
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"the machine is offline ({host} cannot be reached: {exc.strerror or exc})"


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
