"""``trainer.add_callback(...)`` on verl's real ``RayPPOTrainer``: its real
``__init__`` and ``fit()`` run GRPO on CPU, with only the RPC layer stubbed
(the actor worker group, the rollout manager, the checkpoint manager)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.callbacks.helpers import read_records, read_status
from training_platform.callbacks import Callback, PlatformCallback, StopTraining
from training_platform.callbacks.base import Metrics

ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")

import numpy as np  # noqa: E402  (verl's own dependencies, present when verl is)
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from torch.utils.data import SequentialSampler  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.utils import Role  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils import tracking as verl_tracking  # noqa: E402
from verl.utils.dataset.rl_dataset import collate_fn  # noqa: E402

from training_platform.callbacks.integrations.verl_trainer import (  # noqa: E402
    add_callback,
    disable_callbacks,
    enable_callbacks,
)

RayPPOTrainer = ray_trainer.RayPPOTrainer
PROMPT, RESPONSE = 3, 2  # tokens per prompt and per response


def grpo_config(checkpoints: Path) -> Any:
    """The keys fit() reads for GRPO without critic or reference policy."""
    return OmegaConf.create(
        {
            "trainer": {
                "project_name": "proj", "experiment_name": "grpo-toy", "logger": ["console"],
                "total_epochs": 1, "total_training_steps": 3, "val_before_train": True,
                "test_freq": 2, "save_freq": 2, "default_local_dir": str(checkpoints),
                "default_hdfs_dir": None, "resume_mode": "disable", "balance_batch": False,
                "critic_warmup": 0, "esi_redundant_time": 0, "device": "cpu",
                "log_val_generations": 0, "v1": {"trainer_mode": "sync"},
            },
            "actor_rollout_ref": {
                "hybrid_engine": True, "model": {},
                "actor": {
                    "use_kl_loss": False, "loss_agg_mode": "token-mean", "loss_scale_factor": None,
                    "calculate_entropy": False, "entropy_coeff": 0.0, "ppo_mini_batch_size": 2,
                    "ppo_epochs": 1, "data_loader_seed": 1, "shuffle": False,
                    "checkpoint": {"async_save": False},
                },
                "rollout": {
                    "n": 2, "temperature": 1.0, "multi_turn": {"enable": False},
                    "val_kwargs": {"n": 1, "do_sample": False}, "agent": {"num_workers": 1},
                },
            },
            "algorithm": {
                "adv_estimator": "grpo", "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                "norm_adv_by_std_in_grpo": True, "kl_penalty": "kl",
            },
            "critic": {"enable": False},
            "reward": {"reward_model": {"enable": False}},
            "data": {
                "train_batch_size": 2, "val_batch_size": None, "dataloader_num_workers": 0,
                "validation_shuffle": False,
            },
            "global_profiler": {"steps": None, "profile_continuous_steps": False},
            "skip": {},
        }
    )  # fmt: skip


def prompt_row(index: int) -> dict[str, Any]:
    # What verl's RLHFDataset yields when the agent loop tokenizes: no ids yet.
    return {
        "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        "data_source": "toy",
        "reward_model": {"ground_truth": str(index)},
    }


class RolloutManager:
    """``async_rollout_manager``: fixed tokens, every other response scores 1."""

    def __init__(self) -> None:
        self.calls = 0

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        self.calls += 1
        n = len(prompts)
        prompt = torch.ones(n, PROMPT, dtype=torch.long)
        response = torch.full((n, RESPONSE), 2, dtype=torch.long)
        scores = torch.zeros(n, RESPONSE)
        scores[:, -1] = torch.arange(n, dtype=torch.float) % 2
        tensors = {
            "prompts": prompt,
            "responses": response,
            "input_ids": torch.cat([prompt, response], dim=1),
            "attention_mask": torch.ones(n, PROMPT + RESPONSE, dtype=torch.long),
            "position_ids": torch.arange(PROMPT + RESPONSE).expand(n, -1).clone(),
            "response_mask": torch.ones(n, RESPONSE, dtype=torch.long),
            "rm_scores": scores,
        }
        output: DataProto = DataProto.from_dict(
            tensors=tensors,
            non_tensors={"multi_modal_inputs": np.array([{} for _ in range(n)], dtype=object)},
            meta_info={"timing": {"agent_loop/generate_sequences/mean": 0.01}},
        )
        return output


class ActorWorkerGroup:
    """``actor_rollout_wg``: the calls fit() makes over Ray, answered locally."""

    def __init__(self, fail_at_step: int | None = None) -> None:
        self.fail_at_step = fail_at_step
        self.updates = 0
        self.saved: list[str] = []

    def compute_log_prob(self, batch: Any) -> Any:
        ids = batch["input_ids"]  # nested (no padding), as the real worker gets it
        for key, value in (("entropy", 0.5), ("log_probs", -1.0)):
            values = torch.full(ids.values().shape, value)
            batch[key] = torch.nested.nested_tensor_from_jagged(values, offsets=ids.offsets())
        tu.assign_non_tensor(batch, metrics={"mfu": 0.1})
        return batch

    def update_actor(self, batch: Any) -> Any:
        self.updates += 1
        if self.updates == self.fail_at_step:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        tu.assign_non_tensor(batch, metrics={"pg_loss": [0.25], "grad_norm": [0.5], "mfu": 0.2})
        return batch

    def save_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        self.saved.append(local_path)


class CheckpointManager:
    def update_weights(self, step: int) -> None:
        pass

    def sleep_replicas(self) -> None:
        pass


def build_trainer(checkpoints: Path, actor: ActorWorkerGroup | None = None) -> Any:
    """verl's real __init__; then what init_workers() would have set, stubbed."""
    tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0, decode=lambda ids, **_: "text")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "legacy trainer is deprecated"
        trainer = RayPPOTrainer(
            grpo_config(checkpoints),
            tokenizer=tokenizer,
            role_worker_mapping={Role.ActorRollout: object},
            resource_pool_manager=SimpleNamespace(get_n_gpus=lambda: 1),
            train_dataset=[prompt_row(i) for i in range(6)],
            val_dataset=[prompt_row(i) for i in range(2)],
            collate_fn=collate_fn,
            train_sampler=SequentialSampler(range(6)),
        )
    trainer.actor_rollout_wg = actor or ActorWorkerGroup()
    trainer.async_rollout_manager = RolloutManager()
    trainer.checkpoint_manager = CheckpointManager()
    return trainer


