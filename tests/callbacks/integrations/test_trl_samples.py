"""`record_samples` with a real `trl.GRPOTrainer`: tiny GPT-2, in-memory tokenizer, CPU, offline."""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

from tests.callbacks.helpers import read_records  # noqa: E402
from training_platform.callbacks.integrations.hf import PlatformTrainerCallback  # noqa: E402
from training_platform.callbacks.integrations.trl import (  # noqa: E402
    AsyncRecordedReward,
    RecordedReward,
    record_samples,
)
from training_platform.callbacks.platform_callback import PlatformCallback  # noqa: E402
from training_platform.callbacks.wire.samples import decode_sample_line  # noqa: E402

WORDS = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(29)]
PAD, EOS = 0, 1
NUM_GENERATIONS = 3
PROMPTS_PER_STEP = 2
# One message per line, the assistant's turn opened at the end.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def tiny_tokenizer() -> Any:
    """A word-level tokenizer built in memory: ``"w3 w7"`` <-> ``[6, 10]``."""
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    backend.decoder = tokenizers.decoders.WordPiece()  # joins words with spaces
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_trainer(
    tmp_path: Path,
    reward_funcs: list[Any],
    prompts: list[Any],
    callback: Any,
    eval_prompts: list[Any] | None = None,
    **arguments: Any,
) -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(WORDS), n_positions=64, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD,
    )  # fmt: skip
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "grpo"),
        "per_device_train_batch_size": PROMPTS_PER_STEP * NUM_GENERATIONS,
        "num_generations": NUM_GENERATIONS,
        "max_completion_length": 6,
        "max_steps": 2,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "use_cpu": True,
        "bf16": False,
        "disable_tqdm": True,
        "seed": 0,
        "gradient_checkpointing": False,
    }
    settings.update(arguments)

    def dataset(prompts: list[Any]) -> Any:
        answers = [f"a{i}" for i in range(len(prompts))]
        return datasets.Dataset.from_dict({"prompt": prompts, "answer": answers})

    return trl.GRPOTrainer(
        model=transformers.GPT2LMHeadModel(config),
        reward_funcs=reward_funcs,
        args=trl.GRPOConfig(**settings),
        train_dataset=dataset(prompts),
        eval_dataset=None if eval_prompts is None else dataset(eval_prompts),
        processing_class=tiny_tokenizer(),
        callbacks=[callback],
    )


def read_samples(path: Path) -> dict[int, list[dict[str, Any]]]:
    """The samples file by step, each step's samples in index order."""
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_bytes().splitlines():
        sample = decode_sample_line(line)
        by_step[sample["step"]].append(sample)
    return {step: sorted(rows, key=lambda s: s["index"]) for step, rows in by_step.items()}


