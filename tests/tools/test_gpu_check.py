"""gpu-check: model sizes, memory formulas, verdicts, and the command on this machine."""

from __future__ import annotations

import json

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
    result = CliRunner().invoke(app, ["-m", "7B", "-m", "70B", "--memory-gib", "80"])
    assert result.exit_code == 0, result.output
    assert "Devices" in result.output
    lines = [line.split() for line in result.output.splitlines()]
    row_7b = next(line for line in lines if line[:1] == ["7B"])
    assert row_7b[1:3] == ["31.3", "✓"]  # fp32 inference: 7e9 * 4 * 1.2 bytes
    assert "✗" in row_7b  # full fine-tuning does not fit


def test_the_command_prints_json() -> None:
    result = CliRunner().invoke(app, ["--json", "-m", "350M"])
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
