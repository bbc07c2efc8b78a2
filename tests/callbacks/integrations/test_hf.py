"""The Hugging Face adapter against a real `transformers.Trainer` (tiny GPT-2, CPU, offline)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.callbacks.helpers import read_records, read_status  # noqa: E402
from training_platform.callbacks.integrations.hf import PlatformTrainerCallback  # noqa: E402


class TokenDataset(torch.utils.data.Dataset):  # type: ignore[misc,name-defined]
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, Any]:
        ids = torch.randint(0, 32, (8,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids.clone()}


class CorruptWeights(transformers.TrainerCallback):  # type: ignore[misc,name-defined]
    """Fills the weights with NaN after `at_step`: every later loss is NaN."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
        if state.global_step == self.at_step:
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.fill_(math.nan)


def make_trainer(tmp_path: Path, callbacks: list[Any], **arguments: Any) -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "hf"),
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 8,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "use_cpu": True,
        "disable_tqdm": True,
        "logging_nan_inf_filter": False,  # let a NaN loss reach the logs, as it really is
    }
    args = transformers.TrainingArguments(**{**settings, **arguments})
    return transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config),
        args=args,
        train_dataset=TokenDataset(),
        eval_dataset=TokenDataset(),
        callbacks=callbacks,
    )


def test_a_real_trainer_writes_one_line_per_step_with_logs_and_eval_merged(
    tmp_path: Path,
) -> None:
    callback = PlatformTrainerCallback("hf-run", tmp_path)
    trainer = make_trainer(
        tmp_path, [callback], max_steps=6, logging_steps=2, eval_strategy="steps", eval_steps=3
    )
    trainer.train()
    records = read_records(tmp_path / "hf-run_metrics.jsonl")
    newest = {r["step"]: r for r in records}  # the platform keeps a step's newest line
    assert sorted(newest) == [1, 2, 3, 4, 5, 6]
    assert "loss" not in newest[1]  # no log due at step 1: timing-only line, written at once
    assert newest[2]["loss"]["total_loss"] > 0
    assert newest[2]["gradient"]["actor_norm"] > 0
    assert "learning_rate" in newest[2]["extra"]
    assert "eval_loss" in newest[3]["extra"]
    assert newest[6]["extra"]["summary/train_runtime"] > 0  # the final summary, kept apart
    assert [r["step"] for r in records].count(4) == 1  # logged steps are written once
    status = read_status(tmp_path / "hf-run_status.json")
    assert (status["status"], status["current_step"], status["total_steps"]) == ("completed", 6, 6)
    run = json.loads((tmp_path / "hf-run_run.json").read_text())  # filled from the arguments
    assert run["framework"] == {"name": "transformers", "version": transformers.__version__}
    assert (run["config"]["max_steps"], run["config"]["eval_steps"]) == (6, 3)
    assert run["config"]["learning_rate"] == trainer.args.learning_rate


def test_stop_on_anomaly_stops_a_real_trainer_cleanly(tmp_path: Path) -> None:
    callback = PlatformTrainerCallback("hf-stop", tmp_path, stop_on_anomaly=True)
    trainer = make_trainer(tmp_path, [CorruptWeights(at_step=3), callback], max_steps=50)
    trainer.train()
    assert trainer.state.global_step == 4  # the first NaN step, not 50
    status = read_status(tmp_path / "hf-stop_status.json")
    assert status["status"] == "stopped"
    assert status["anomaly_reason"].startswith("nan_inf")
    last = read_records(tmp_path / "hf-stop_metrics.jsonl")[-1]
    assert last["step"] == 4
    assert math.isnan(last["loss"]["total_loss"])


def test_the_adapter_needs_a_job_id_or_a_platform_callback() -> None:
    with pytest.raises(ValueError, match="job_id"):
        PlatformTrainerCallback()
