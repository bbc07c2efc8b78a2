"""Diagnosis from samples: silent on healthy varied runs, each fault caught at its step."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from typing import Any

import pytest

from training_platform.callbacks.wire.samples import build_sample, normalize_sample
from training_platform.live.sample_detectors import SampleMonitor
from training_platform.live.sample_step import SampleDetectorConfig, SampleFinding, repetition

Sample = dict[str, Any]
FAULT_STEP = 120
LIMIT = 256  # the generation length limit of the simulated trainer

_WORDS = """
the a of to and in is that we it for as with by this be are on from at an or so
let us compute value number sum product divide multiply first then next finally
answer result check step equation solve variable term factor prime square root
because since therefore thus hence given assume suppose note that gives yields
total remaining each per half twice three four five seven nine eleven hundred
apples boxes train speed hours minutes distance price cost profit rate percent
triangle circle area radius angle side length width height volume ratio mean
"""
VOCAB = tuple(_WORDS.split())


def healthy_step(
    rng: random.Random, step: int, *, groups: int = 4, size: int = 8, shape: str = "full"
) -> list[Sample]:
    """One step of a healthy GRPO run: `groups` prompts x `size` varied completions.

    Rewards are accuracy (a prompt's difficulty, rising with training) plus a
    format bonus, now and then NaN; a few completions are cut by length, a
    few are short wrong answers, and the odd one loops, as in real runs.
    `shape`: "full" (every field), "lengths" (no finish_reason), "minimal"
    (the required fields only, as raw dicts missing the other keys), "flat"
    (no groups).
    """
    samples = []
    skill = min(0.8, 0.2 + step / 400)
    for g in range(groups):
        prompt = f"Problem {step}-{g}: what is {rng.randint(2, 99)} * {rng.randint(2, 99)}?"
        chance = max(0.05, min(0.95, skill + rng.uniform(-0.3, 0.3)))
        for m in range(size):
            text, length, finish = completion(rng)
            correct = rng.random() < chance and len(text) > 2
            reward = float(correct) + (0.1 if rng.random() < 0.9 and len(text) > 2 else 0.0)
            if rng.random() < 0.01:
                reward = math.nan
            index = g * size + m
            if shape == "minimal":
                samples.append({"step": step, "index": index, "prompt": prompt, "completion": text})
                continue
            raw = build_sample(
                step,
                index,
                prompt,
                text,
                reward=reward,
                group=None if shape == "flat" else f"p-{step:04d}-{g}",
                response_length=length,
                finish_reason=None if shape == "lengths" else finish,
                timestamp=1000.0 + step,
            )
            samples.append(normalize_sample(raw))
    return samples


def completion(rng: random.Random) -> tuple[str, int, str]:
    """(text, response_length, finish_reason) of one healthy completion."""
    roll = rng.random()
    if roll < 0.03:
        return str(rng.randint(0, 999)), 2, "stop"  # a bare (wrong-format) answer
    if roll < 0.04:
        return "", 0, "stop"
    if roll < 0.06:
        return "Let me think. " + "hmm " * rng.randint(30, 60), LIMIT, "length"  # an odd loop
    words = rng.randint(3, 160)
    text = " ".join(rng.choices(VOCAB, k=words))
    text = text.capitalize() + rng.choice([".", "!", f" <answer>{rng.randint(0, 999)}</answer>"])
    if rng.random() < 0.04:
        return text, LIMIT, "length"
    return text, min(LIMIT - 1, int(words * 1.4) + rng.randint(0, 9)), "stop"


def warmed_monitor(
    seed: int = 7, config: SampleDetectorConfig | None = None, **step_options: Any
) -> tuple[SampleMonitor, random.Random]:
    """A monitor that has seen healthy steps 0 .. FAULT_STEP - 1 without a finding.

    Each test gets its own copy of a warm-up shared by the tests that ask for
    the same one: the warm-up is the slow part of this file.
    """
    key = (seed, config, tuple(sorted(step_options.items())))
    if key not in _WARMED:
        monitor, rng = SampleMonitor(config), random.Random(seed)
        for step in range(FAULT_STEP):
            assert monitor.check(healthy_step(rng, step, **step_options)) == [], step
        _WARMED[key] = (monitor, rng)
    return copy.deepcopy(_WARMED[key])


_WARMED: dict[tuple[Any, ...], tuple[SampleMonitor, random.Random]] = {}


def fault_findings(
    inject: Callable[[list[Sample]], None], seed: int = 7, **step_options: Any
) -> list[SampleFinding]:
    """The findings at FAULT_STEP of a healthy run whose step FAULT_STEP `inject` spoils."""
    monitor, rng = warmed_monitor(seed, **step_options)
    samples = healthy_step(rng, FAULT_STEP, **step_options)
    inject(samples)
    return monitor.check(samples)


def only(findings: list[SampleFinding], kind: str) -> SampleFinding:
    assert [f.type for f in findings] == [kind], findings
    finding = findings[0]
    assert finding.step == FAULT_STEP
    return finding


def only_at(findings: list[SampleFinding], kind: str, step: int) -> SampleFinding:
    assert [(f.type, f.step) for f in findings] == [(kind, step)], findings
    return findings[0]


def cut(samples: list[Sample], indexes: range | list[int]) -> None:
    """Exactly `indexes` end by length: the others finish on their own."""
    for s in samples:
        s.update(response_length=100, finish_reason="stop")
    for i in indexes:
        samples[i].update(response_length=LIMIT, finish_reason="length")


def tidy(samples: list[Sample]) -> None:
    """No loops nor (near-)empty completions but the ones a test injects."""
    for s in samples:
        if len(s["completion"].strip()) <= 2 or repetition(s["completion"]) >= 0.75:
            s["completion"] = f"A fine answer, number {s['index']}."


# --- healthy runs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "seed"), [("full", 1), ("full", 2), ("lengths", 3), ("minimal", 4), ("flat", 5)]
)
def test_a_healthy_varied_run_of_200_steps_raises_nothing(shape: str, seed: int) -> None:
    monitor, rng = SampleMonitor(), random.Random(seed)
    for step in range(200):
        assert monitor.check(healthy_step(rng, step, shape=shape)) == [], step


def test_healthy_steps_of_many_small_groups_raise_nothing() -> None:
    monitor, rng = SampleMonitor(), random.Random(3)
    for step in range(200):
        assert monitor.check(healthy_step(rng, step, groups=16, size=4)) == [], step


def test_the_healthy_generator_does_contain_the_near_misses() -> None:
    """The healthy run is no straw man: it has cut, looping, short and NaN samples."""
    rng = random.Random(1)
    samples = [s for step in range(200) for s in healthy_step(rng, step)]
    assert sum(s["finish_reason"] == "length" for s in samples) > 200
    assert sum(repetition(s["completion"]) >= 0.75 for s in samples) > 50
    assert sum(s["completion"] == "" for s in samples) > 20
    assert sum(s["reward"] is not None and math.isnan(s["reward"]) for s in samples) > 20


# --- truncation ------------------------------------------------------------------------


def test_a_step_cut_by_length_is_caught_with_its_figures() -> None:
    finding = only(fault_findings(lambda s: cut(s, range(4, 32))), "truncation")
    assert finding.severity == "warning"
    assert finding.evidence == tuple(range(4, 24))  # at most 20, in order
    assert finding.message.startswith(
        "28 of 32 completions (88%) ended by length (finish_reason 'length'"
    )


def test_truncation_without_finish_reasons_is_read_from_the_shared_maximum_length() -> None:
    monitor, rng = warmed_monitor(shape="lengths")
    samples = healthy_step(rng, FAULT_STEP, shape="lengths")
    for i in [*range(1, 32, 2), *range(0, 32, 6)]:  # with the healthy ones at LIMIT: >= 22
        samples[i]["response_length"] = LIMIT
    at_limit = [s["index"] for s in samples if s["response_length"] == LIMIT]
    finding = only(monitor.check(samples), "truncation")
    assert finding.evidence == tuple(at_limit[:20])
    assert f"{len(at_limit)} of 32 completions" in finding.message
    assert f"at the step's maximum length {LIMIT}" in finding.message
    assert "finish_reason" not in finding.message


def test_every_completion_cut_is_critical() -> None:
    finding = only(fault_findings(lambda s: cut(s, range(32))), "truncation")
    assert finding.severity == "critical"
    assert "32 of 32 completions (100%)" in finding.message


@pytest.mark.parametrize("count", [3, 12, 15])
def test_a_mixed_step_with_some_cut_is_not_truncation(count: int) -> None:
    assert fault_findings(lambda samples: cut(samples, range(count))) == []


def test_half_the_step_cut_is_the_threshold() -> None:
    finding = only(fault_findings(lambda samples: cut(samples, range(1, 32, 2))), "truncation")
    assert finding.message.startswith("16 of 32 completions (50%)")
    assert finding.evidence == tuple(range(1, 32, 2))


def test_short_fixed_format_answers_sharing_their_length_are_not_truncation() -> None:
    def inject(samples: list[Sample]) -> None:
        for s in samples:
            s.update(completion="<answer>B</answer>", response_length=7, finish_reason=None)

    assert [f.type for f in fault_findings(inject)] == []


# --- degenerate output -----------------------------------------------------------------

LOOPS = (
    "!" * 300,
    "the " * 120,
    "I am sorry. " * 40,
    "The answer is 12 because 3 * 4 = 12. " + "and so on " * 80,
    "我不知道" * 50,
    "ha" * 200,
    "Step: compute the value.\n" * 30,
    "." * 64,
)


def test_completions_collapsing_into_loops_are_caught() -> None:
    faulty = [3, 7, 9, 14, 18, 22, 27, 31]

    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for i, text in zip(faulty, LOOPS, strict=True):
            samples[i]["completion"] = text

    finding = only(fault_findings(inject), "degenerate_output")
    assert finding.severity == "warning"
    assert sorted(finding.evidence) == faulty
    assert finding.evidence[0] == 3  # "!!!…" scores 100%: the worst first
    assert finding.message.startswith("8 of 32 completions (25%) are mostly repetition")
    assert "worst: index 3, 100% repeated, '!!!!!" in finding.message


def test_half_the_step_looping_is_critical() -> None:
    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for i in range(16):
            samples[i]["completion"] = LOOPS[i % len(LOOPS)]

    finding = only(fault_findings(inject), "degenerate_output")
    assert finding.severity == "critical"
    assert sorted(finding.evidence) == list(range(16))


@pytest.mark.parametrize("count", [2, 5])
def test_a_few_loops_in_a_step_are_normal(count: int) -> None:
    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for i in range(count):
            samples[i * 5]["completion"] = LOOPS[i]

    assert fault_findings(inject) == []


@pytest.mark.parametrize("same", [8, 7])
def test_a_group_writing_one_text_is_caught_with_its_key(same: int) -> None:
    text = "To solve this we multiply the two numbers and get <answer>391</answer>."

    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for i in range(16, 16 + same):
            samples[i]["completion"] = text if i % 2 else text.upper()  # case does not matter

    finding = only(fault_findings(inject), "degenerate_output")
    assert finding.severity == "warning"
    assert finding.evidence == tuple(range(16, 16 + same))
    assert f"group 'p-0120-2': {same} of 8 completions are the same text" in finding.message


def test_a_group_agreeing_on_a_short_answer_or_mostly_on_a_long_one_is_fine() -> None:
    def inject(samples: list[Sample]) -> None:
        for i in range(8):
            samples[i]["completion"] = "<answer>391</answer>"
        for i in range(8, 14):  # 6 of 8
            samples[i]["completion"] = "To solve this we multiply the two numbers: 391. " * 2

    assert fault_findings(inject) == []


def structured(rng: random.Random, kind: int) -> str:
    """Legitimately repetitive answers: numbered steps, boilerplate code, a table."""
    if kind == 0:
        products = ((rng.randint(2, 99), rng.randint(2, 99)) for _ in range(8))
        return "\n".join(f"Step {k}: multiply {a} by {b}." for k, (a, b) in enumerate(products))
    if kind == 1:
        fields = rng.sample(["name", "age", "email", "city", "score", "rank", "level", "team"], 6)
        return "class Record:\n" + "\n".join(
            f"    {name}: Mapped[str | None] = mapped_column(String(255))" for name in fields
        )
    start = rng.randint(1, 50)
    rows = "\n".join(f"| {i} | {i * i} |" for i in range(start, start + 14))
    return "| x | x^2 |\n|---|---|\n" + rows


def test_structured_answers_with_boilerplate_are_not_degenerate() -> None:
    """Scores up to about 0.6 (the boilerplate class): below the 0.75 threshold."""

    def inject(samples: list[Sample]) -> None:
        for s in samples:
            s["completion"] = structured(random.Random(s["index"]), s["index"] % 3)

    assert max(repetition(structured(random.Random(i), i % 3)) for i in range(32)) > 0.55
    assert fault_findings(inject) == []


def test_repetition_scores_loops_high_and_prose_low() -> None:
    for text in LOOPS:
        assert repetition(text) >= 0.75, text
    prose = (
        "Reinforcement learning from verifiable rewards trains a policy on problems whose "
        "answers can be checked, and the reward is one when the final answer matches. "
        "Groups of completions for one prompt give a baseline, so no critic is needed."
    )
    assert repetition(prose) < 0.2
    assert repetition("") == 0.0
    assert repetition("1000000000000000000") >= 0.75  # one character: counted as such


# --- reward hacking --------------------------------------------------------------------


def test_empty_completions_paid_a_high_reward_are_reward_hacking() -> None:
    def inject(samples: list[Sample]) -> None:
        for i, text in ((5, ""), (12, "  \n"), (30, "?!")):  # no letter, no digit: no answer
            samples[i].update(completion=text, reward=1.1, response_length=1)

    finding = only(fault_findings(inject), "reward_hacking")
    assert finding.severity == "critical"
    assert finding.evidence == (5, 12, 30)
    assert finding.message.startswith(
        "3 completions of at most 2 non-space characters got a high reward (up to 1.1,"
    )


def math_step(
    rng: random.Random, step: int, *, truths: bool, groups: int = 4, size: int = 8
) -> list[Sample]:
    """One step of a healthy GSM8K-style GRPO run: short numeric answers (some with
    their working), an exact-match reward, the ground truth in `extra` when `truths`."""
    samples = []
    for g in range(groups):
        a, b = rng.randint(1, 49), rng.randint(1, 49)
        truth = a + b
        chance = rng.uniform(0.3, 0.7)
        for m in range(size):
            answer = truth if rng.random() < chance else truth + rng.choice((-2, -1, 1, 10))
            text = str(answer) if rng.random() < 0.7 else f"{a} + {b} = {answer}. #### {answer}"
            raw = build_sample(
                step, g * size + m, f"What is {a} + {b}?", text,
                reward=1.0 if answer == truth else 0.0, group=f"q-{step}-{g}",
                response_length=len(text) // 2 + 1, finish_reason="stop",
                extra={"ground_truth": str(truth)} if truths else None, timestamp=1.0 + step,
            )  # fmt: skip
            samples.append(normalize_sample(raw))
    return samples


@pytest.mark.parametrize(("truths", "seed"), [(True, 1), (True, 2), (False, 3), (False, 4)])
def test_a_healthy_math_run_with_short_right_answers_raises_nothing(
    truths: bool, seed: int
) -> None:
    """ "4" paid for "2+2" raised a critical reward_hacking (issue 24): short right
    answers are what math RL rewards, with or without ground truths in the samples."""
    monitor, rng = SampleMonitor(), random.Random(seed)
    for step in range(200):
        assert monitor.check(math_step(rng, step, truths=truths)) == [], step


def test_short_answers_paid_against_their_ground_truth_are_reward_hacking() -> None:
    monitor, rng = SampleMonitor(), random.Random(8)
    for step in range(20):
        assert monitor.check(math_step(rng, step, truths=True)) == []
    samples = math_step(rng, 20, truths=True)
    for i in (3, 17):  # a wrong short answer, fully paid: the reward does not check it
        samples[i].update(completion="0", reward=1.0)
    finding = only_at(monitor.check(samples), "reward_hacking", 20)
    assert finding.evidence == (3, 17)


def test_one_short_text_paid_for_most_prompts_is_reward_hacking_without_truths() -> None:
    monitor, rng = SampleMonitor(), random.Random(9)
    for step in range(20):
        assert monitor.check(math_step(rng, step, truths=False)) == []
    samples = math_step(rng, 20, truths=False)
    hacked = [g * 8 for g in range(3)]  # the same two characters for three of four prompts
    for i in hacked:
        samples[i].update(completion="A.", reward=1.0)
    finding = only_at(monitor.check(samples), "reward_hacking", 20)
    assert finding.evidence == tuple(hacked)


def test_one_paid_empty_completion_or_unpaid_ones_are_not_reward_hacking() -> None:
    def inject(samples: list[Sample]) -> None:
        samples[5].update(completion="", reward=1.1)
        for i in (6, 7, 8):
            samples[i].update(completion="", reward=0.0)

    assert fault_findings(inject) == []


def test_a_configured_high_reward_catches_empty_answers_when_rewards_are_negative() -> None:
    config = SampleDetectorConfig(short_high_reward=-0.5)
    monitor, rng = SampleMonitor(config), random.Random(5)
    samples = healthy_step(rng, 0)
    tidy(samples)
    for s in samples:
        s["reward"] = -1.0 - (s["index"] % 3)  # median -2: all rewards negative
    for i in (2, 9):
        samples[i].update(completion="", reward=-0.1)
    finding = only_at(monitor.check(samples), "reward_hacking", 0)
    assert finding.evidence == (2, 9)


def collapse(samples: list[Sample], rng: random.Random, *, paid: bool) -> list[int]:
    """Most completions become one text across prompts; the rest stay; returns the collapsed."""
    tidy(samples)
    collapsed = [s["index"] for s in samples if s["index"] % 8 != 0]
    for s in samples:
        if s["index"] % 8 != 0:
            s["completion"] = "The answer is 42."
        if paid:  # a high reward, varied within each group (not a zero-advantage step)
            s["reward"] = 1.0 + rng.random() * 0.1
    return collapsed


def test_reward_rising_while_completions_collapse_is_caught() -> None:
    monitor, rng = warmed_monitor()
    samples = healthy_step(rng, FAULT_STEP)
    collapsed = collapse(samples, rng, paid=True)
    finding = only(monitor.check(samples), "reward_hacking")
    assert finding.severity == "critical"
    assert finding.evidence == tuple(collapsed[:20])
    assert finding.message.startswith("the mean reward rose from 0.")
    assert finding.message.endswith(
        "while completions collapsed to one text: 'The answer is 42.' is 28 of 32 "
        "completions (88%), across 4 prompts"
    )


def test_completions_collapsing_without_a_reward_rise_are_not_reward_hacking() -> None:
    monitor, rng = warmed_monitor()
    for step in range(FAULT_STEP, FAULT_STEP + 10):
        samples = healthy_step(rng, step)
        collapse(samples, rng, paid=False)
        assert monitor.check(samples) == [], step


def test_a_run_collapsed_from_its_first_step_has_no_baseline_to_compare() -> None:
    monitor, rng = SampleMonitor(), random.Random(4)
    for step in range(20):
        samples = healthy_step(rng, step)
        collapse(samples, rng, paid=step > 5)
        assert monitor.check(samples) == [], step


def test_a_learned_answer_shared_by_two_prompts_is_no_collapse() -> None:
    """Two prompts with the same right answer, every sample right: 50%, but 2 prompts."""
    monitor, rng = warmed_monitor()
    samples = healthy_step(rng, FAULT_STEP)
    tidy(samples)
    for s in samples[:16]:
        s.update(completion="12 * 1 = 12 <answer>12</answer>", reward=1.0 + s["index"] / 100)
    assert monitor.check(samples) == []


# --- no learning signal ----------------------------------------------------------------


def test_groups_with_equal_rewards_everywhere_mean_no_learning_signal() -> None:
    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for s in samples:
            s["reward"] = 1.1 if s["index"] < 16 else 0.0

    finding = only(fault_findings(inject), "no_learning_signal")
    assert finding.severity == "critical"
    assert finding.evidence == (0, 8, 16, 24)  # one per group
    assert finding.message.startswith(
        "4 of 4 GRPO groups (100%) gave every member the same reward (e.g. group "
        "'p-0120-0': 8 x 1.1)"
    )


def flatten(count: int) -> Callable[[list[Sample]], None]:
    """The first `count` groups of 8 paid one reward each; the others surely spread."""

    def inject(samples: list[Sample]) -> None:
        for s in samples:
            if s["index"] // 8 < count:
                s["reward"] = 0.0
            elif s["index"] % 8 == 0:
                s["reward"] = 5.0

    return inject


def test_nine_flat_groups_of_ten_are_a_warning() -> None:
    finding = only(fault_findings(flatten(9), groups=10), "no_learning_signal")
    assert finding.severity == "warning"
    assert finding.evidence == (0, 8, 16, 24, 32, 40, 48, 56, 64)
    assert finding.message.startswith("9 of 10 GRPO groups (90%)")


def test_three_flat_groups_of_four_are_not_a_lack_of_signal() -> None:
    assert fault_findings(flatten(3)) == []


def test_nan_rewards_are_left_out_of_the_group_comparison() -> None:
    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for s in samples:
            s["reward"] = math.nan if s["index"] % 8 == 3 else 1.0

    finding = only(fault_findings(inject), "no_learning_signal")
    assert "'p-0120-0': 7 x 1)" in finding.message


# --- NaN and missing fields ------------------------------------------------------------


def test_a_step_of_nan_and_infinite_rewards_skips_the_reward_detectors() -> None:
    def inject(samples: list[Sample]) -> None:
        for s in samples:
            s["reward"] = math.inf if s["index"] % 2 else math.nan
        for i in (1, 2, 3):
            samples[i]["completion"] = ""

    assert fault_findings(inject) == []


def test_samples_with_only_the_required_fields_still_show_loops() -> None:
    def inject(samples: list[Sample]) -> None:
        tidy(samples)
        for i in range(0, 32, 4):
            samples[i]["completion"] = LOOPS[i // 4]
        for i in range(1, 4):
            samples[i]["completion"] = ""  # no reward: not a hacking sign

    finding = only(fault_findings(inject, shape="minimal"), "degenerate_output")
    assert sorted(finding.evidence) == list(range(0, 32, 4))


# --- the monitor: cooldown, order, configuration ---------------------------------------


def test_a_long_plateau_fires_once_when_it_starts_and_reaches_to_its_last_step() -> None:
    monitor, rng = warmed_monitor()
    fired: list[SampleFinding] = []
    for step in range(FAULT_STEP, FAULT_STEP + 35):
        samples = healthy_step(rng, step)
        cut(samples, range(4, 32))
        fired += monitor.check(samples)
    assert [(f.step, f.type) for f in fired] == [(120, "truncation")]  # no reminders
    assert "ongoing" not in fired[0].message
    assert ("truncation", 120, 154) in monitor.extents()


def test_a_condition_hovering_around_its_threshold_for_long_is_one_incident() -> None:
    # Present on 2 steps of 3 for 150 steps: each gap is short next to how
    # long the incident has lasted, so it never ends.
    monitor, rng = warmed_monitor()
    found: list[SampleFinding] = []
    for step in range(FAULT_STEP, FAULT_STEP + 150):
        samples = healthy_step(rng, step)
        if step % 3 or step == FAULT_STEP:
            cut(samples, range(4, 32))
        found += monitor.check(samples)
    assert [(f.step, f.type) for f in found] == [(120, "truncation")]


def test_a_condition_that_clears_then_returns_within_the_cooldown_is_one_incident() -> None:
    monitor, rng = warmed_monitor()
    found: list[SampleFinding] = []
    for step in range(FAULT_STEP, FAULT_STEP + 41):
        samples = healthy_step(rng, step)
        if step in (120, 125, 131, 160):
            cut(samples, range(4, 32))
        found += monitor.check(samples)
    # 125: 5 steps after 120, quiet; 131: seen within 10 steps, quiet (the
    # incident has lasted 11 steps: it now ends after 22 clear ones); 160: 29
    # steps after it was last seen, a new incident.
    assert [(f.step, f.type) for f in found] == [(120, "truncation"), (160, "truncation")]
    assert "ongoing" not in found[1].message


def test_an_incident_turning_critical_fires_at_once() -> None:
    monitor, rng = warmed_monitor()
    steps = []
    for step, count in ((120, 28), (121, 28), (122, 32), (123, 32)):
        samples = healthy_step(rng, step)
        cut(samples, range(32 - count, 32))
        steps += [(f.step, f.severity) for f in monitor.check(samples)]
    assert steps == [(120, "warning"), (122, "critical")]


def test_several_findings_in_one_step_come_in_a_fixed_order() -> None:
    def inject(samples: list[Sample]) -> None:
        cut(samples, range(32))
        for i in range(8):
            samples[i]["completion"] = LOOPS[i]
        for s in samples:
            s["reward"] = 1.0 if s["index"] < 16 else 0.0
        for i in (8, 9):  # in a group paid 1.0
            samples[i].update(completion="", reward=1.0)

    kinds = [f.type for f in fault_findings(inject)]
    assert kinds == ["truncation", "degenerate_output", "reward_hacking", "no_learning_signal"]


def test_disabled_types_are_skipped() -> None:
    config = SampleDetectorConfig(disabled=frozenset({"truncation"}))
    monitor, rng = SampleMonitor(config), random.Random(9)
    samples = healthy_step(rng, 0)
    cut(samples, range(32))
    assert monitor.check(samples) == []


def test_evidence_is_capped() -> None:
    config = SampleDetectorConfig(max_evidence=5)
    monitor, rng = SampleMonitor(config), random.Random(9)
    samples = healthy_step(rng, 0)
    cut(samples, range(32))
    assert only_at(monitor.check(samples), "truncation", 0).evidence == (0, 1, 2, 3, 4)


def test_one_step_at_a_time() -> None:
    rng = random.Random(10)
    mixed = healthy_step(rng, 1) + healthy_step(rng, 2)
    with pytest.raises(ValueError, match="one step's samples"):
        SampleMonitor().check(mixed)
    assert SampleMonitor().check([]) == []


@pytest.mark.parametrize(("back_to", "fires"), [(2, False), (119, True)])
def test_a_resumed_run_going_back_forgets_the_rewritten_steps(back_to: int, fires: bool) -> None:
    """Back at step 2 only steps 0 and 1 remain, too few for a baseline; back at 119, 7."""
    config = SampleDetectorConfig(cooldown=0)  # every occurrence reported
    monitor, rng = warmed_monitor(config=config)
    samples = healthy_step(rng, FAULT_STEP)
    collapse(samples, rng, paid=True)
    only(monitor.check(samples), "reward_hacking")
    samples = healthy_step(rng, back_to)
    collapse(samples, rng, paid=True)
    kinds = [f.type for f in monitor.check(samples)]
    assert kinds == (["reward_hacking"] if fires else [])
