"""`PlatformCallback.log_samples`: `{job_id}_samples.jsonl` through the metrics' writer."""

from __future__ import annotations

import logging
import math
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.callbacks.helpers import read_records, read_status
from training_platform.callbacks import PlatformCallback, platform_run
from training_platform.callbacks.wire.samples import decode_sample_line
from training_platform.callbacks.writer.samples import MAX_LINE_BYTES
from training_platform.demo import DemoConfig, run_demo
from training_platform.demo.grpo import GRPOConfig


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Every line of a samples file, decoded by the platform's own parser."""
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), "the last line must be complete"
    return [decode_sample_line(line) for line in raw.split(b"\n")[:-1]]


def texts(n: int, tag: str = "s") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_samples_round_trip_through_the_background_writer(tmp_path: Path) -> None:
    prompts = ["What is 17 * 23?", "Ünïcödé: 日本語 🙂", 'quotes " and \\ and\nnewlines']
    completions = ["<answer>391</answer>", "", "ok \u2028 \t end"]
    with platform_run("run", tmp_path, total_steps=2) as run:
        assert run.platform.background
        run.log(0, {"loss": 1.0})
        run.log_samples(
            0,
            prompts,
            completions,
            rewards=[1.0, math.nan, -math.inf],
            reward_components={"accuracy": [1.0, 0.0, math.nan], "format": [1, 0.5, 0.0]},
            groups=["p-1", "p-1", "p-2"],
            response_lengths=[14, 0, 7],
            finish_reasons=["stop", "length", "stop"],
            extra=[{"ground_truth": "391"}, None, {"nested": {"ok": [1, 2]}}],
        )
    samples = read_samples(tmp_path / "run_samples.jsonl")
    assert [(s["step"], s["index"]) for s in samples] == [(0, 0), (0, 1), (0, 2)]
    assert [s["prompt"] for s in samples] == prompts
    assert [s["completion"] for s in samples] == completions
    first, second, third = samples
    assert first["reward"] == 1.0 and math.isnan(second["reward"]) and third["reward"] == -math.inf
    assert first["rewards"] == {"accuracy": 1.0, "format": 1.0}
    assert math.isnan(third["rewards"]["accuracy"])
    assert [s["group"] for s in samples] == ["p-1", "p-1", "p-2"]
    assert [s["response_length"] for s in samples] == [14, 0, 7]
    assert [s["finish_reason"] for s in samples] == ["stop", "length", "stop"]
    assert [s["extra"] for s in samples] == [
        {"ground_truth": "391"},
        None,
        {"nested": {"ok": [1, 2]}},
    ]
    assert all(isinstance(s["timestamp"], float) for s in samples)
    # The metrics file is the metrics' alone; the status is untouched by samples.
    assert [r["step"] for r in read_records(tmp_path / "run_metrics.jsonl")] == [0]
    assert read_status(tmp_path / "run_status.json")["status"] == "completed"


