"""One step's generated samples, read once for the sample detectors (`live/sample_detectors.py`).

The findings' vocabulary and thresholds, each sample reduced to what the
detectors look at (finite rewards only, normalised text), and how
repetitive a text is.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

TRUNCATION: Final = "truncation"
DEGENERATE_OUTPUT: Final = "degenerate_output"
REWARD_HACKING: Final = "reward_hacking"
NO_LEARNING_SIGNAL: Final = "no_learning_signal"
FINDING_TYPES: Final = (TRUNCATION, DEGENERATE_OUTPUT, REWARD_HACKING, NO_LEARNING_SIGNAL)

WARNING: Final = "warning"
CRITICAL: Final = "critical"
SEVERITY_RANK: Final = {WARNING: 1, CRITICAL: 2}

_WHITESPACE: Final = re.compile(r"\s+")
_SNIPPET_CHARS: Final = 40


@dataclass(frozen=True)
class SampleFinding:
    """One diagnosis of one step's samples."""

    step: int
    type: str
    """One of `FINDING_TYPES`."""
    severity: str
    """``"warning"`` or ``"critical"``."""
    message: str
    """One sentence saying why it fired, with the figures."""
    evidence: tuple[int, ...]
    """The `index` of the samples that show it, most telling first, at most
    `SampleDetectorConfig.max_evidence`."""


@dataclass(frozen=True)
class SampleDetectorConfig:
    """Thresholds. Shares are of the step's samples unless said otherwise."""

    cooldown: int = 20
    """Checked steps (calls to `check`): an incident ends once its condition
    has been absent this long, or twice as long as it had lasted ..."""
    cooldown_max: int = 500
    """... at most this long (`callbacks/detectors/findings.incident_quiet`)."""
    disabled: frozenset[str] = frozenset()
    """Finding types to skip, e.g. ``{"no_learning_signal"}``."""
    max_evidence: int = 20
    """At most this many sample indexes per finding."""

    # --- truncation ---
    truncation_share: float = 0.5
    """Fire when at least this share of the step's judged completions (those
    with a finish_reason or a response_length) ended by length ..."""
    truncation_min_samples: int = 4
    """... and at least this many did."""
    truncation_critical_share: float = 0.95
    """Critical from this share: (almost) nothing the policy writes is finished."""
    length_reasons: frozenset[str] = frozenset({"length", "max_tokens", "max_length"})
    """finish_reason values (lower case) that mean "cut at the length limit"."""
    min_length_limit: int = 32
    """Without a finish_reason, a completion counts as cut when its
    response_length equals the step's maximum, if that maximum is at least
    this: a step of short fixed-format answers ("<answer>B</answer>" every
    time) shares its maximum without hitting any limit."""

    # --- degenerate output ---
    degenerate_min_chars: int = 16
    """Completions with fewer non-space characters are not judged ("42" is
    not a loop)."""
    degenerate_ngram: int = 12
    """Length of the character pieces compared to measure repetition."""
    degenerate_repetition: float = 0.75
    """A completion is degenerate when one character makes up this share of
    its non-space characters, or this share of its `degenerate_ngram`-character
    pieces repeat an earlier piece (loops: "the the the", "I am sorry. I am
    sorry." score 0.8-1). Measured on 6000 random chunks (100-8000 characters)
    of prose and Python source: median 0.13, 99th percentile 0.54, the most
    repetitive boilerplate 0.78, which is why a share of the step must be
    degenerate too."""
    degenerate_share: float = 0.2
    """Fire when at least this share of the step's completions are degenerate
    (an occasional loop is normal for small models) ..."""
    degenerate_min_count: int = 3
    """... and at least this many are."""
    degenerate_critical_share: float = 0.5
    """Critical from this share."""
    max_analysed_chars: int = 4000
    """A longer completion is judged on its first and last half this many
    characters, to bound the cost per step."""
    identical_group_min_size: int = 3
    """GRPO groups with at least this many members are checked for identical
    completions ..."""
    identical_group_share: float = 0.85
    """... fired when at least this share of a group's members (7 of 8, 3 of 3)
    wrote the same text (compared in lower case, whitespace collapsed) ..."""
    identical_min_chars: int = 32
    """... of at least this many non-space characters: a confident model may
    well give the same short answer eight times."""

    # --- reward hacking ---
    short_max_chars: int = 2
    """A completion of at most this many non-space characters is short. A short
    completion paid a high reward is suspect only when it is no answer: empty,
    without a letter or digit, not its ground truth (`extra.ground_truth`),
    or, without ground truths, the same text for most of the step's prompts
    (at least `collapse_min_prompts`). "4" paid for "2+2" is a right answer."""
    short_min_count: int = 2
    """Fire when at least this many (near-)empty completions got a high reward:
    above 0 and at least the step's median reward ..."""
    short_high_reward: float | None = None
    """... or at least this value, when set (for rewards that are never above 0)."""
    collapse_share: float = 0.5
    """A step's completions have collapsed to one pattern when one text (lower
    case, whitespace collapsed) makes up at least this share of them ..."""
    collapse_min_prompts: int = 3
    """... and answers at least this many different prompts (groups). One
    prompt's samples agreeing is a learned task, not a collapse; so is the
    same short answer to two prompts."""
    trend_window: int = 8
    """The baseline is the mean reward of the last this many steps whose
    completions were varied (not collapsed) ..."""
    trend_min_steps: int = 3
    """... of which at least this many are needed ..."""
    trend_min_rise: float = 0.5
    """... and a collapse is reported when the mean reward of the collapsed
    steps since (the last `trend_window` / 2) is above the baseline by at least
    this many standard deviations of the baseline steps' rewards (a step's
    mean of 32 samples wanders by about 0.18 of them)."""
    min_rewarded_samples: int = 4
    """Steps with fewer finite rewards are left out of the reward trend."""

    # --- no learning signal ---
    flat_group_share: float = 0.9
    """Fire when at least this share of the GRPO groups (with at least 2 finite
    rewards each) gave every member the same reward ..."""
    flat_min_groups: int = 4
    """... out of at least this many such groups; critical when all are."""


