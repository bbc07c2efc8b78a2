"""Diagnosis from generated samples (DESIGN.md §4, issue 14): what the policy writes.

`SampleMonitor.check(samples)` looks at ONE step's samples (decoded sample
dicts, `callbacks/wire/samples.py`) and returns `SampleFinding`s:

- ``truncation``: most completions of the step end by length.
- ``degenerate_output``: a notable share of completions are mostly one
  repeated character or phrase, or a GRPO group wrote (almost) the same text
  in every member.
- ``reward_hacking``: (near-)empty completions paid a high reward, or the mean
  reward went up while completions collapsed to one pattern across prompts.
- ``no_learning_signal``: (almost) every GRPO group gave all its members the
  same reward, so every advantage is zero.

Pure: no database, no I/O, stdlib only. The monitor keeps a little per-job
state across steps (the reward of recent steps whose completions were varied,
and the cooldowns), so feed one job's steps in order, one monitor per job.
Optional fields may be absent or None and rewards NaN: a detector that needs
what a step lacks (rewards, groups, lengths) stays silent for that step.

Incidents: a monitoring tool reports an incident, not every step of it. A
finding type fires when its condition starts; while the condition keeps
recurring it stays quiet, unless it turns critical (an escalation, which
names the step the incident started at). It ends once its condition has
been absent for `SampleDetectorConfig.cooldown` checked steps, or twice as
long as it had lasted (`callbacks/detectors/findings.incident_quiet`, the
rule of the metric detectors), so a truncation share hovering around its
threshold for hundreds of steps is one incident. Steps are counted in calls
to `check` (steps that have samples), because trainers often log samples
only every few steps; `extents()` says, in training steps, how far each
alert reaches.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from training_platform.callbacks.detectors.findings import incident_quiet
from training_platform.live.sample_collapse import CollapseTrend
from training_platform.live.sample_step import (
    CRITICAL,
    DEGENERATE_OUTPUT,
    FINDING_TYPES,
    NO_LEARNING_SIGNAL,
    REWARD_HACKING,
    SEVERITY_RANK,
    TRUNCATION,
    WARNING,
    Found,
    SampleDetectorConfig,
    SampleFinding,
    Step,
    StepSample,
    groups_of,
    read_step,
    repetition_of,
    share_text,
    snippet,
)
from training_platform.live.short_answers import is_an_answer

# --- truncation ------------------------------------------------------------------------


def _length_limit(step: Step, config: SampleDetectorConfig) -> int | None:
    """The step's maximum response_length, when it may be the generation limit."""
    lengths = [s.length for s in step.samples if s.length is not None]
    if not lengths or max(lengths) < config.min_length_limit:
        return None
    return max(lengths)


def _truncation(step: Step, config: SampleDetectorConfig) -> Found | None:
    judged = [s for s in step.samples if s.finish is not None or s.length is not None]
    limit = _length_limit(step, config)
    by_reason = [s for s in judged if s.finish in config.length_reasons]
    # Only samples that do not say why they ended are judged by their length:
    # a "stop" at the maximum length finished on its own.
    by_length = [s for s in judged if s.finish is None and limit is not None and s.length == limit]
    cut = len(by_reason) + len(by_length)
    if cut < config.truncation_min_samples or cut / len(judged) < config.truncation_share:
        return None
    how = []
    if by_reason:
        how.append(f"finish_reason {by_reason[0].finish!r}")
    if by_length:
        how.append(f"at the step's maximum length {limit}")
    share = cut / len(judged)
    severity = CRITICAL if share >= config.truncation_critical_share else WARNING
    message = (
        f"{share_text(cut, len(judged))} ended by length ({' or '.join(how)}): "
        "the length limit cuts most answers before they finish"
    )
    # Completions that say they were cut first, then those inferred from their length.
    return Found(severity, message, [s.index for s in by_reason + by_length])


# --- degenerate output -----------------------------------------------------------------


def _repetitive_samples(step: Step, config: SampleDetectorConfig) -> tuple[str, list[int]] | None:
    scored = [
        (repetition_of(s.normalised, config.degenerate_ngram, config.max_analysed_chars), s)
        for s in step.samples
        if s.nonspace >= config.degenerate_min_chars
    ]
    degenerate = [(score, s) for score, s in scored if score >= config.degenerate_repetition]
    total = len(step.samples)
    count = len(degenerate)
    if count < config.degenerate_min_count or count / total < config.degenerate_share:
        return None
    degenerate.sort(key=lambda pair: (-pair[0], pair[1].index))  # the worst loops first
    worst_score, worst = degenerate[0]
    message = (
        f"{share_text(count, total)} are mostly repetition (one character or repeated "
        f"{config.degenerate_ngram}-character pieces make up at least "
        f"{config.degenerate_repetition:.0%} of each); worst: index {worst.index}, "
        f"{worst_score:.0%} repeated, {snippet(worst.text)}"
    )
    return message, [s.index for _, s in degenerate]