def test_numpy_and_torch_columns_become_plain_values(tmp_path: Path) -> None:
    callback = PlatformCallback("np", tmp_path)
    callback.on_train_begin()
    logits = torch.tensor([0.5, 2.0], requires_grad=True)
    callback.log_samples(
        3,
        np.array(["a", "b"]),
        ("c", "d"),
        rewards=logits * 2,  # still on the graph: detached, not an error
        reward_components={"acc": np.array([1.0, np.nan], dtype=np.float32), "len": torch.ones(2)},
        groups=np.array([7, 7]),
        response_lengths=torch.tensor([3, 4]),
        finish_reasons=np.array(["stop", "length"]),
    )
    callback.log_samples(
        np.int64(4),  # type: ignore[arg-type]  # a numpy step is accepted
        ["e"],
        ["f"],
        rewards=[np.float32(0.25)],  # numpy scalars in a plain list
        reward_components=[{"acc": np.float64(1.0), "len": torch.tensor(0.5)}],
        response_lengths=[np.int64(9)],
    )
    callback.on_train_end()
    a, b, e = read_samples(tmp_path / "np_samples.jsonl")
    assert (a["prompt"], a["completion"], b["prompt"], b["completion"]) == ("a", "c", "b", "d")
    assert (a["reward"], b["reward"]) == (1.0, 4.0)
    assert a["rewards"] == {"acc": 1.0, "len": 1.0} and math.isnan(b["rewards"]["acc"])
    assert (a["group"], a["response_length"], b["finish_reason"]) == ("7", 3, "length")
    assert (e["step"], e["index"], e["reward"], e["response_length"]) == (4, 0, 0.25, 9)
    assert e["rewards"] == {"acc": 1.0, "len": 0.5}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_are_copied_to_the_host(tmp_path: Path) -> None:
    callback = PlatformCallback("cuda", tmp_path)
    callback.on_train_begin()
    rewards = torch.tensor([0.5, math.nan], device="cuda")
    callback.log_samples(0, ["a", "b"], ["c", "d"], rewards=rewards,
                         response_lengths=torch.tensor([1, 2], device="cuda"))  # fmt: skip
    rewards.fill_(9.0)  # the trainer reuses its buffer: the samples keep the old values
    callback.on_train_end()
    a, b = read_samples(tmp_path / "cuda_samples.jsonl")
    assert a["reward"] == 0.5 and math.isnan(b["reward"]) and b["response_length"] == 2


def test_a_second_call_for_a_step_continues_its_numbering(tmp_path: Path) -> None:
    callback = PlatformCallback("idx", tmp_path)
    callback.on_train_begin()
    callback.log_samples(0, texts(3), texts(3))
    callback.log_samples(0, texts(2), texts(2))
    callback.log_samples(1, texts(2), texts(2))
    callback.log_samples(0, texts(1), texts(1))  # back to step 0: still continued
    callback.on_train_end()
    keys = [(s["step"], s["index"]) for s in read_samples(tmp_path / "idx_samples.jsonl")]
    assert keys == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (0, 5)]
    assert len(set(keys)) == len(keys)


def test_the_cap_keeps_whole_groups_and_says_how_many_were_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    callback = PlatformCallback("cap", tmp_path, max_samples_per_step=10)
    callback.on_train_begin()
    groups = ["a", "b", "a", "c", "b", "a", "c", "b", "a", "c", "b", "c", "d"]  # 4 a, 4 b, 4 c, 1 d
    with caplog.at_level(logging.DEBUG, logger="training_platform.callbacks.writer.samples"):
        callback.log_samples(0, texts(13), texts(13, "c"), groups=groups)
    callback.on_train_end()
    samples = read_samples(tmp_path / "cap_samples.jsonl")
    # a and b fit (8), c (4 more) does not: whole groups, the first ones, in order.
    assert [s["group"] for s in samples] == ["a", "b", "a", "b", "a", "b", "a", "b"]
    assert [s["prompt"] for s in samples] == ["s0", "s1", "s2", "s4", "s5", "s7", "s8", "s10"]
    assert [s["index"] for s in samples] == list(range(8))
    messages = [r.getMessage() for r in caplog.records]
    assert any("kept 8 of 13" in m and "5 dropped" in m for m in messages), messages


def test_the_cap_counts_every_call_of_the_step(tmp_path: Path) -> None:
    callback = PlatformCallback("cap2", tmp_path, max_samples_per_step=10)
    callback.on_train_begin()
    callback.log_samples(0, texts(6), texts(6), groups=[0, 0, 0, 1, 1, 1])
    callback.log_samples(0, texts(6), texts(6), groups=[2, 2, 2, 3, 3, 3])  # room for one group
    callback.log_samples(0, texts(2), texts(2))  # no groups: the first samples that fit
    callback.log_samples(0, texts(1), texts(1))  # full: nothing
    callback.log_samples(1, texts(12), texts(12))  # a new step starts afresh
    callback.on_train_end()
    samples = read_samples(tmp_path / "cap2_samples.jsonl")
    step0 = [s for s in samples if s["step"] == 0]
    assert [s["group"] for s in step0] == ["0", "0", "0", "1", "1", "1", "2", "2", "2", None]
    assert [s["index"] for s in step0] == list(range(10))
    assert [s["index"] for s in samples if s["step"] == 1] == list(range(10))


