"""`{job_id}_run.json`: written once at train begin, JSON-safe, secrets masked."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import math
import socket
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.run_file import (
    MAX_CONFIG_BYTES,
    git_state,
    json_config,
    masked_command,
)


def read_run(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


class Mode(enum.Enum):
    FAST = "fast"


@dataclasses.dataclass
class Optim:
    lr: float = 3e-6
    betas: tuple[float, float] = (0.9, 0.95)
    mode: Mode = Mode.FAST


def test_the_run_file_is_on_disk_when_train_begin_returns(tmp_path: Path) -> None:
    callback = PlatformCallback(
        "run-a", tmp_path, project="math-grpo", name="lr 3e-6", tags=["grpo", "grpo", " qwen "],
        config={"actor": {"lr": 3e-6}, "rollout": {"n": 8}}, clock=lambda: 1704672000.0,
    )  # fmt: skip
    path = tmp_path / "run-a_run.json"
    assert not path.exists()  # not at construction: a run that never starts has none
    callback.on_train_begin(10)
    run = read_run(path)
    assert run["job_id"] == "run-a"
    assert (run["project"], run["name"], run["tags"]) == ("math-grpo", "lr 3e-6", ["grpo", "qwen"])
    assert run["config"] == {"actor": {"lr": 3e-6}, "rollout": {"n": 8}}
    assert run["host"] == socket.gethostname()
    assert run["started_at"] == 1704672000.0
    assert run["framework"]["name"] == "torch" and run["framework"]["version"] == torch.__version__
    assert isinstance(run["command"], list) and run["command"]
    callback.on_step_end(0, {"loss": 1.0})
    callback.on_train_end()
    assert read_run(path) == run  # written once, not rewritten at the end
    assert not list(tmp_path.glob(".*.tmp"))  # atomic: no temp file left behind


def test_only_the_writing_rank_writes_a_run_file(tmp_path: Path) -> None:
    callback = PlatformCallback("run-b", tmp_path, enabled=False, project="p")
    callback.on_train_begin(1)
    callback.on_train_end()
    assert not (tmp_path / "run-b_run.json").exists()


def test_configs_of_every_kind_become_json(tmp_path: Path) -> None:
    config = {
        "optim": Optim(),
        "path": Path("/data/gsm8k"),
        "scalar_tensor": torch.tensor(0.5),
        "small_tensor": torch.arange(3),
        "big_tensor": torch.zeros(100, 100),
        "numpy": np.float32(2.5),
        "array": np.arange(4),
        "nan": math.nan,
        "inf": -math.inf,
        "huge_int": 10**30,
        "set": {3, 1, 2},
        7: "int key",
        "bytes": b"\x00\x01",
    }
    converted, dropped = json_config(config)
    assert dropped is None and converted is not None
    assert converted["optim"] == {"lr": 3e-6, "betas": [0.9, 0.95], "mode": "fast"}
    assert converted["path"] == "/data/gsm8k"
    assert converted["scalar_tensor"] == 0.5
    assert converted["small_tensor"] == [0, 1, 2]
    assert converted["big_tensor"].startswith("<Tensor shape=[100, 100]")
    assert converted["numpy"] == 2.5 and converted["array"] == [0, 1, 2, 3]
    assert (converted["nan"], converted["inf"]) == ("NaN", "-Infinity")
    assert converted["huge_int"] == str(10**30)
    assert converted["set"] == [1, 2, 3]
    assert converted["7"] == "int key"
    assert converted["bytes"] == "<2 bytes>"
    json.dumps(converted, allow_nan=False)  # strictly JSON


def test_an_omegaconf_config_is_resolved(tmp_path: Path) -> None:
    config = OmegaConf.create(
        {"data": {"max_len": 512}, "actor": {"lr": 1e-6, "max_len": "${data.max_len}"},
         "missing": "${oops.nothing}"}
    )  # fmt: skip
    callback = PlatformCallback("run-omega", tmp_path, config=config)
    callback.on_train_begin(1)
    run = read_run(tmp_path / "run-omega_run.json")
    # One key that cannot resolve keeps every key, unresolved, rather than failing.
    assert run["config"]["actor"] == {"lr": 1e-6, "max_len": "${data.max_len}"}
    resolved, _ = json_config(OmegaConf.create({"a": 1, "b": "${a}"}))
    assert resolved == {"a": 1, "b": 1}
    callback.on_train_end()


def test_cycles_and_unserialisable_objects_are_converted_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cyclic: dict[str, Any] = {"name": "loop"}
    cyclic["self"] = cyclic
    shared = {"x": 1}
    config = {"cyclic": cyclic, "a": shared, "b": shared, "lock": object()}
    with caplog.at_level(logging.WARNING, logger="training_platform.callbacks.wire.run_file"):
        converted, _ = json_config(config)
    assert converted is not None
    assert converted["cyclic"] == {"name": "loop", "self": "<cycle>"}
    assert converted["a"] == converted["b"] == {"x": 1}  # shared is not cyclic
    assert converted["lock"].startswith("<object object at")
    (message,) = [r.getMessage() for r in caplog.records]
    assert "cyclic.self" in message and "lock" in message


def test_a_huge_config_is_dropped_with_the_reason(tmp_path: Path) -> None:
    config = {"blob": "x" * (MAX_CONFIG_BYTES + 1)}
    callback = PlatformCallback("run-huge", tmp_path, config=config, name="huge")
    callback.on_train_begin(1)
    run = read_run(tmp_path / "run-huge_run.json")
    assert run["config"] is None and "too large" in run["config_dropped"]
    assert run["name"] == "huge"  # the rest of the file is still there
    callback.on_train_end()


def test_secret_looking_keys_are_masked_but_numbers_and_token_counts_stay() -> None:
    """The shapes one by one: tests/callbacks/wire/test_secrets.py."""
    config = {
        "hub_token": "hf_abcdef",
        "wandb": {"api_key": "0123", "WANDB_API_KEY": "4567", "entity": "me"},
        "db_password": "hunter2",
        "client_secret": ["a", "b"],
        "aws_credentials": {"id": "x"},
        "ssh_key": "/home/me/.ssh/id",
        "max_new_tokens": 512,
        "max_prompt_tokens": 128,
        "tokenizer": "Qwen/Qwen2.5-0.5B",
        "pad_token": "<|endoftext|>",
        "pad_token_id": 0,
        "empty_token": "",
        "secret_seed": 42,
    }
    converted, _ = json_config(config)
    assert converted is not None
    for key in ("hub_token", "db_password", "ssh_key"):
        assert converted[key] == "***", key
    # Under a secret key, a list or an object keeps its shape, every value masked.
    assert converted["client_secret"] == ["***", "***"]
    assert converted["aws_credentials"] == {"id": "***"}
    assert converted["wandb"] == {"api_key": "***", "WANDB_API_KEY": "***", "entity": "me"}
    assert converted["max_new_tokens"] == 512 and converted["max_prompt_tokens"] == 128
    assert converted["tokenizer"] == "Qwen/Qwen2.5-0.5B"
    assert converted["pad_token"] == "<|endoftext|>" and converted["pad_token_id"] == 0
    assert converted["empty_token"] == "" and converted["secret_seed"] == 42


def test_secret_options_are_masked_in_the_command_line() -> None:
    argv = [
        "train.py", "--hub_token", "hf_xyz", "--api-key=abc", "--lr", "3e-6",
        "trainer.wandb_api_key=zzz", "actor.optim.lr=1e-6", "--password", "--verbose",
    ]  # fmt: skip
    assert masked_command(argv) == [
        "train.py", "--hub_token", "***", "--api-key=***", "--lr", "3e-6",
        "trainer.wandb_api_key=***", "actor.optim.lr=1e-6", "--password", "--verbose",
    ]  # fmt: skip


def test_the_git_state_of_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert git_state(tmp_path) is None  # not a work tree
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=repo, check=True, capture_output=True, text=True,
        )  # fmt: skip
        return done.stdout.strip()

    git("init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    git("add", "train.py")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "HEAD")
    assert git_state(repo) == {"commit": head, "dirty": False}
    (repo / "untracked.txt").write_text("scratch")
    assert git_state(repo) == {"commit": head, "dirty": False}  # untracked files don't count
    (repo / "train.py").write_text("print(2)\n")
    assert git_state(repo) == {"commit": head, "dirty": True}
    monkeypatch.chdir(repo)
    callback = PlatformCallback("run-git", tmp_path / "out")
    callback.on_train_begin(1)
    assert read_run(tmp_path / "out" / "run-git_run.json")["git"] == {"commit": head, "dirty": True}
    callback.on_train_end()