def _identical_groups(step: Step, config: SampleDetectorConfig) -> tuple[str, list[int]] | None:
    hits: list[tuple[str, int, int, list[StepSample]]] = []  # (group, same, size, members)
    for key, members in groups_of(step).items():
        if len(members) < config.identical_group_min_size:
            continue
        text, same = Counter(s.normalised for s in members).most_common(1)[0]
        long_enough = len(text.replace(" ", "")) >= config.identical_min_chars
        if long_enough and same / len(members) >= config.identical_group_share:
            hits.append((key, same, len(members), [s for s in members if s.normalised == text]))
    if not hits:
        return None
    key, same, size, members = hits[0]
    text = snippet(members[0].text)
    example = f"group {key!r}: {same} of {size} completions are the same text, {text}"
    if len(hits) == 1:
        message = f"{example}; the group's samples no longer explore"
    else:
        message = f"{len(hits)} GRPO groups wrote (almost) one text in every member, e.g. {example}"
    return message, [s.index for _, _, _, group in hits for s in group]


def _degenerate(step: Step, config: SampleDetectorConfig) -> Found | None:
    repetitive = _repetitive_samples(step, config)
    identical = _identical_groups(step, config)
    parts = [part for part in (repetitive, identical) if part is not None]
    if not parts:
        return None
    severity = WARNING
    if repetitive is not None:
        count = len(repetitive[1])
        if count / len(step.samples) >= config.degenerate_critical_share:
            severity = CRITICAL
    return _merge(severity, parts)


def _merge(severity: str, parts: Iterable[tuple[str, list[int]]]) -> Found:
    """One finding from a detector's sub-rules: messages joined, evidence in order, no repeats."""
    parts = list(parts)
    evidence = list(dict.fromkeys(index for _, indexes in parts for index in indexes))
    return Found(severity, "; ".join(message for message, _ in parts), evidence)


# --- reward hacking --------------------------------------------------------------------


def _short_rewarded(step: Step, config: SampleDetectorConfig) -> tuple[str, list[int]] | None:
    rewards = step.rewards()
    if not rewards:
        return None
    median = statistics.median(rewards)

    def high(reward: float) -> bool:
        if config.short_high_reward is not None and reward >= config.short_high_reward:
            return True
        return reward > 0 and reward >= median

    short = [
        s
        for s in step.samples
        if s.nonspace <= config.short_max_chars and s.reward is not None and high(s.reward)
    ]
    # Per short text, the prompts it was paid for: one text paid whatever was asked.
    paid_for: dict[str, set[str]] = {}
    for s in short:
        paid_for.setdefault(s.normalised, set()).add(s.prompt)
    prompts = len({s.prompt for s in step.samples})
    paid = [
        (s.reward, s)
        for s in short
        if s.reward is not None and not is_an_answer(s, paid_for[s.normalised], prompts, config)
    ]
    if len(paid) < config.short_min_count:
        return None
    paid.sort(key=lambda pair: (-pair[0], pair[1].index))  # the best-paid first
    top_reward, top = paid[0]
    message = (
        f"{len(paid)} completions of at most {config.short_max_chars} non-space characters "
        f"got a high reward (up to {top_reward:.4g}, step median {median:.4g}), e.g. index "
        f"{top.index}: {snippet(top.text)}; the reward may pay for empty answers"
    )
    return message, [s.index for _, s in paid]


# --- no learning signal ----------------------------------------------------------------


def _all_equal(values: list[float]) -> bool:
    # math.isclose: rewards computed two ways may differ in the last bit.
    return all(math.isclose(value, values[0]) for value in values)


def _flat_groups(step: Step, config: SampleDetectorConfig) -> Found | None:
    rewards: dict[str, list[float]] = {}  # the finite rewards of groups that have 2 or more
    first: dict[str, int] = {}  # each such group's lowest sample index
    for key, members in groups_of(step).items():
        finite = [s.reward for s in members if s.reward is not None]
        if len(finite) >= 2:
            rewards[key], first[key] = finite, min(s.index for s in members)
    # math.isclose: rewards computed two ways may differ in the last bit.
    flat = [
        key for key, values in rewards.items() if all(math.isclose(v, values[0]) for v in values)
    ]
    # Shares are compared as fractions: 0.9 * 10 groups may round above 9.
    share = len(flat) / len(rewards) if rewards else 0.0
    if len(rewards) < config.flat_min_groups or share < config.flat_group_share:
        return None
    example = rewards[flat[0]]
    message = (
        f"{len(flat)} of {len(rewards)} GRPO groups ({share:.0%}) gave every member the same "
        f"reward (e.g. group {flat[0]!r}: {len(example)} x {example[0]:.4g}), so their "
        "advantages are zero and the step teaches nothing"
    )
    severity = CRITICAL if len(flat) == len(rewards) else WARNING
    # One sample per flat group: the evidence then shows as many groups as it can.
    return Found(severity, message, [first[key] for key in flat])