def test_a_group_larger_than_the_cap_is_not_split(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    callback = PlatformCallback("big", tmp_path, max_samples_per_step=4)
    callback.on_train_begin()
    with caplog.at_level(logging.WARNING):
        callback.log_samples(0, texts(6), texts(6), groups=[0] * 6)
        callback.log_samples(1, texts(6), texts(6), groups=[0] * 6)
    callback.on_train_end()
    assert not (tmp_path / "big_samples.jsonl").exists()
    warnings = [r for r in caplog.records if "does not fit max_samples_per_step" in r.getMessage()]
    assert len(warnings) == 1  # once, not per step


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"completions": texts(2)}, "completions has 2 items but prompts has 3"),
        ({"rewards": torch.zeros(4)}, "rewards has 4 items but prompts has 3"),
        ({"groups": [0]}, "groups has 1 items"),
        ({"response_lengths": np.arange(2)}, "response_lengths has 2 items"),
        ({"finish_reasons": ["stop"] * 5}, "finish_reasons has 5 items"),
        ({"extra": [{}]}, "extra has 1 items"),
        ({"reward_components": {"acc": [1.0, 0.0]}}, "reward_components['acc'] has 2 items"),
        ({"reward_components": [{"acc": 1.0}]}, "reward_components has 1 items"),
    ],
)
@pytest.mark.parametrize("enabled", [True, False])
def test_mismatched_lengths_raise_at_the_call(
    tmp_path: Path, changes: dict[str, Any], message: str, enabled: bool
) -> None:
    callback = PlatformCallback("bad", tmp_path, enabled=enabled)
    arguments: dict[str, Any] = {"prompts": texts(3), "completions": texts(3), **changes}
    with pytest.raises(ValueError, match=re.escape(message)):
        callback.log_samples(0, **arguments)
    callback.on_train_end()
    assert not (tmp_path / "bad_samples.jsonl").exists()


def test_columns_of_the_wrong_kind_raise_at_the_call(tmp_path: Path) -> None:
    callback = PlatformCallback("kind", tmp_path)
    with pytest.raises(TypeError, match="prompts must be a sequence"):
        callback.log_samples(0, "one prompt", ["one completion"])
    with pytest.raises(TypeError, match=re.escape("completions[1] must be a string")):
        callback.log_samples(0, ["a", "b"], ["c", 3])
    with pytest.raises(TypeError, match="rewards must be a sequence"):
        callback.log_samples(0, ["a"], ["b"], rewards=torch.tensor(1.0))
    with pytest.raises(ValueError, match="step must be >= 0"):
        callback.log_samples(-1, ["a"], ["b"])
    with pytest.raises(ValueError, match="reward component names"):
        callback.log_samples(0, ["a"], ["b"], reward_components={"x" * 65: [1.0]})
    callback.on_train_end()


def test_a_sample_that_cannot_be_written_is_skipped_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    callback = PlatformCallback("skip", tmp_path)
    callback.on_train_begin()
    with caplog.at_level(logging.ERROR):
        for step in range(3):
            callback.log_samples(step, ["a", "b"], ["c", "d"], extra=[{"x": object()}, None])
        callback.on_train_end()
    samples = read_samples(tmp_path / "skip_samples.jsonl")
    assert [(s["step"], s["index"]) for s in samples] == [(0, 1), (1, 1), (2, 1)]
    assert len([r for r in caplog.records if "sample failed" in r.getMessage()]) == 1


def block_writer(callback: PlatformCallback) -> threading.Event:
    """Make the callback's writer wait, before each command, until the event is set."""
    gate = threading.Event()
    handle = callback.writer.handle

    def blocked(command: tuple[Any, ...]) -> None:
        gate.wait()
        handle(command)

    callback.writer.handle = blocked  # type: ignore[method-assign]
    return gate