# --- one step's samples, read once -----------------------------------------------------


@dataclass(frozen=True)
class StepSample:
    index: int
    text: str
    normalised: str
    """Lower case, whitespace runs collapsed: "The  answer" and "the answer" match."""
    nonspace: int
    prompt: str
    group: str | None
    reward: float | None
    """Finite rewards only: NaN and infinities are left out of reward statistics."""
    length: int | None
    finish: str | None
    truth: str | None = None
    """The sample's ground truth, normalised, when its `extra` carries one
    (`ground_truth`, `gt`, or verl's `gts`)."""


@dataclass(frozen=True)
class Step:
    step: int
    samples: list[StepSample]

    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples if s.reward is not None]


@dataclass(frozen=True)
class Found:
    """A detector's result for one step, before the cooldown."""

    severity: str
    message: str
    evidence: list[int]


def finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def normalise(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip().lower()


_TRUTH_KEYS: Final = ("ground_truth", "gt", "gts")


def _truth(extra: Any) -> str | None:
    if not isinstance(extra, dict):
        return None
    for key in _TRUTH_KEYS:
        value = extra.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (str, int, float)):
            return normalise(str(value))
    return None


def _read_sample(raw: dict[str, Any], position: int) -> StepSample:
    text = raw.get("completion")
    text = text if isinstance(text, str) else ""
    normalised = normalise(text)
    index = raw.get("index")
    length = raw.get("response_length")
    finish = raw.get("finish_reason")
    group = raw.get("group")
    prompt = raw.get("prompt")
    return StepSample(
        index=index if isinstance(index, int) else position,
        text=text,
        normalised=normalised,
        nonspace=len(normalised.replace(" ", "")),  # whitespace is single spaces there
        prompt=prompt if isinstance(prompt, str) else "",
        group=None if group is None else str(group),
        reward=finite(raw.get("reward")),
        length=length if isinstance(length, int) and not isinstance(length, bool) else None,
        finish=finish.lower() if isinstance(finish, str) else None,
        truth=_truth(raw.get("extra")),
    )


def read_step(samples: Sequence[dict[str, Any]]) -> Step | None:
    if not samples:
        return None
    steps = {raw.get("step") for raw in samples}
    if len(steps) != 1:
        raise ValueError(f"check() takes one step's samples, got steps {sorted(map(str, steps))}")
    step = steps.pop()
    if not isinstance(step, int):
        raise ValueError(f"a sample's step must be an integer, got {step!r}")
    return Step(step, [_read_sample(raw, position) for position, raw in enumerate(samples)])


def snippet(text: str) -> str:
    short = text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "…"
    return repr(short)


def share_text(part: int, whole: int) -> str:
    return f"{part} of {whole} completions ({part / whole:.0%})"


def groups_of(step: Step) -> dict[str, list[StepSample]]:
    groups: dict[str, list[StepSample]] = {}
    for sample in step.samples:
        if sample.group is not None:
            groups.setdefault(sample.group, []).append(sample)
    return groups


# --- how repetitive a text is ----------------------------------------------------------


def repetition(text: str, ngram: int = 12, max_chars: int = 4000) -> float:
    """How much of `text` is repetition, from 0 (none) to 1.

    The larger of: the share of its non-space characters that are its most
    common character ("!!!!!!!!"), and the share of its `ngram`-character
    pieces (lower case, whitespace collapsed) that repeat an earlier piece, so
    a loop of any period ("the the the", "I am sorry. I am sorry.") scores
    near 1 while prose, whose pieces are mostly new, stays low.
    """
    return repetition_of(normalise(text), ngram, max_chars)


def repetition_of(normalised: str, ngram: int, max_chars: int) -> float:
    if len(normalised) > max_chars:  # loops are often at the end: keep both ends
        half = max_chars // 2
        normalised = normalised[:half] + normalised[-half:]
    characters = Counter(normalised.replace(" ", ""))  # whitespace is single spaces now
    if not characters:
        return 0.0
    one_character = characters.most_common(1)[0][1] / characters.total()
    pieces = len(normalised) - ngram + 1
    if pieces < 2:
        return one_character
    distinct = len({normalised[i : i + ngram] for i in range(pieces)})
    return max(one_character, 1 - distinct / pieces)
