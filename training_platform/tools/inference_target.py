"""What `profile-inference` runs: a torch model and the way to make its batches.

The model comes from ``module:factory`` (``tiny`` is the built-in
`tiny_model:build`) or from a Hugging Face directory (`hf_target`). The input
of one batch comes, first found, from ``--inputs module:fn``
(``fn(batch_size, device)``), the model's own ``make_batch(batch_size,
device)``, or ``--input-shape`` (random floats of shape ``(batch_size,
*shape)``). A batch that is a tuple is passed as positional arguments, a
dict as keyword arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

BUILTIN_MODELS = {"tiny": "training_platform.tools.tiny_model:build"}
MIB = float(1 << 20)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``module:attribute`` (``tiny`` and other built-in names allowed)."""
    spec = BUILTIN_MODELS.get(spec, spec)
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{spec!r}: expected 'module:factory' (e.g. mypkg.models:build)")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec!r} is not callable")
    return target


def resolve_device(name: str) -> torch.device:
    """``auto`` picks the first GPU when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device {name!r}: use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {name!r} asked for, but no CUDA GPU is available "
                f"(torch {torch.__version__}); use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {name!r} does not exist: this machine has {count} GPU(s)")
    return device


@dataclass
class InferenceTarget:
    """A model ready to run, with the way to make its batches.

    A synthetic target times the same batch again and again. A dataset target
    (`dataset_size` set) walks through its data: `batch_at(batch_size, index,
    device)` is the index-th batch (wrapping around, so every batch is full),
    `batch_of(indices, device)` the batch of those samples, and
    `predict(outputs)` the predicted label ids.
    """

    name: str
    model: nn.Module
    make_batch: Callable[[int, torch.device], Any]
    tokens_per_sample: int | None = None
    dataset_size: int | None = None
    batch_at: Callable[[int, int, torch.device], DatasetBatch] | None = None
    batch_of: Callable[[list[int], torch.device], DatasetBatch] | None = None
    predict: Callable[[Any], list[int]] | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class DatasetBatch:
    """One batch of a labelled dataset: model inputs, which samples, their labels."""

    inputs: Any
    indices: list[int]
    labels: list[int]
    tokens: int


def load_target(
    model_spec: str,
    *,
    device: torch.device,
    dtype: str = "float32",
    inputs_spec: str | None = None,
    input_shape: Sequence[int] | None = None,
) -> InferenceTarget:
    """Build the model from its factory, move it to `device`/`dtype` and find its inputs."""
    model = load_callable(model_spec)()
    if not isinstance(model, nn.Module):
        raise TypeError(f"{model_spec!r} returned {type(model).__name__}, not a torch.nn.Module")
    torch_dtype = DTYPES[dtype]
    model = model.to(device=device, dtype=torch_dtype).eval()
    own_maker = getattr(model, "make_batch", None)
    make_batch: Callable[[int, torch.device], Any]
    if inputs_spec:
        make_batch = load_callable(inputs_spec)
    elif callable(own_maker):
        make_batch = own_maker
    elif input_shape:
        shape = tuple(input_shape)

        def random_floats(batch_size: int, dev: torch.device) -> torch.Tensor:
            return torch.randn((batch_size, *shape), device=dev, dtype=torch_dtype)

        make_batch = random_floats

    else:
        raise ValueError(
            f"cannot make inputs for {model_spec!r}: give --inputs module:fn or --input-shape, "
            "or give the model a make_batch(batch_size, device) method"
        )
    tokens = getattr(model, "tokens_per_sample", None)
    return InferenceTarget(
        model_spec, model, make_batch, tokens if isinstance(tokens, int) else None
    )


def forward(model: nn.Module, batch: Any) -> Any:
    """Call the model on one batch (a dict as keywords, a tuple as positions)."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def model_size(model: nn.Module) -> dict[str, Any]:
    """Type, class, parameters and the bytes of parameters + buffers (MB = 10^6 bytes).

    The type is a Hugging Face model's ``config.model_type`` (``bert``,
    ``qwen2``), else the class name.
    """
    params = sum(p.numel() for p in model.parameters())
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    size += sum(b.numel() * b.element_size() for b in model.buffers())
    kind = getattr(getattr(model, "config", None), "model_type", None)
    return {
        "type": str(kind) if kind else type(model).__name__,
        "class": type(model).__name__,
        "parameters": float(params),
        "size_mb": size / 1e6,
    }
