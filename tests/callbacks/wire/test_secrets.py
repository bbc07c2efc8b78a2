"""Secrets in a run's metadata: one table of shapes, masked by the rules both sides share.

`CONFIG_CASES` and `ARGV_CASES` are also what tests/api/test_secrets_served.py
and tests/web/test_compare_secrets.py write into hand-made run files: every
secret in them carries `MARK` (or is one of `HEX_SECRETS`), so a response or
a page can be searched for any of them at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.run_file import RunInfo, json_config, run_payload
from training_platform.callbacks.wire.secrets import (
    MASK,
    is_secret_key,
    mask_argv,
    mask_config,
    mask_run,
    mask_text,
)

MARK = "S3CR3T"
HF = "hf_" + MARK + "abcdefghijklmnopqrstuvwxyz12"  # hf_ and 34 letters, as issued
SK = "sk-proj-" + MARK + "abcdefghijklmnop"
GHP = "ghp_" + MARK + "abcdefghijklmnopqrstuvwxyz0123"
WANDB_KEY = "0f" * 20  # 40 lowercase hex digits: a W&B API key ...
COMMIT = "1a2b3c4d5e" * 4  # ... and a git commit looks the same
HEX_SECRETS = (WANDB_KEY, "ab" * 20)

# (key, value, what is stored): the shapes a secret takes in a config.
CONFIG_CASES: list[tuple[str, Any, Any]] = [
    ("HF_TOKEN", HF, MASK),
    ("hubToken", f"x{MARK}", MASK),
    ("api_key", f"k-{MARK}", MASK),
    ("x-api-key", f"{MARK}", MASK),
    ("passphrase", f"correct horse {MARK}", MASK),
    ("authorization", f"Bearer {MARK}.abc", MASK),
    ("auth", f"Bearer {MARK}q", MASK),
    ("pwd", f"hunter2{MARK}", MASK),
    ("smtp_pass", f"hunter3{MARK}", MASK),
    ("cookie", f"session={MARK}", MASK),
    ("client_secret", [f"a{MARK}", f"b{MARK}"], [MASK, MASK]),
    ("aws_credentials", {"id": f"x{MARK}", "region": "eu"}, {"id": MASK, "region": MASK}),
    ("password", 123456, MASK),  # YAML reads an unquoted numeric password as a number
    ("tokens", {"hf": f"t{MARK}", "count": 3}, {"hf": MASK, "count": MASK}),
    ("secrets", {"db": {"user": "u", "pw": f"p{MARK}"}}, {"db": {"user": MASK, "pw": MASK}}),
    ("credentials", [f"c{MARK}"], [MASK]),
    ("api_tokens", [f"a{MARK}"], [MASK]),
    ("db_url", f"postgresql://u:hunter2{MARK}@db/x", f"postgresql://u:{MASK}@db/x"),
    ("broker", f"redis://:{MARK}@h:6379/0", f"redis://:{MASK}@h:6379/0"),
    (
        "notify",
        f"https://hooks.slack.com/services/T0/B0/{MARK}x",
        f"https://hooks.slack.com/{MASK}",
    ),
    (
        "alerts",
        f"https://discord.com/api/webhooks/1234/{MARK}",
        f"https://discord.com/api/webhooks/{MASK}",
    ),
    (
        "callback",
        f"https://example.com/cb?user=me&token={MARK}&X-Amz-Signature={MARK}",
        f"https://example.com/cb?user=me&token={MASK}&X-Amz-Signature={MASK}",
    ),
    ("repo", f"https://{GHP}@github.com/o/r", f"https://{MASK}@github.com/o/r"),
    ("model", HF, MASK),  # token-shaped, whatever the key
    ("openai", SK, MASK),
    ("gh", GHP, MASK),
    ("slack", f"xoxb-1234-{MARK}", MASK),
    ("aws", f"AKIA{MARK}{MARK}1234", MASK),
    ("wandb_login", WANDB_KEY, MASK),
    ("header", f"Authorization: Basic {MARK}b64", f"Authorization: Basic {MASK}"),
    ("basic", f"Basic dXNl{MARK}", f"Basic {MASK}"),
    ("env", [f"HF_TOKEN={MARK}", "LR=3"], [f"HF_TOKEN={MASK}", "LR=3"]),
    (
        "launch",
        f"python train.py --hub_token {MARK} --lr 3 --auth 'Bearer {MARK}'",
        f"python train.py --hub_token {MASK} --lr 3 --auth '{MASK}'",
    ),
]

# Keys and values that look a little like secrets and are not.
KEPT: dict[str, Any] = {
    "max_tokens": 512,
    "max_new_tokens": 1024,
    "num_tokens": 5,
    "tokens_per_step": 4096,
    "ppo_max_token_len_per_gpu": "${data.max_len}",  # an interpolation left unresolved
    "tokenizer": "Qwen/Qwen2.5-0.5B",
    "pad_token": "<|endoftext|>",
    "pad_token_id": 0,
    "eos_token": "</s>",
    "image_token": "<image>",
    "special_tokens": {"pad": "<pad>", "unk": "[UNK]"},
    "attention_mask": "causal",
    "pass_k": [1, 5, 10],
    "passes": 3,
    "author": "me",
    "auth_mode": "oauth",
    "prompt_key": "prompt",
    "reward_fn_key": "data_source",
    "max_key_len": 5,
    "secret_seed": 42,
    "empty_token": "",
    "use_auth_token": True,
    "hub_token": None,
    "model_revision": COMMIT,
    "git": {"commit": COMMIT},
    "model_path": f"/root/.cache/huggingface/hub/models--Qwen/snapshots/{COMMIT}",
    "url": "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct?revision=main",
    "remote": "ssh://git@github.com:22/o/r.git",
    "db_host": "db.internal:5432",
    "task": "task-abcdefghijklmnopqrstuvwxyz",
    "notes": "basic settings; Bearer of good news",
}

# (argv, what is stored): one option (or argument) of a command line each.
ARGV_CASES: list[tuple[list[str], list[str]]] = [
    (["--passphrase", f"pp{MARK}"], ["--passphrase", MASK]),
    (["--db", f"postgresql://u:{MARK}@h/d"], ["--db", f"postgresql://u:{MASK}@h/d"]),
    (["-p", f"pw{MARK}"], ["-p", MASK]),
    (["--auth", f"Bearer {MARK}"], ["--auth", MASK]),
    (["--hub_token", f"v{MARK}"], ["--hub_token", MASK]),
    ([f"--api-key={MARK}"], [f"--api-key={MASK}"]),
    ([f"trainer.wandb_api_key={MARK}"], [f"trainer.wandb_api_key={MASK}"]),
    ([f"HF_TOKEN={MARK}"], [f"HF_TOKEN={MASK}"]),
    (["--password", "314159"], ["--password", MASK]),
    (["--model", HF], ["--model", MASK]),
    (["--openai", SK], ["--openai", MASK]),
    ([WANDB_KEY], [MASK]),
    (["--wandb", "ab" * 20], ["--wandb", MASK]),
    (["--header", f"Authorization: Bearer {MARK}"], ["--header", f"Authorization: Bearer {MASK}"]),
    ([f"--webhook=https://hooks.slack.com/services/{MARK}"], [f"--webhook={MASK}"]),
]

ARGV_KEPT: list[str] = [
    "train.py", "--lr", "3e-6", "--max_tokens", "512", "--secret_seed", "42",
    "--revision", COMMIT, f"--model_revision={COMMIT}", "--author", "me",
    "--password", "--verbose", "actor.optim.lr=1e-6", "--pass_k", "5",
]  # fmt: skip


def secret_config() -> dict[str, Any]:
    return {key: value for key, value, _ in CONFIG_CASES}


def masked_config() -> dict[str, Any]:
    return {key: masked for key, _, masked in CONFIG_CASES}


def secret_argv() -> list[str]:
    return [arg for argv, _ in ARGV_CASES for arg in argv] + ARGV_KEPT


def masked_argv() -> list[str]:
    return [arg for _, masked in ARGV_CASES for arg in masked] + ARGV_KEPT


def assert_no_secret(text: str) -> None:
    """None of the table's secrets is in `text`."""
    assert MARK not in text
    for secret in HEX_SECRETS:
        assert secret not in text