class Calls:
    """What TRL handed the reward functions, batch by batch (as the functions saw it)."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []

    def length_reward(self) -> Any:
        def length_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> Any:
            values = [float(len(ids)) for ids in kwargs["completion_ids"]]
            self.batches.append(
                {
                    "step": kwargs["trainer_state"].global_step + 1,
                    "prompts": list(prompts),
                    "completions": list(completions),
                    "completion_ids": [list(ids) for ids in kwargs["completion_ids"]],
                    "length_reward": values,
                }
            )
            return values

        return length_reward

    def format_reward(self) -> Any:
        async def format_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
            await asyncio.sleep(0)
            # None (no opinion) for each group's first completion, as TRL allows.
            values = [
                None if i % NUM_GENERATIONS == 0 else 0.25 * (i % 4)
                for i in range(len(completions))
            ]
            self.batches[-1]["format_reward"] = values
            return values

        return format_reward


def test_a_real_grpo_run_records_every_completion_with_its_rewards(tmp_path: Path) -> None:
    calls = Calls()
    callback = PlatformTrainerCallback("grpo-run", tmp_path)
    funcs = record_samples(callback, [calls.length_reward(), calls.format_reward()])
    assert isinstance(funcs[0], RecordedReward) and isinstance(funcs[1], AsyncRecordedReward)
    prompts = ["w1 w2", "w3 w4 w5", "w6", "w7 w8 w9 w10"]
    trainer = make_trainer(
        tmp_path, funcs, prompts, callback, eval_prompts=["w11 w12"], reward_weights=[1.0, 2.0],
        eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=NUM_GENERATIONS,
    )  # fmt: skip
    assert trainer.reward_func_names == ["length_reward", "format_reward"]  # names kept
    trainer.train()
    run = json.loads((tmp_path / "grpo-run_run.json").read_text())  # from the GRPOConfig
    assert run["framework"] == {"name": "trl", "version": trl.__version__}
    assert run["config"]["num_generations"] == NUM_GENERATIONS

    samples = read_samples(tmp_path / "grpo-run_samples.jsonl")
    # Two training batches, then the evaluation after step 2 (not recorded).
    training, evaluation = calls.batches[:2], calls.batches[2:]
    assert [batch["prompts"] for batch in evaluation] == [["w11 w12"] * NUM_GENERATIONS]
    assert sorted(samples) == [1, 2] == [batch["step"] for batch in training]
    for batch in training:
        rows = samples[batch["step"]]
        assert len(rows) == PROMPTS_PER_STEP * NUM_GENERATIONS
        assert [r["index"] for r in rows] == list(range(len(rows)))
        assert [r["prompt"] for r in rows] == batch["prompts"]
        assert [r["completion"] for r in rows] == batch["completions"]  # TRL's decoded texts
        assert all(isinstance(text, str) and text for text in batch["completions"])
        assert [r["rewards"]["length_reward"] for r in rows] == batch["length_reward"]
        assert [r["rewards"]["format_reward"] for r in rows] == batch["format_reward"]
        expected = [
            length + (0.0 if fmt is None else 2.0 * fmt)
            for length, fmt in zip(batch["length_reward"], batch["format_reward"], strict=True)
        ]
        assert [r["reward"] for r in rows] == pytest.approx(expected)
        # GRPO repeats each prompt num_generations times in a row: one group each.
        assert [r["group"] for r in rows] == [str(i // NUM_GENERATIONS) for i in range(len(rows))]
        for group in {r["group"] for r in rows}:
            assert len({r["prompt"] for r in rows if r["group"] == group}) == 1
        assert {r["prompt"] for r in rows} <= set(prompts)
        assert [r["response_length"] for r in rows] == [len(i) for i in batch["completion_ids"]]
        assert [r["finish_reason"] for r in rows] == [
            "stop" if ids[-1] in (EOS, PAD) else "length" for ids in batch["completion_ids"]
        ]
        assert all(r["extra"] is None for r in rows)

    # TRL got exactly what the functions returned, and its own "reward" metric
    # (the mean of the weighted sums) is the mean of the samples' rewards.
    logs = {entry["step"]: entry for entry in trainer.state.log_history if "reward" in entry}
    for step, rows in samples.items():
        assert logs[step]["reward"] == pytest.approx(
            sum(r["reward"] for r in rows) / len(rows), rel=1e-5
        )
        length_mean = sum(r["rewards"]["length_reward"] for r in rows) / len(rows)
        assert logs[step]["rewards/length_reward/mean"] == pytest.approx(length_mean, rel=1e-5)
    # The samples carry the step numbers of the metrics lines.
    metrics_steps = {record["step"] for record in read_records(tmp_path / "grpo-run_metrics.jsonl")}
    assert set(samples) <= metrics_steps


def test_conversational_prompts_record_the_assistant_text(tmp_path: Path) -> None:
    seen: list[tuple[list[Any], list[Any]]] = []

    def echo_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        seen.append((prompts, completions))
        return [1.0] * len(completions)

    callback = PlatformTrainerCallback("grpo-chat", tmp_path)
    prompts = [
        [{"role": "system", "content": "w20"}, {"role": "user", "content": f"w{i} w{i + 1}"}]
        for i in range(PROMPTS_PER_STEP)
    ]
    trainer = make_trainer(
        tmp_path, record_samples(callback, echo_reward), prompts, callback, max_steps=1
    )
    trainer.train()
    rows = read_samples(tmp_path / "grpo-chat_samples.jsonl")[1]
    ((batch_prompts, batch_completions),) = seen
    assert [r["completion"] for r in rows] == [c[0]["content"] for c in batch_completions]
    assert [r["prompt"] for r in rows] == [
        f"system: w20\n\nuser: {p[1]['content']}" for p in batch_prompts
    ]
    assert [r["reward"] for r in rows] == [1.0] * len(rows)
    assert [r["rewards"] for r in rows] == [{"echo_reward": 1.0}] * len(rows)


# -- the wrappers on their own (no trainer) ---------------------------------


def test_wrappers_return_what_the_functions_return_and_keep_their_kind(tmp_path: Path) -> None:
    platform = PlatformCallback("wrap", tmp_path, background=False)
    returned = [0.5, None]

    def plain(prompts: list[str], completions: list[str], **_: Any) -> list[Any]:
        return returned

    async def later(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [1.0, 2.0]

    def lazy(prompts: list[str], completions: list[str], **_: Any) -> Any:
        return iter([3.0, 4.0])  # an iterator: recording must not consume it

    model = torch.nn.Linear(1, 1)
    wrapped = record_samples(platform, [plain, later, "some/reward-model", model, lazy])
    assert wrapped[2] == "some/reward-model" and wrapped[3] is model  # scored by TRL itself
    assert [f.__name__ for f in (wrapped[0], wrapped[1], wrapped[4])] == ["plain", "later", "lazy"]
    batch = {"prompts": ["p", "p"], "completions": ["a", "b"]}
    assert wrapped[0](**batch) is returned
    assert asyncio.run(wrapped[1](**batch)) == [1.0, 2.0]
    assert list(wrapped[4](**batch)) == [3.0, 4.0]
    platform.on_train_end()
    rows = read_samples(tmp_path / "wrap_samples.jsonl")[1]  # no trainer: the 1st batch
    assert [r["rewards"] for r in rows] == [
        {"plain": 0.5, "later": 1.0, "lazy": None},
        {"plain": None, "later": 2.0, "lazy": None},
    ]
    assert [r["reward"] for r in rows] == [None, None]  # the iterator's values are unknown
    assert [r["group"] for r in rows] == ["0", "0"]  # one prompt: one group


def test_functions_of_one_name_get_distinct_components(tmp_path: Path) -> None:
    def score(prompts: list[str], completions: list[str], scale: float = 1.0, **_: Any) -> Any:
        return [scale * len(c) for c in completions]

    platform = PlatformCallback("names", tmp_path, background=False)
    funcs = record_samples(
        platform, [functools.partial(score, scale=1.0), functools.partial(score, scale=2.0)]
    )
    assert [f.__name__ for f in funcs] == ["score", "score"]  # what TRL names them
    batch = {"prompts": ["p", "q"], "completions": ["ab", "c"]}  # one batch: the same lists
    for func in funcs:
        func(**batch)
    platform.on_train_end()
    rows = read_samples(tmp_path / "names_samples.jsonl")[1]
    assert [r["rewards"] for r in rows] == [
        {"score": 2.0, "score_2": 4.0},
        {"score": 1.0, "score_2": 2.0},
    ]
    assert [(r["reward"], r["group"]) for r in rows] == [(6.0, "0"), (3.0, "1")]


def test_only_the_main_process_records(tmp_path: Path) -> None:
    class State:
        global_step = 4
        is_world_process_zero = False

    platform = PlatformCallback("rank1", tmp_path, background=False)
    (func,) = record_samples(platform, [lambda prompts, completions, **_: [1.0]])
    assert func(prompts=["p"], completions=["c"], trainer_state=State()) == [1.0]
    assert not (tmp_path / "rank1_samples.jsonl").exists()
    State.is_world_process_zero = True
    func(prompts=["p"], completions=["c"], trainer_state=State())
    platform.on_train_end()
    assert list(read_samples(tmp_path / "rank1_samples.jsonl")) == [5]  # global_step + 1


def test_record_samples_needs_a_platform_callback() -> None:
    with pytest.raises(TypeError, match="PlatformTrainerCallback"):
        record_samples(object(), [])
