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
    payload = json.loads((out / "baseline_metrics.json").read_text())
    by_size = {r["batch_size"]: r for r in payload["batch_size_metrics"]}
    # Every sample is run at least once per batch size: 10 samples in 10 and 3 batches.
    assert by_size[1]["runs"] == 10 and by_size[4]["runs"] == 3
    # Accuracy is over the whole dataset, so the same whatever the batch size.
    assert 0.0 <= by_size[1]["accuracy"] <= 1.0
    assert by_size[4]["accuracy"] == pytest.approx(by_size[1]["accuracy"])
    for r in by_size.values():
        assert r["tokens_per_second"] > 0 and r["samples_per_second"] > 0
    assert payload["settings"]["samples"] == 10
    assert payload["settings"]["loaded_from"] == "directory"
    assert payload["model_info"]["parameters"] > 1000
    assert (payload["model_type"], payload["model_info"]["class"]) == (
        "bert",
        "BertForSequenceClassification",
    )
    assert not (out / "profiler").exists() and not (out / "plots").exists()
    report = (out / "baseline_summary_report.txt").read_text()
    assert "MB" in report and "model type: bert (BertForSequenceClassification)" in report


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
    payload = json.loads((out / "baseline_metrics.json").read_text())
    assert [r["batch_size"] for r in payload["batch_size_metrics"]] == [2]


