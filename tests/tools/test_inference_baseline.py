"""The Week-1 baseline's pieces of profile-inference: the nested config, GPU utilisation
(NVML) and the six-panel comparison, without a model to load."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="profile-inference profiles torch models")

from training_platform.tools.gpu_utilisation import GpuUtilisation, open_utilisation  # noqa: E402
from training_platform.tools.inference_config import flatten, load_config  # noqa: E402
from training_platform.tools.inference_plots import comparison_panels  # noqa: E402
from training_platform.tools.inference_report import render_sample_sizes  # noqa: E402
from training_platform.tools.inference_sweep import (  # noqa: E402
    InferenceTarget,
    run_sweep,
)

FIXTURE_CONFIG = Path(__file__).parents[1] / "fixtures" / "inference" / "config.yaml"
DOCUMENTS_SETTINGS = {
    "hf_model": "distilbert-base-uncased-finetuned-sst-2-english",
    "device": "cuda",
    "dtype": "float16",
    "dataset_name": "imdb",
    "split": "test",
    "text_column": "text",
    "label_column": "label",
    "sample_sizes": [100, 500, 1000],
    "batch_sizes": [1, 8, 16, 32, 64],
    "warmup": 3,
    "runs": 10,
    "max_length": 512,
}


def test_the_documents_config_yaml_maps_onto_the_command_options() -> None:
    assert load_config(FIXTURE_CONFIG) == DOCUMENTS_SETTINGS


def test_the_same_nested_config_in_toml(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[model]\nname = "distilbert-base-uncased-finetuned-sst-2-english"\n'
        'device = "cuda"\ndtype = "float16"\n'
        '[dataset]\nname = "imdb"\nsplit = "test"\ntext_column = "text"\n'
        'label_column = "label"\nsample_sizes = [100, 500, 1000]\n'
        "[profiling]\nbatch_sizes = [1, 8, 16, 32, 64]\nnum_warmup_runs = 3\n"
        "num_measurement_runs = 10\nmax_length = 512\n"
    )
    assert load_config(config) == DOCUMENTS_SETTINGS


def test_model_name_is_a_factory_a_built_in_or_a_hugging_face_model(tmp_path: Path) -> None:
    assert flatten({"model": {"name": "tiny"}}) == {"model": "tiny"}
    assert flatten({"model": {"name": "mypkg.models:build"}}) == {"model": "mypkg.models:build"}
    assert flatten({"model": {"name": "./models/verifier"}}) == {"hf_model": "./models/verifier"}
    csv_file = tmp_path / "dev.csv"
    csv_file.write_text("text,label\n")
    assert flatten({"dataset": {"name": str(csv_file)}}) == {"dataset": str(csv_file)}
    assert flatten({"model": {"dtype": "torch.bfloat16"}}) == {"dtype": "bfloat16"}
    # Flat keys as before, `model` and `dataset` among them when they are strings.
    flat = {"model": "tiny", "dataset": "d.csv", "warmup": 1, "skip_viz": True}
    assert flatten(flat) == flat


def test_an_unknown_nested_key_names_itself_and_its_sections_keys() -> None:
    with pytest.raises(ValueError) as error:
        flatten({"profiling": {"num_runs": 10}}, "config.yaml")
    message = str(error.value)
    assert message.startswith("--config config.yaml: unknown setting profiling.num_runs; ")
    assert "known in profiling: batch_sizes, num_warmup_runs, num_measurement_runs" in message
    assert "\n" not in message
    with pytest.raises(ValueError, match=r"unknown settings trainer; known: .* and the sections"):
        flatten({"trainer": {"lr": 1}})


def test_one_setting_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"profiling\.num_warmup_runs and warmup both set warmup"):
        flatten({"warmup": 1, "profiling": {"num_warmup_runs": 3}})


def test_the_utilisation_sampler_averages_its_readings_and_skips_failed_ones() -> None:
    readings = iter([40.0, RuntimeError("NVML: GPU is lost"), 60.0])
    polled = threading.Event()
    reads: list[object] = []

    def read() -> float:
        value = next(readings, 60.0)
        reads.append(value)
        if len(reads) >= 3:  # the three scripted readings are in
            polled.set()
        if isinstance(value, Exception):
            raise value
        return value

    sampler = GpuUtilisation(read, poll_s=0.001)
    sampler.start()
    assert polled.wait(5)
    reading = sampler.stop()
    assert reading is not None
    assert reading["max"] == 60.0 and 40.0 <= reading["mean"] < 60.0 and reading["samples"] >= 2
    assert GpuUtilisation(lambda: 1 / 0).stop() is None  # no reading: absent, not zero


def test_no_utilisation_on_the_cpu_and_a_reason_where_nvml_cannot_start() -> None:
    with open_utilisation(torch.device("cpu")) as (sampler, note):
        assert sampler is None and note == "not measured: the run is on the CPU"

    def fail() -> None:
        raise OSError("NVML Shared Library Not Found")

    broken = SimpleNamespace(nvmlInit=fail)
    with open_utilisation(torch.device("cuda:0"), nvml=broken) as (sampler, note):
        assert sampler is None
        assert note == "not measured: NVML unavailable (NVML Shared Library Not Found)"


def test_a_cuda_device_is_found_in_nvml_by_its_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU here: torch's device properties and NVML are stand-ins.
    calls: list[str] = []
    nvml = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda uuid: f"handle {uuid}",
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(
            gpu=87 if handle == "handle GPU-1234" else 0
        ),
    )
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda index: SimpleNamespace(uuid="1234")
    )
    with open_utilisation(torch.device("cuda:1"), nvml=nvml) as (sampler, note):
        assert sampler is not None and note == "NVML"
        sampler.start()
        assert sampler.stop() == {"mean": 87.0, "max": 87.0, "samples": pytest.approx(1, abs=10)}
    assert calls == ["init", "shutdown"]


def test_the_sweep_records_utilisation_during_the_timed_runs_only() -> None:
    model = torch.nn.Linear(4, 2)
    target = InferenceTarget("linear", model, lambda n, device: torch.zeros(n, 4))
    phase = {"timed": False}
    runs: list[Any] = []

    class Recorder(GpuUtilisation):
        def start(self) -> None:
            phase["timed"] = True
            runs.clear()

        def stop(self) -> dict[str, float] | None:
            phase["timed"] = False
            return {"mean": 55.0, "max": 90.0, "samples": 3.0}

    def on_run() -> None:
        runs.append(phase["timed"])

    (result,) = run_sweep(
        target,
        [2],
        device=torch.device("cpu"),
        warmup=2,
        runs=3,
        utilisation=Recorder(lambda: 0.0),
        on_run=on_run,
    )
    assert runs == [True, True, True]  # started after the warm-up, stopped after the timed runs
    assert (result.gpu_utilization_mean_pct, result.gpu_utilization_max_pct) == (55.0, 90.0)
    (plain,) = run_sweep(target, [2], device=torch.device("cpu"), warmup=0, runs=1)
    assert plain.gpu_utilization_mean_pct is None


def test_the_comparison_has_six_panels_with_memory_efficiency() -> None:
    model = torch.nn.Linear(4, 2)
    target = InferenceTarget("linear", model, lambda n, device: torch.zeros(n, 4))
    results = run_sweep(target, [1, 4], device=torch.device("cpu"), warmup=0, runs=2)
    panels = comparison_panels(results)
    assert [title for title, _ in panels] == [
        "latency per batch (ms)",
        "time per sample (ms)",
        "throughput (samples / s)",
        "memory (MiB)",
        "memory efficiency (samples/s per GiB)",
        "latency CV (std / mean)",  # no accuracy, no token count
    ]
    efficiency = panels[4][1]["samples/s per GiB"]
    assert efficiency == [r.samples_per_second_per_gib for r in results]
    assert all(value is not None and value > 0 for value in efficiency)


def test_capped_sample_sizes_are_said_in_the_report() -> None:
    entry = {
        "requested": 1000,
        "samples": 10,
        "capped": True,
        "batch_size": 8,
        "accuracy": 0.5,
        "correct": 5,
        "total_time_s": 0.01,
        "samples_per_second": 1000.0,
        "latency_per_sample_ms": 1.0,
    }
    text = render_sample_sizes({**entry, "requested": 10, "capped": False}, [entry])
    assert "Full dataset (10 samples): accuracy 0.5000 (5/10)" in text
    assert "first 1000 (capped at the dataset's 10): accuracy 0.5000 (5/10)" in text