@pytest.mark.parametrize(("key", "value", "masked"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_each_secret_shape_in_a_config_is_masked_and_keeps_its_key(
    key: str, value: Any, masked: Any
) -> None:
    assert mask_config({key: value}) == {key: masked}
    assert json_config({key: value}) == ({key: masked}, None)  # the callback's path
    assert mask_config({key: masked}) == {key: masked}  # idempotent: the platform re-masks


@pytest.mark.parametrize("key", list(KEPT))
def test_what_only_looks_secret_is_kept(key: str) -> None:
    assert mask_config({key: KEPT[key]}) == {key: KEPT[key]}


@pytest.mark.parametrize(("argv", "masked"), ARGV_CASES, ids=[" ".join(c[0]) for c in ARGV_CASES])
def test_each_secret_shape_on_the_command_line_is_masked(
    argv: list[str], masked: list[str]
) -> None:
    assert mask_argv(["train.py", *argv]) == ["train.py", *masked]
    assert mask_argv(masked) == masked


def test_options_that_only_look_secret_stay_on_the_command_line() -> None:
    assert mask_argv(ARGV_KEPT) == ARGV_KEPT


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("passphrase", True), ("authorization", True), ("auth", True), ("http_auth", True),
        ("pwd", True), ("db_pass", True), ("cookie", True), ("access_key_id", True),
        ("ssh_key", True), ("key", True), ("HFToken", True), ("tokens", True),
        ("webhook_url", True), ("author", False), ("auth_mode", False), ("pass_k", False),
        ("passes", False), ("bypass", False), ("max_tokens", False), ("tokenizer", False),
        ("eos_token", False), ("image_key", False), ("attention_mask", False),
    ],
)  # fmt: skip
def test_secret_keys_by_their_words(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_the_git_commit_of_a_run_file_is_kept_and_its_remote_masked() -> None:
    run = {
        "job_id": "j",
        "git": {"commit": COMMIT, "dirty": False, "remote": f"https://u:{MARK}@git.example/r"},
        "name": f"lr 3e-6 {HF}",
        "tags": ["grpo", SK],
        "command": "python train.py --hub_token X",  # another tool's: one text
    }
    assert mask_run(run) == {
        "job_id": "j",
        "git": {"commit": COMMIT, "dirty": False, "remote": f"https://u:{MASK}@git.example/r"},
        "name": f"lr 3e-6 {MASK}",
        "tags": ["grpo", MASK],
        "command": f"python train.py --hub_token {MASK}",
    }


def test_values_nested_past_the_depth_limit_are_masked_not_walked() -> None:
    deep: Any = f"x{MARK}"
    for _ in range(500):
        deep = {"a": [deep]}
    assert_no_secret(repr(mask_config(deep)))


def test_texts_keep_what_is_not_secret() -> None:
    assert mask_text("postgresql://db.internal:5432/x") == "postgresql://db.internal:5432/x"
    assert mask_text("http://[::1]:8080/x?model=gpt") == "http://[::1]:8080/x?model=gpt"
    assert mask_text(COMMIT, ("git", "commit")) == COMMIT
    assert mask_text(COMMIT) == MASK  # unnamed: could be a W&B key


def test_the_callback_writes_the_run_file_masked(tmp_path: Path) -> None:
    info = RunInfo(name=f"run {SK}", tags=["grpo", HF], config={**secret_config(), **KEPT})
    payload = run_payload("run-s", info, 0.0, argv=secret_argv())
    assert payload["config"] == {**masked_config(), **KEPT}
    assert payload["command"] == masked_argv()
    assert (payload["name"], payload["tags"]) == (f"run {MASK}", ["grpo", MASK])
    callback = PlatformCallback("run-s", tmp_path, config=secret_config(), project=f"p {GHP}")
    callback.on_train_begin(1)
    callback.on_train_end()
    written = (tmp_path / "run-s_run.json").read_text()
    assert_no_secret(written)
    assert json.loads(written)["config"] == masked_config()
