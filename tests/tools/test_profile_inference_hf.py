"""profile-inference on a Hugging Face classifier and a labelled CSV, and its bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

torch = pytest.importorskip("torch", reason="profile-inference profiles torch models")
transformers = pytest.importorskip("transformers", reason="the Hugging Face path needs it")

from training_platform.tools.cli import profile_inference  # noqa: E402

app = typer.Typer()
app.command()(profile_inference)
WORDS = ["the", "a", "good", "bad", "movie", "great", "awful", "film", "plot", "acting"]


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 1-layer BERT classifier and its tokenizer, saved locally."""
    root = tmp_path_factory.mktemp("hf")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = transformers.BertTokenizer(str(vocab))
    config = transformers.BertConfig(
        vocab_size=len(WORDS) + 5,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    torch.manual_seed(0)
    model_dir = root / "model"
    transformers.BertForSequenceClassification(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


def write_csv(path: Path, rows: list[tuple[str, str]], header: tuple[str, str]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def reviews(n: int = 10) -> list[tuple[str, str]]:
    return [
        (f"the {WORDS[i % len(WORDS)]} film", "positive" if i % 2 else "negative") for i in range(n)
    ]


def test_a_local_classifier_on_a_labelled_csv_from_a_yaml_config(
    tmp_path: Path, tiny_classifier: Path
) -> None:
    data = write_csv(tmp_path / "reviews.csv", reviews(), ("review", "sentiment"))
    out = tmp_path / "out"
    config = tmp_path / "profile.yaml"
    config.write_text(
        f"hf_model: {tiny_classifier}\ndataset: {data}\ntext_column: review\n"
        f"label_column: sentiment\nbatch_sizes: [1, 4]\nmax_length: 16\nwarmup: 1\n"
        f"runs: 2\ndtype: float32\noutput_dir: {out}\nskip_viz: true\nskip_profiling: true\n"
    )
    result = CliRunner().invoke(app, ["--config", str(config), "--no-progress"])
    assert result.exit_code == 0, result.output
    mapping = json.loads((out / "label_mapping.json").read_text())
    assert mapping["label2id"] == {"negative": 0, "positive": 1}
    assert mapping["source"] == "model config label2id"
    payload = json.loads((out / "results.json").read_text())
    by_size = {r["batch_size"]: r for r in payload["results"]}
    # Every sample is run at least once per batch size: 10 samples in 10 and 3 batches.
    assert by_size[1]["runs"] == 10 and by_size[4]["runs"] == 3
    # Accuracy is over the whole dataset, so the same whatever the batch size.
    assert 0.0 <= by_size[1]["accuracy"] <= 1.0
    assert by_size[4]["accuracy"] == pytest.approx(by_size[1]["accuracy"])
    for r in by_size.values():
        assert r["tokens_per_second"] > 0 and r["samples_per_second"] > 0
    assert payload["settings"]["samples"] == 10
    assert payload["model_info"]["parameters"] > 1000
    assert not (out / "trace.json").exists() and not (out / "batch_size_comparison.png").exists()
    assert "MB" in (out / "report.txt").read_text()


def test_a_toml_config_and_flags_together_flags_win(tmp_path: Path, tiny_classifier: Path) -> None:
    data = write_csv(tmp_path / "d.csv", reviews(4), ("text", "label"))
    config = tmp_path / "profile.toml"
    config.write_text(
        f'hf_model = "{tiny_classifier}"\ndataset = "{data}"\nbatch_sizes = [1, 2]\n'
        "warmup = 0\nruns = 1\nskip_viz = true\nskip_profiling = true\n"
    )
    out = tmp_path / "out"
    args = ["--config", str(config), "-b", "2", "-o", str(out), "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "results.json").read_text())
    assert [r["batch_size"] for r in payload["results"]] == [2]


def run_bad(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--no-progress", "--skip-viz", "--skip-profiling"])
    assert result.exit_code == 2, result.output
    return result.output


def test_an_unknown_model_path_is_a_clear_error(tmp_path: Path) -> None:
    output = run_bad(["--hf-model", str(tmp_path / "nowhere"), "-o", str(tmp_path)])
    assert "nothing is downloaded at run time" in output


def test_a_csv_without_the_named_columns_is_refused(tmp_path: Path, tiny_classifier: Path) -> None:
    data = write_csv(tmp_path / "d.csv", reviews(4), ("sentence", "label"))
    args = ["--hf-model", str(tiny_classifier), "--dataset", str(data), "-o", str(tmp_path)]
    output = run_bad(args)
    assert "no column 'text'" in output and "'sentence'" in output


def test_labels_outside_the_mapping_are_refused(tmp_path: Path, tiny_classifier: Path) -> None:
    data = write_csv(tmp_path / "d.csv", [("good film", "neutral")], ("text", "label"))
    label_map = tmp_path / "labels.json"
    label_map.write_text(json.dumps({"negative": 0, "positive": 1}))
    args = ["--hf-model", str(tiny_classifier), "--dataset", str(data)]
    output = run_bad([*args, "--label-map", str(label_map), "-o", str(tmp_path)])
    assert "'neutral'" in output and "not in the label mapping" in output


def test_cuda_on_a_machine_without_a_gpu_is_a_clear_error(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    output = run_bad(["--device", "cuda", "-o", str(tmp_path)])
    assert "no CUDA GPU is available" in output and "--device cpu" in output


def test_a_gpu_index_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    missing = torch.cuda.device_count()
    output = run_bad(["--device", f"cuda:{missing}", "-o", str(tmp_path)])
    assert "does not exist" in output


def test_a_config_with_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("batch_size = 4\n")
    assert "unknown settings batch_size" in run_bad(["--config", str(config)])