def test_a_blocked_writer_does_not_block_log_samples_until_the_queue_is_full(
    tmp_path: Path,
) -> None:
    """The metrics' bounded-queue policy: calls return at once (no I/O on the
    training thread) until `queue_size` commands wait; then the training
    thread waits for the writer rather than dropping samples or growing."""
    callback = PlatformCallback("slow", tmp_path, queue_size=3)
    gate = block_writer(callback)
    callback.on_train_begin()
    returned: list[int] = []

    def training() -> None:
        for step in range(8):
            callback.log_samples(step, texts(4), texts(4))
            returned.append(step)

    worker = threading.Thread(target=training)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while len(returned) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(returned) >= 3  # returned while nothing could be written
        assert not (tmp_path / "slow_samples.jsonl").exists()
        time.sleep(0.2)
        assert len(returned) <= 4 and worker.is_alive()  # bounded: now it waits
    finally:
        gate.set()
        worker.join(timeout=30)
    callback.on_train_end()
    samples = read_samples(tmp_path / "slow_samples.jsonl")
    assert [(s["step"], s["index"]) for s in samples] == [
        (step, index) for step in range(8) for index in range(4)
    ]


def test_past_eight_waiting_calls_samples_are_dropped_never_waited_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stuck writer must not make a queue of half-megabyte calls grow without end,
    nor stop training: 8 calls wait, later ones drop their samples, warned once."""
    callback = PlatformCallback("stuck", tmp_path, queue_size=1000)
    gate = block_writer(callback)
    callback.on_train_begin()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="training_platform"):
        for step in range(20):
            callback.log_samples(step, texts(4), texts(4))
    assert time.monotonic() - started < 5  # never waited for the writer
    gate.set()
    callback.on_train_end()

    samples = read_samples(tmp_path / "stuck_samples.jsonl")
    assert sorted({s["step"] for s in samples}) == list(range(8))
    assert callback._sample_backlog.dropped_calls == 12
    warnings = [r for r in caplog.records if "samples dropped" in r.getMessage()]
    assert len(warnings) == 1 and "step 8" in warnings[0].getMessage()
    callback.log_samples(20, texts(4), texts(4))  # caught up: samples flow again
    callback.flush()
    assert {s["step"] for s in read_samples(tmp_path / "stuck_samples.jsonl")} >= {20}


def test_the_inline_writer_has_the_lines_in_the_file_when_the_call_returns(
    tmp_path: Path,
) -> None:
    callback = PlatformCallback("inline", tmp_path, background=False, fsync="always")
    callback.on_train_begin()
    callback.log_samples(0, texts(2), texts(2))
    assert len(read_samples(tmp_path / "inline_samples.jsonl")) == 2
    callback.on_train_end()


def test_samples_do_not_touch_the_status_and_other_ranks_write_nothing(tmp_path: Path) -> None:
    callback = PlatformCallback("quiet", tmp_path)
    callback.log_samples(0, ["a"], ["b"])  # before on_train_begin
    assert callback.flush()
    assert read_status(tmp_path / "quiet_status.json")["status"] == "pending"
    assert len(read_samples(tmp_path / "quiet_samples.jsonl")) == 1
    callback.on_train_begin()
    callback.on_train_end()

    other = PlatformCallback("rank1", tmp_path / "r1", enabled=False)
    other.log_samples(0, ["a"], ["b"])
    assert not (tmp_path / "r1").exists()


def test_the_demo_logs_what_its_policy_generated_every_step(tmp_path: Path) -> None:
    result = run_demo("demo", tmp_path, DemoConfig(steps=4, lr_spike_at=2))
    assert result.status == "completed"
    samples = read_samples(result.samples_path)
    records = read_records(result.metrics_path)
    assert len(samples) == 4 * 64
    for record in records:
        step = [s for s in samples if s["step"] == record["step"]]
        assert [s["index"] for s in step] == list(range(64))
        groups = [s["group"] for s in step]
        assert sorted(set(groups), key=int) == [str(g) for g in range(8)]
        assert all(groups.count(g) == 8 for g in set(groups))
        for s in step:  # one prompt per group
            assert len({t["prompt"] for t in step if t["group"] == s["group"]}) == 1
        # The samples are the step's rollout: their rewards and lengths are the metrics'.
        rewards = [s["reward"] for s in step]
        assert statistics.fmean(rewards) == pytest.approx(record["reward"]["mean"], abs=1e-5)
        assert max(rewards) == pytest.approx(record["reward"]["max"], abs=1e-6)
        mean_length = statistics.fmean(s["response_length"] for s in step)
        assert mean_length == pytest.approx(record["extra"]["response_length/mean"], abs=1e-5)
    for s in samples:
        assert re.fullmatch(r"Name \d (fruits|colours|animals|numbers)\.", s["prompt"])
        words = s["completion"].split()
        assert all(re.fullmatch(r"[a-z]+", w) for w in words)
        assert set(s["rewards"]) == {"allowed_tokens", "length"}
        assert s["reward"] == pytest.approx(
            0.5 * s["rewards"]["allowed_tokens"] + 0.5 * s["rewards"]["length"], abs=1e-6
        )
        if s["finish_reason"] == "length":  # ran to the limit: no EOS among its tokens
            assert len(words) == s["response_length"] == GRPOConfig().max_length
        else:  # the EOS counts in the length, not in the text
            assert s["finish_reason"] == "stop" and len(words) == s["response_length"] - 1


def test_the_demo_can_run_without_samples(tmp_path: Path) -> None:
    result = run_demo("plain", tmp_path, DemoConfig(steps=2, samples=False))
    assert result.status == "completed" and not result.samples_path.exists()


def test_a_samples_file_that_cannot_be_written_leaves_the_metrics_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "disk_samples.jsonl").mkdir()  # os.open fails for every batch
    callback = PlatformCallback("disk", tmp_path)
    with caplog.at_level(logging.ERROR):
        callback.on_train_begin()
        for step in range(5):
            callback.log(step, {"loss": 1.0})
            callback.log_samples(step, ["a"], ["b"])
        callback.on_train_end()
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and "RecordWriter.samples failed" in failures[0], failures
    assert [r["step"] for r in read_records(tmp_path / "disk_metrics.jsonl")] == list(range(5))
    assert read_status(tmp_path / "disk_status.json")["status"] == "completed"


def test_extra_dicts_are_snapshotted_and_a_refused_call_takes_no_index(tmp_path: Path) -> None:
    callback = PlatformCallback("snap", tmp_path, background=True)
    gate = block_writer(callback)
    callback.on_train_begin()
    reused = {"seen": 1}
    callback.log_samples(0, ["a"], ["b"], extra=[reused], reward_components=[{"acc": 1.0}])
    reused["seen"] = 2  # the trainer reuses its dict before the writer gets to it
    with pytest.raises(TypeError, match=re.escape("extra[0] must be a mapping")):
        callback.log_samples(0, ["c"], ["d"], extra=["not a mapping"])
    callback.log_samples(0, ["e"], ["f"])
    gate.set()
    callback.on_train_end()
    samples = read_samples(tmp_path / "snap_samples.jsonl")
    assert [(s["index"], s["prompt"]) for s in samples] == [(0, "a"), (1, "e")]
    assert samples[0]["extra"] == {"seen": 1} and samples[0]["rewards"] == {"acc": 1.0}


def test_a_sample_over_the_platforms_line_limit_is_cut_to_fit_and_says_so(tmp_path: Path) -> None:
    callback = PlatformCallback("long", tmp_path)
    callback.on_train_begin()
    completion = "é" * 700_000  # 1.4 MB of UTF-8: the platform would skip the line
    callback.log_samples(0, ["short prompt"], [completion], extra=[{"kept": True}])
    callback.log_samples(1, ["p"], ["c"])
    callback.on_train_end()
    lines = (tmp_path / "long_samples.jsonl").read_bytes().split(b"\n")[:-1]
    assert all(len(line) + 1 <= MAX_LINE_BYTES for line in lines)
    cut, plain = read_samples(tmp_path / "long_samples.jsonl")
    assert cut["prompt"] == "short prompt"
    assert 0 < len(cut["completion"]) < len(completion)
    assert completion.startswith(cut["completion"])
    assert cut["extra"] == {"kept": True, "truncated": {"completion": 700_000}}
    assert plain["extra"] is None