def run_bad(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--no-progress", "--skip-viz", "--skip-profiling"])
    assert result.exit_code == 2, result.output
    return result.output


def test_an_unknown_model_path_is_a_clear_error(tmp_path: Path) -> None:
    output = run_bad(["--hf-model", str(tmp_path / "nowhere"), "-o", str(tmp_path)])
    assert "no such directory" in output and "Traceback" not in output


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


FIXTURE_CONFIG = Path(__file__).parents[1] / "fixtures" / "inference" / "config.yaml"


def test_the_documents_config_yaml_as_written_runs_with_flags_for_this_machine(
    tmp_path: Path, tiny_classifier: Path
) -> None:
    # The file names a hub model, a hub dataset and a GPU; the flags put in the
    # local model, a local CSV and the CPU (a flag wins over the file).
    data = write_csv(tmp_path / "reviews.csv", reviews(10), ("text", "label"))
    out = tmp_path / "results"
    args = ["--config", str(FIXTURE_CONFIG), "--hf-model", str(tiny_classifier)]
    args += ["--dataset", str(data), "--device", "cpu", "--dtype", "float32", "-o", str(out)]
    result = CliRunner().invoke(app, [*args, "--skip-viz", "--skip-profiling", "--no-progress"])
    assert result.exit_code == 0, result.output
    payload = json.loads((out / "baseline_metrics.json").read_text())
    settings = payload["settings"]
    assert settings["batch_sizes"] == [1, 8, 16, 32, 64]
    assert (settings["warmup_runs"], settings["measured_runs"]) == (3, 10)
    assert settings["max_length"] == 512 and settings["sample_sizes"] == [100, 500, 1000]
    assert [r["batch_size"] for r in payload["batch_size_metrics"]] == [1, 8, 16, 32, 64]
    full = payload["full_dataset_metrics"]
    assert full["samples"] == 10 and full["accuracy"] == pytest.approx(
        payload["batch_size_metrics"][0]["accuracy"]
    )
    # 100, 500 and 1000 samples asked of a 10-sample CSV: each capped, and said so.
    per_size = payload["sample_size_metrics"]
    assert [(e["requested"], e["samples"], e["capped"]) for e in per_size] == [
        (100, 10, True),
        (500, 10, True),
        (1000, 10, True),
    ]
    report = (out / "baseline_summary_report.txt").read_text()
    assert "first 1000 (capped at the dataset's 10): accuracy" in report
    assert "Full dataset (10 samples): accuracy" in report
    with (out / "detailed_metrics.csv").open(newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 5
    assert list((out / "logs").glob("profile_inference_*.log"))


def test_sample_sizes_score_the_first_n_samples_of_a_nested_toml_config(
    tmp_path: Path, tiny_classifier: Path
) -> None:
    rows = reviews(12)
    data = write_csv(tmp_path / "reviews.csv", rows, ("text", "label"))
    config = tmp_path / "config.toml"
    config.write_text(
        f'[model]\nname = "{tiny_classifier}"\ndevice = "cpu"\ndtype = "fp32"\n'
        f'[dataset]\npath = "{data}"\nsample_sizes = [3, 7, 50]\n'
        "[profiling]\nbatch_sizes = [2]\nnum_warmup_runs = 0\nnum_measurement_runs = 1\n"
        f'max_length = 16\n[output]\ndir = "{tmp_path / "out"}"\nskip_viz = true\n'
    )
    args = ["--config", str(config), "--skip-profiling", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads((tmp_path / "out" / "baseline_metrics.json").read_text())
    assert payload["dtype"] == "float32" and payload["device"] == "cpu"

    # The model's own predictions, one text at a time: the first N decide each figure.
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_classifier)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tiny_classifier)
    with torch.inference_mode():
        right = [
            int(model(**tokenizer(text, return_tensors="pt")).logits.argmax())
            == int(label == "positive")
            for text, label in rows
        ]
    per_size = {e["requested"]: e for e in payload["sample_size_metrics"]}
    for n in (3, 7):
        assert per_size[n]["samples"] == n and not per_size[n]["capped"]
        assert per_size[n]["correct"] == sum(right[:n])
        assert per_size[n]["accuracy"] == pytest.approx(sum(right[:n]) / n)
        assert per_size[n]["samples_per_second"] > 0 and per_size[n]["batch_size"] == 2
    assert per_size[50]["samples"] == 12 and per_size[50]["capped"]
    assert payload["full_dataset_metrics"]["correct"] == sum(right)


def test_a_hub_name_offline_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    output = run_bad(["--hf-model", "example-org/never-cached-model", "-o", str(tmp_path)])
    assert output.strip().count("\n") == 0, output
    assert "not in the local Hugging Face cache" in output
    assert "the machine is offline (HF_HUB_OFFLINE=1)" in output


def test_a_hub_name_without_a_network_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from training_platform.tools import hf_loading

    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(
        hf_loading, "unreachable", lambda endpoint: f"the machine is offline ({endpoint}: down)"
    )
    output = run_bad(["--hf-model", "example-org/never-cached-model", "-o", str(tmp_path)])
    assert output.strip().count("\n") == 0, output
    assert "the machine is offline (https://huggingface.co: down)" in output


def test_an_unreachable_host_is_reported_not_raised() -> None:
    from training_platform.tools.hf_loading import unreachable

    # Port 9 (discard) on the loopback: nothing listens, the connection is refused at once.
    reason = unreachable("http://127.0.0.1:9")
    assert reason is not None and "127.0.0.1 cannot be reached" in reason


def test_a_hub_name_not_cached_takes_the_download_step_when_online(
    tmp_path: Path, tiny_classifier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training_platform.tools import hf_loading

    calls: list[tuple[str, bool]] = []

    def from_pretrained(kind: type) -> object:
        real = kind.from_pretrained

        def load(name: str, *, local_files_only: bool) -> object:
            calls.append((name, local_files_only))
            if local_files_only:  # not in the cache
                raise OSError("not cached")
            return real(tiny_classifier)  # what the Hub would have sent

        return load

    for kind in (transformers.AutoTokenizer, transformers.AutoModelForSequenceClassification):
        monkeypatch.setattr(kind, "from_pretrained", from_pretrained(kind))
    monkeypatch.setattr(hf_loading, "offline_reason", lambda: None)
    model, tokenizer, source = hf_loading.load_model_and_tokenizer("example-org/classifier")
    assert source == "downloaded from the Hugging Face Hub"
    assert calls[0] == ("example-org/classifier", True)  # the cache first
    assert ("example-org/classifier", False) in calls  # then the download
    assert model.config.model_type == "bert" and tokenizer("good film")["input_ids"]


def test_a_dataset_by_name_is_loaded_with_the_datasets_library(
    tmp_path: Path, tiny_classifier: Path
) -> None:
    datasets = pytest.importorskip("datasets", reason="hub datasets need the datasets package")
    folder = tmp_path / "imdb_like"
    folder.mkdir()
    texts, labels = zip(*reviews(6), strict=True)
    datasets.Dataset.from_dict(
        {"text": list(texts), "label": [int(x == "positive") for x in labels]}
    ).to_parquet(str(folder / "test.parquet"))
    config = tmp_path / "config.yaml"
    config.write_text(
        f"model:\n  name: {tiny_classifier}\n  device: cpu\n"
        f"dataset:\n  name: {folder}\n  split: test\n  sample_sizes: [4]\n"
        "profiling:\n  batch_sizes: [4]\n  num_warmup_runs: 0\n  num_measurement_runs: 1\n"
        f"output:\n  dir: {tmp_path / 'out'}\n"
    )
    args = ["--config", str(config), "--skip-viz", "--skip-profiling", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads((tmp_path / "out" / "baseline_metrics.json").read_text())
    assert payload["settings"]["samples"] == 6 and payload["settings"]["split"] == "test"
    assert payload["settings"]["label_mapping_source"] == "integer labels as ids"
    assert payload["sample_size_metrics"][0]["samples"] == 4