class Recorder(Callback):
    """Every hook as (name, step, payload); raises StopTraining at `stop_at` if set."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.events: list[tuple[str, Any, Any]] = []
        self.stop_at = stop_at

    def on_train_begin(self, total_steps: int | None = None) -> None:
        self.events.append(("train_begin", None, total_steps))

    def on_train_end(self) -> None:
        self.events.append(("train_end", None, None))

    def on_step_begin(self, step: int) -> None:
        self.events.append(("step_begin", step, None))

    def on_step_end(self, step: int, metrics: Metrics | None = None) -> None:
        self.events.append(("step_end", step, dict(metrics or {})))
        if step == self.stop_at:
            raise StopTraining("recorder asked to stop")

    def on_rollout_end(self, step: int, metrics: Metrics | None = None) -> None:
        self.events.append(("rollout_end", step, dict(metrics or {})))

    def on_evaluate(self, step: int, metrics: Metrics) -> None:
        self.events.append(("evaluate", step, dict(metrics)))

    def on_save(self, step: int, path: str | None = None) -> None:
        self.events.append(("save", step, path))

    def on_log(self, step: int, metrics: Metrics) -> None:
        self.events.append(("log", step, dict(metrics)))

    def on_exception(self, exc: BaseException) -> None:
        self.events.append(("exception", None, exc))

    def sequence(self) -> list[tuple[str, Any]]:
        return [(name, step) for name, step, _ in self.events]

    def payloads(self, name: str) -> list[Any]:
        return [payload for event, _, payload in self.events if event == name]


@pytest.fixture
def callbacks_enabled() -> Iterator[None]:
    enable_callbacks()
    yield
    disable_callbacks()


def test_the_real_fit_fires_every_hook_in_verls_order(
    tmp_path: Path, callbacks_enabled: None
) -> None:
    trainer = build_trainer(tmp_path)
    recorder = Recorder()
    trainer.add_callback(recorder)
    assert trainer.fit() is None
    assert recorder.sequence() == [
        ("train_begin", None),
        ("evaluate", 0), ("log", 0),  # val_before_train, logged at step 0
        ("step_begin", 1), ("rollout_end", 1), ("step_end", 1),
        ("step_begin", 2), ("rollout_end", 2), ("save", 2), ("evaluate", 2), ("step_end", 2),
        ("step_begin", 3), ("rollout_end", 3), ("save", 3), ("evaluate", 3), ("step_end", 3),
        ("train_end", None),
    ]  # fmt: skip
    assert recorder.payloads("train_begin") == [3]
    assert recorder.payloads("save") == [
        str(tmp_path / "global_step_2"), str(tmp_path / "global_step_3"),
    ]  # fmt: skip
    assert trainer.actor_rollout_wg.saved == [p + "/actor" for p in recorder.payloads("save")]
    # Training rollouts only (2 prompts x n=2); validation's 3 calls are not rollout ends.
    assert [m["rollout/sequences"] for m in recorder.payloads("rollout_end")] == [4, 4, 4]
    assert trainer.async_rollout_manager.calls == 6
    ends = recorder.payloads("step_end")
    assert [m["training/global_step"] for m in ends] == [1, 2, 3]
    assert all(m["actor/pg_loss"] == 0.25 and m["critic/score/mean"] == 0.5 for m in ends)
    assert "val-core/toy/reward/mean@1" in recorder.payloads("evaluate")[1]


def test_a_platform_callback_writes_the_same_files_as_the_tracking_backend(
    tmp_path: Path,
) -> None:
    trainer = build_trainer(tmp_path / "ckpt")
    add_callback(trainer, PlatformCallback("grpo-toy", tmp_path))  # one instance, class untouched
    assert not hasattr(RayPPOTrainer, "add_callback")
    trainer.fit()
    records = read_records(tmp_path / "grpo-toy_metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert "val-core/toy/reward/mean@1" in records[0]["extra"]
    for record in records[1:]:
        assert record["loss"] == {"actor_loss": 0.25}
        assert record["reward"] == {"mean": 0.5, "max": 1.0, "min": 0.0}
        assert record["gradient"] == {"actor_norm": 0.5}
        assert record["extra"]["rollout/sequences"] == 4
        assert "gen" in record["timing"]
    status = read_status(tmp_path / "grpo-toy_status.json")
    # 3 of 3, though the validation before training wrote a record at step 0.
    assert (status["status"], status["current_step"], status["total_steps"]) == ("completed", 3, 3)
    run = read_status(tmp_path / "grpo-toy_run.json")
    assert (run["project"], run["name"], run["framework"]["name"]) == ("proj", "grpo-toy", "verl")
    assert run["config"]["algorithm"]["adv_estimator"] == "grpo"


def test_an_error_in_the_actor_update_fails_the_run_and_propagates(tmp_path: Path) -> None:
    trainer = build_trainer(tmp_path / "ckpt", ActorWorkerGroup(fail_at_step=2))
    tracking_before = verl_tracking.Tracking
    recorder = Recorder()
    add_callback(trainer, recorder)
    add_callback(trainer, PlatformCallback("grpo-toy", tmp_path))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        trainer.fit()
    assert recorder.sequence()[-4:] == [
        ("step_begin", 2), ("rollout_end", 2), ("exception", None), ("train_end", None),
    ]  # fmt: skip
    assert isinstance(recorder.payloads("exception")[0], RuntimeError)
    status = read_status(tmp_path / "grpo-toy_status.json")
    assert status["status"] == "failed"
    assert "illegal memory access" in status["error"]
    # What fit() borrowed is given back, even on error.
    assert verl_tracking.Tracking is tracking_before
    assert "generate_sequences" not in vars(trainer.async_rollout_manager)


def test_stop_training_from_a_hook_stops_the_run_and_fit_returns(tmp_path: Path) -> None:
    trainer = build_trainer(tmp_path / "ckpt")
    recorder = Recorder(stop_at=2)
    add_callback(trainer, recorder)
    add_callback(trainer, PlatformCallback("grpo-toy", tmp_path))
    assert trainer.fit() is None
    assert trainer.actor_rollout_wg.updates == 2  # step 3 never ran
    assert recorder.sequence()[-3:] == [("step_end", 2), ("exception", None), ("train_end", None)]
    status = read_status(tmp_path / "grpo-toy_status.json")
    assert (status["status"], status["current_step"]) == ("stopped", 2)
    assert [r["step"] for r in read_records(tmp_path / "grpo-toy_metrics.jsonl")] == [0, 1, 2]


def test_only_the_trainer_given_a_callback_is_wrapped(tmp_path: Path) -> None:
    trainer, other = build_trainer(tmp_path / "a"), build_trainer(tmp_path / "b")
    add_callback(trainer, Recorder())
    add_callback(trainer, Recorder())  # a second callback wraps nothing twice
    assert trainer.fit.__wrapped__.__func__ is RayPPOTrainer.fit
    assert not {"fit", "_validate", "_get_gen_batch", "_save_checkpoint"} & vars(other).keys()


def test_enable_callbacks_is_idempotent_reversible_and_never_replaces_verls_own() -> None:
    enable_callbacks()
    enable_callbacks()
    assert callable(RayPPOTrainer.add_callback)
    disable_callbacks()
    assert not hasattr(RayPPOTrainer, "add_callback")
    assert not hasattr(RayPPOTrainer, "_trigger_callbacks")

    class NativeTrainer:
        def add_callback(self, callback: Callback) -> None: ...

    with pytest.raises(TypeError, match="exists already"):
        enable_callbacks(NativeTrainer)


def test_trigger_callbacks_fires_a_named_hook_and_rejects_unknown_names(
    tmp_path: Path, callbacks_enabled: None
) -> None:
    trainer = build_trainer(tmp_path)
    recorder = Recorder()
    trainer.add_callback(recorder)
    trainer._trigger_callbacks("on_save", 7, "/ckpt/global_step_7")
    assert recorder.events == [("save", 7, "/ckpt/global_step_7")]
    with pytest.raises(ValueError, match="unknown hook"):
        trainer._trigger_callbacks("on_rocket_launch", 7)
