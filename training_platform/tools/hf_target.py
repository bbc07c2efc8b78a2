"""A Hugging Face sequence classifier (and optionally labelled data) as an `InferenceTarget`.

The model and its tokenizer come from a local directory, the local Hugging
Face cache, or the Hub by name (downloaded when online; `hf_loading`). The
labelled data is a CSV or a Hugging Face dataset (``dataset_name`` and
``split``). The labels are mapped to the model's label ids, first found:
an explicit mapping (``--label-map``), the model's own ``label2id`` when it
names its labels (not the default ``LABEL_0``...) unless the data's labels
are integers it does not name (a hub dataset's class ids), integer labels
used as ids, or the sorted distinct labels. The mapping used is saved as
``label_mapping.json``; a label outside it is an error.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from training_platform.tools.hf_loading import load_hub_dataset, load_model_and_tokenizer
from training_platform.tools.inference_target import DTYPES, DatasetBatch, InferenceTarget

_DEFAULT_LABEL = re.compile(r"^LABEL_\d+$")


def load_hf_target(
    model_path: str,
    *,
    device: torch.device,
    dtype: str = "float32",
    dataset: Path | None = None,
    dataset_name: str | None = None,
    split: str = "test",
    text_column: str = "text",
    label_column: str = "label",
    max_length: int = 128,
    label_map: Mapping[str, int] | None = None,
    output_dir: Path | None = None,
) -> InferenceTarget:
    """Load the model and tokenizer, and the labelled data when given."""
    model, tokenizer, source = load_model_and_tokenizer(model_path)
    model = model.to(device=device, dtype=DTYPES[dtype]).eval()
    num_labels = int(model.config.num_labels)
    info: dict[str, Any] = {"hf_model": model_path, "loaded_from": source}
    info.update(num_labels=num_labels, max_length=max_length)

    def encode(texts: list[str], dev: torch.device) -> dict[str, torch.Tensor]:
        encoded = tokenizer(
            texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        return {key: value.to(dev) for key, value in encoded.items()}

    def synthetic(batch_size: int, dev: torch.device) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, int(model.config.vocab_size), (batch_size, max_length), device=dev)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    target = InferenceTarget(model_path, model, synthetic, tokens_per_sample=max_length, info=info)
    if dataset is not None:
        texts, raw_labels = read_labelled_csv(dataset, text_column, label_column)
        info["dataset"] = str(dataset)
    elif dataset_name is not None:
        texts, raw_labels = load_hub_dataset(dataset_name, split, text_column, label_column)
        info.update(dataset=dataset_name, split=split)
    else:
        return target
    mapping, source = label_mapping(raw_labels, model.config, num_labels, label_map)
    labels = [mapping[label] for label in raw_labels]
    info.update(samples=len(texts), label_mapping_source=source)
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        path = output_dir / "label_mapping.json"
        id2label = {str(i): label for label, i in sorted(mapping.items(), key=lambda kv: kv[1])}
        payload = {"label2id": mapping, "id2label": id2label, "source": source}
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        info["label_mapping_file"] = str(path)

    def batch_of(chosen: list[int], dev: torch.device) -> DatasetBatch:
        inputs = encode([texts[i] for i in chosen], dev)
        tokens = int(inputs["attention_mask"].sum()) if "attention_mask" in inputs else 0
        return DatasetBatch(inputs, chosen, [labels[i] for i in chosen], tokens)

    def batch_at(batch_size: int, index: int, dev: torch.device) -> DatasetBatch:
        return batch_of([(index * batch_size + j) % len(texts) for j in range(batch_size)], dev)

    def predict(outputs: Any) -> list[int]:
        logits = outputs.logits if hasattr(outputs, "logits") else outputs[0]
        return [int(x) for x in logits.argmax(dim=-1).tolist()]

    target.dataset_size = len(texts)
    target.batch_at = batch_at
    target.batch_of = batch_of
    target.predict = predict
    target.tokens_per_sample = None
    return target


def read_labelled_csv(
    path: Path, text_column: str, label_column: str
) -> tuple[list[str], list[str]]:
    """The text and label columns of a CSV with a header row (labels as written)."""
    if not path.is_file():
        raise ValueError(f"--dataset {str(path)!r}: no such file")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        missing = [c for c in (text_column, label_column) if c not in columns]
        if missing:
            raise ValueError(
                f"--dataset {path.name}: no column {', '.join(map(repr, missing))}; "
                f"its columns are {', '.join(map(repr, columns)) or 'none'} "
                "(choose with --text-column / --label-column)"
            )
        rows = [(row[text_column] or "", (row[label_column] or "").strip()) for row in reader]
    if not rows:
        raise ValueError(f"--dataset {path.name}: no rows")
    return [text for text, _ in rows], [label for _, label in rows]


def label_mapping(
    raw_labels: list[str],
    config: Any,
    num_labels: int,
    given: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], str]:
    """(label -> id, where the mapping came from); a ValueError for labels outside it."""
    distinct = sorted(set(raw_labels))
    config_map = dict(getattr(config, "label2id", None) or {})
    named = bool(config_map) and not all(_DEFAULT_LABEL.match(str(k)) for k in config_map)
    integers = all(label.lstrip("-").isdigit() for label in distinct)
    if given:
        mapping, source = {str(k): int(v) for k, v in given.items()}, "--label-map"
    elif named and (not integers or set(distinct) <= set(map(str, config_map))):
        mapping, source = {str(k): int(v) for k, v in config_map.items()}, "model config label2id"
    elif integers:
        # Ids already (a hub dataset's ClassLabel: IMDB's 0/1 against a model
        # that names them NEGATIVE/POSITIVE).
        mapping, source = {label: int(label) for label in distinct}, "integer labels as ids"
    else:
        mapping, source = {label: i for i, label in enumerate(distinct)}, "sorted distinct labels"
    unknown = [label for label in distinct if label not in mapping]
    if unknown:
        shown = ", ".join(map(repr, unknown[:5]))
        raise ValueError(
            f"labels {shown} are not in the label mapping ({source}: "
            f"{', '.join(map(repr, list(mapping)[:10]))})"
        )
    out_of_range = sorted({mapping[label] for label in distinct} - set(range(num_labels)))
    if out_of_range:
        raise ValueError(
            f"label ids {out_of_range} ({source}) are outside the model's {num_labels} labels"
        )
    return mapping, source