# --- the monitor -----------------------------------------------------------------------


@dataclass
class _Incident:
    opened_step: int
    opened_check: int
    severity: int
    last_seen: int
    """The check count at which its condition last held ..."""
    last_step: int
    """... and the training step of that check."""
    alerted_step: int
    """The step of its latest alert (its opening or an escalation)."""


class SampleMonitor:
    """Runs every sample detector over one job's steps, with cooldowns (module docstring)."""

    def __init__(self, config: SampleDetectorConfig | None = None) -> None:
        self.config = config or SampleDetectorConfig()
        self._checks = 0
        self._last_step: int | None = None
        self._trend = CollapseTrend(self.config)
        self._incidents: dict[str, _Incident] = {}

    def check(self, samples: list[dict[str, Any]]) -> list[SampleFinding]:
        """The findings for one step's samples (all of one step; ValueError otherwise).

        Feed a job's steps in order. A step at or before the last one fed (a
        resumed run rewriting its history) first drops what the monitor
        remembered of those steps.
        """
        step = read_step(samples)
        if step is None:
            return []
        self._checks += 1
        if self._last_step is not None and step.step <= self._last_step:
            self._trend.rewind(step.step)
        self._last_step = step.step
        findings = []
        for kind, found in self._detect(step).items():
            if found is None:
                continue  # an incident ends by not being seen for a while (`_alert`)
            note = self._alert(kind, step.step, found.severity)
            if note is not None:
                evidence = tuple(found.evidence[: self.config.max_evidence])
                findings.append(
                    SampleFinding(step.step, kind, found.severity, found.message + note, evidence)
                )
        return findings

    def _detect(self, step: Step) -> dict[str, Found | None]:
        """Each enabled detector's result for this step, in `FINDING_TYPES` order."""
        config, enabled = self.config, set(FINDING_TYPES) - self.config.disabled
        found: dict[str, Found | None] = {}
        if TRUNCATION in enabled:
            found[TRUNCATION] = _truncation(step, config)
        if DEGENERATE_OUTPUT in enabled:
            found[DEGENERATE_OUTPUT] = _degenerate(step, config)
        if REWARD_HACKING in enabled:
            # The trend is updated on every step, whatever the short-completion rule says.
            parts = [_short_rewarded(step, config), self._trend.update(step)]
            hacked = [part for part in parts if part is not None]
            found[REWARD_HACKING] = _merge(CRITICAL, hacked) if hacked else None
            if not hacked and self._trend.collapsed_now and self._open(REWARD_HACKING):
                # Still collapsed: the incident goes on, whatever the reward did.
                found[REWARD_HACKING] = Found(CRITICAL, "completions still collapsed", [])
        if NO_LEARNING_SIGNAL in enabled:
            found[NO_LEARNING_SIGNAL] = _flat_groups(step, config)
        return found

    def extents(self) -> list[tuple[str, int, int]]:
        """(type, step of its latest alert, last step its condition held) per incident."""
        return [
            (kind, incident.alerted_step, incident.last_step)
            for kind, incident in self._incidents.items()
        ]

    def _open(self, kind: str) -> bool:
        """Whether `kind`'s incident is still open at the current check."""
        incident, config = self._incidents.get(kind), self.config
        return incident is not None and 0 <= self._checks - incident.last_seen <= incident_quiet(
            incident.opened_check, incident.last_seen, config.cooldown, config.cooldown_max
        )

    def _alert(self, kind: str, step: int, severity: str) -> str | None:
        """The note to append when this occurrence is reported ("" for a new
        incident), or None while it continues an open incident."""
        rank, now = SEVERITY_RANK[severity], self._checks
        incident = self._incidents.get(kind)
        if incident is None or not self._open(kind):
            self._incidents[kind] = _Incident(step, now, rank, now, step, step)
            return ""
        incident.last_seen, incident.last_step = now, step
        if rank <= incident.severity:
            return None
        incident.severity = rank
        incident.alerted_step = step
        return f" (ongoing since step {incident.opened_step})"
