"""gpu-check: model sizes, memory formulas, verdicts, and the command on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from training_platform.tools.cli import gpu_check
from training_platform.tools.gpu_check import (
    GIB,
    bytes_per_param,
    estimate,
    gpu_check_report,
    parse_model_size,
    resolve_model,
)

app = typer.Typer()
app.command()(gpu_check)


@pytest.mark.parametrize(
    ("text", "params"),
    [("7B", 7e9), ("1.5b", 1.5e9), ("350M", 3.5e8), ("1.2T", 1.2e12), ("13", 13e9), ("7e9", 7e9)],
)
def test_model_sizes_parse_with_suffixes(text: str, params: float) -> None:
    assert parse_model_size(text) == pytest.approx(params)


def test_a_size_without_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="7B"):
        parse_model_size("seven billion")


def test_bytes_per_parameter_follow_the_documented_formulas() -> None:
    assert bytes_per_param("inference_fp32", 0.01) == 4
    assert bytes_per_param("inference_bf16", 0.01) == 2
    assert bytes_per_param("inference_int8", 0.01) == 1
    assert bytes_per_param("full_finetune_adam_mixed", 0.01) == 16
    assert bytes_per_param("lora", 0.01) == pytest.approx(2.16)
    assert bytes_per_param("qlora", 0.01) == pytest.approx(0.66)


def test_a_7b_model_fits_an_80_gib_gpu_for_inference_but_not_for_full_fine_tuning() -> None:
    rows = {r.mode: r for r in estimate("7B", 7e9, overhead=0.2, lora_fraction=0.01, memory_gib=80)}
    assert rows["inference_fp16"].required_gib == pytest.approx(7e9 * 2 * 1.2 / GIB)
    assert rows["inference_fp16"].fits is True
    assert rows["full_finetune_adam_mixed"].required_gib == pytest.approx(7e9 * 16 * 1.2 / GIB)
    assert rows["full_finetune_adam_mixed"].fits is False
    assert rows["lora"].fits is True


def test_the_report_checks_against_given_memory() -> None:
    report = gpu_check_report(["1B"], memory_gib=4.0, overhead=0.0)
    verdicts = {row["mode"]: row["fits"] for row in report["estimates"]}
    assert report["memory_source"] == "given"
    assert verdicts["inference_fp16"] is True  # 1.86 GiB
    assert verdicts["inference_fp32"] is True  # 3.73 GiB
    assert verdicts["full_finetune_adam_mixed"] is False


def test_gpu_check_on_a_cpu_only_machine_checks_host_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    report = gpu_check_report(["7B"])
    assert report["devices"] == []
    assert "no CUDA GPU" in report["device_note"]
    assert report["memory_source"] == "host RAM, no GPU"
    assert report["memory_checked_gib"] == pytest.approx(report["host"]["memory_gib"])


def test_the_command_prints_a_table_with_verdicts() -> None:
    result = CliRunner().invoke(
        app, ["-m", "7B", "-m", "70B", "--memory-gib", "80", "--skip-throughput"]
    )
    assert result.exit_code == 0, result.output
    assert "Devices" in result.output
    lines = [line.split() for line in result.output.splitlines()]
    row_7b = next(line for line in lines if line[:1] == ["7B"])
    assert row_7b[1:3] == ["31.3", "✓"]  # fp32 inference: 7e9 * 4 * 1.2 bytes
    assert "✗" in row_7b  # full fine-tuning does not fit


def test_the_command_prints_json() -> None:
    result = CliRunner().invoke(app, ["--json", "-m", "350M", "--skip-throughput"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {row["mode"] for row in report["estimates"]} >= {"inference_int8", "lora"}
    assert "inference_fp32" in report["formulas"]


def test_the_command_refuses_a_bad_size() -> None:
    result = CliRunner().invoke(app, ["-m", "huge"])
    assert result.exit_code == 2
    assert "model size" in result.output


def test_gpu_inventory_lists_each_device() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    report = gpu_check_report(["7B"])
    assert len(report["devices"]) == torch.cuda.device_count()
    device = report["devices"][0]
    assert device["total_memory_gib"] > 0
    assert device["compute_capability"].count(".") == 1
    assert report["memory_source"].startswith("cuda:")


def test_named_models_resolve_to_their_parameter_counts() -> None:
    assert resolve_model("DeepSeek-Math-7B") == ("DeepSeek-Math-7B", 6.91e9)
    assert resolve_model("qwen2.5-0.5b") == ("Qwen2.5-0.5B", 0.49e9)
    assert resolve_model("deepseek-v3")[1] == 671e9  # served whole, not only the active 37B
    assert resolve_model("13B") == ("13B", 13e9)
    with pytest.raises(ValueError, match="Llama-3-70B"):
        resolve_model("Llama-9-1000")


def test_the_seed_tables_figures_and_ours_are_explained() -> None:
    # The seed's 78.2 GB for 7B training is 12 B/param without overhead; ours is 16 x 1.2.
    seed_training_gib = 7e9 * 12 / GIB
    assert seed_training_gib == pytest.approx(78.2, abs=0.05)
    rows = {
        r.mode: r for r in estimate("7B", 7e9, overhead=0.0, lora_fraction=0.01, memory_gib=None)
    }
    assert rows["inference_fp16"].required_gib == pytest.approx(13.0, abs=0.05)
    assert rows["full_finetune_adam_mixed"].required_gib == pytest.approx(104.3, abs=0.05)
    report = gpu_check_report(["7B"], benchmark=False)
    assert "78.2" in report["seed_differences"] and "125.2" in report["seed_differences"]


def test_the_default_table_lists_the_named_models(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    result = CliRunner().invoke(app, ["--skip-throughput", "--output", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("DeepSeek-Math-7B", "DeepSeek-Math-70B", "DeepSeek-V3 (37B active)"):
        assert name in result.output
    for name in ("Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B", "Llama-3-8B", "Llama-3-70B"):
        assert name in result.output
    report = json.loads(out.read_text())
    assert report["benchmark"] is None and "skipped" in report["benchmark_note"]
    assert "Throughput benchmark: skipped" in result.output
    modes = {row["mode"] for row in report["estimates"] if row["model"] == "Llama-3-8B"}
    assert {"inference_bf16", "full_finetune_adam_mixed", "lora", "qlora"} <= modes


def test_memory_now_and_the_benchmark_measure_this_machine(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "gpu.json"
    result = CliRunner().invoke(app, ["-m", "1B", "--output", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    memory = report["memory_now"][0]
    bench = report["benchmark"]
    assert bench["matmul"]["tflops"] > 0 and bench["matmul"]["repetitions"] >= 3
    assert bench["bandwidth"]["gb_per_s"] > 0
    if torch.cuda.is_available():
        assert memory["device"] == "cuda:0" and memory["free_gib"] <= memory["total_gib"]
        assert memory["allocated_by_this_process_gib"] >= 0
        assert bench["matmul"]["dtype"] in ("bfloat16", "float16")
    else:
        assert memory["device"] == "cpu" and memory["process_rss_gib"] > 0
        assert bench["measured"] == "the CPU (no GPU measured)"
        assert bench["matmul"]["dtype"] == "float32"
        assert "Throughput benchmark on the CPU (no GPU measured)" in result.output
    assert "Memory now" in result.output and "TFLOP/s" in result.output


def test_a_device_index_that_does_not_exist_is_refused() -> None:
    torch = pytest.importorskip("torch")
    missing = torch.cuda.device_count() if torch.cuda.is_available() else 0
    result = CliRunner().invoke(app, ["--device", str(missing), "--skip-throughput"])
    assert result.exit_code == 2
    assert f"device {missing} does not exist" in result.output


def test_one_named_gpu_is_reported_alone() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: no GPU on this machine")
    report = gpu_check_report(["7B"], device=0, benchmark=True, min_time_s=0.05)
    assert [d["index"] for d in report["devices"]] == [0]
    assert report["memory_now"][0]["reserved_by_this_process_gib"] >= 0
    assert report["benchmark"]["device"] == "cuda:0"


def test_the_text_report_speaks_to_the_user_not_about_the_seed_table() -> None:
    result = CliRunner().invoke(app, ["-m", "7B", "--skip-throughput"])
    assert result.exit_code == 0, result.output
    assert "seed" not in result.output.lower()
    assert "+20% overhead stands for activations" in result.output
    assert "raise --overhead" in result.output and "profile-inference" in result.output
    assert "mixture of experts" not in result.output  # no such model in this table
    with_moe = CliRunner().invoke(app, ["-m", "DeepSeek-V3", "--skip-throughput"])
    assert "A mixture of experts (DeepSeek-V3) must hold all its parameters" in with_moe.output
    as_json = CliRunner().invoke(app, ["-m", "7B", "--skip-throughput", "--json"])
    assert "78.2" in json.loads(as_json.output)["seed_differences"]  # kept for the record
