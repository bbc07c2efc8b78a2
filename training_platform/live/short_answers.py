"""Whether a short, well-paid completion is an answer: the reward-hacking rule's
test for "near-empty" (`sample_detectors`), kept apart from the detectors.

Math RL (GSM8K, MATH) pays "4" for "2+2": short right answers are what it
rewards, and a critical reward_hacking for them was a false alarm (issue 24).
"""

from __future__ import annotations

from training_platform.live.sample_step import SampleDetectorConfig, StepSample


def is_an_answer(
    sample: StepSample, paid_prompts: set[str], prompts: int, config: SampleDetectorConfig
) -> bool:
    """Whether a short, well-paid completion reads as an answer, not an empty one:
    math RL pays "4" for "2+2", and that is learning, not hacking (issue 24).

    Empty or without a letter or digit: no answer. With a ground truth: an
    answer when it is that truth. Without: an answer unless the same text was
    paid for most of the step's prompts (`paid_prompts`, at least
    `collapse_min_prompts` of them), the same few characters whatever was asked.
    """
    text = sample.normalised
    if not any(character.isalnum() for character in text):
        return False
    if sample.truth is not None:
        return same_answer(text, sample.truth)
    many = len(paid_prompts) >= config.collapse_min_prompts and 2 * len(paid_prompts) >= prompts
    return not many


def same_answer(text: str, truth: str) -> bool:
    """Equal as text, or as numbers ("4" and "4.0")."""
    if text == truth:
        return True
    try:
        return float(text) == float(truth)
    except ValueError:
        return False
