"""The detectors' quiet path, fused: one function for a healthy record.

On a healthy record each detector only folds its values into its windows;
run one detector at a time, most of that cost is Python calls and lookups
(a record's `loss`, `kl` and `extra` read by several detectors, one
`evaluate` call each). `fused_check` does the same work in one function,
reading each group once.

Exactness: for KL, grad norms, entropy and reward hacking, a record's values
are first compared with that detector's quiet bounds (the ones its own
`evaluate` takes its quiet path on), with no state touched. Only if all of
them are quiet is its update applied, all of it, inline and in the order
`evaluate` applies it; otherwise (a value outside a bound, a bound not yet
set, any value that is not a float, a group that is not a dict) the
detector's own `evaluate` takes the whole record. Detectors keep separate
state, so the choice is per detector, and findings come out in `DETECTORS`
order. The three loss detectors go loss by loss, as their `evaluate`s do:
the plateau's step is `_observe` with its settings in locals (its rare
branches call the detector's own methods), the spike's the same comparison
and fold, a loud value judged by the detector's `judge`, the start rule's
its own `observe` until it is done with a loss (one flag test after that).
The tests in tests/callbacks/detectors/test_detector_cost.py hold all of it
to the detectors' own paths: the same anomalies and the same state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from training_platform.callbacks.detectors.findings import Anomaly, Detector, Finding, as_float
from training_platform.callbacks.detectors.loss import LossPlateauDetector, LossSpikeDetector
from training_platform.callbacks.detectors.loss_start import LossNotDecreasingDetector
from training_platform.callbacks.detectors.rl import (
    EntropyCollapseDetector,
    GradientExplosionDetector,
    KLExplosionDetector,
    RewardHackingDetector,
)
from training_platform.callbacks.wire.schema import ENTROPY_KEYS, RESPONSE_LENGTH_KEYS

_NO_LOSSES: Final[dict[str, Any]] = {}

FusedCheck = Callable[[int, Mapping[str, Any], list[Anomaly]], None]
"""``(step, record, found)``: runs every detector but the NaN scan on `record`,
appending the anomalies raised to `found`."""
ExactCheck = Callable[[Detector, int, Mapping[str, Any], list[Anomaly]], None]
"""How the monitor runs one detector on its exact path (`evaluate`, then `alert`)."""
AlertCheck = Callable[[Detector, int, "Finding | list[Finding]", list[Anomaly]], None]
"""How the monitor turns a detector's findings into its anomaly (`alert`)."""

FUSED_KINDS = (
    KLExplosionDetector,
    LossPlateauDetector,
    LossSpikeDetector,
    LossNotDecreasingDetector,
    GradientExplosionDetector,
    EntropyCollapseDetector,
    RewardHackingDetector,
)
"""The detectors `fused_check` stands for, in `DETECTORS` order (the NaN scan aside)."""


def fused_check(
    detectors: Sequence[Detector], exact: ExactCheck, alert: AlertCheck
) -> FusedCheck | None:
    """One function running `detectors` (exactly `FUSED_KINDS`), else None."""
    if tuple(type(d) for d in detectors) != FUSED_KINDS:
        return None  # a subset or a subclass: the monitor runs them one by one
    kl_detector, plateau, spike, start, gradient, entropy, hacking = detectors
    assert isinstance(kl_detector, KLExplosionDetector)
    assert isinstance(plateau, LossPlateauDetector)
    assert isinstance(spike, LossSpikeDetector)
    assert isinstance(start, LossNotDecreasingDetector)
    assert isinstance(gradient, GradientExplosionDetector)
    assert isinstance(entropy, EntropyCollapseDetector)
    assert isinstance(hacking, RewardHackingDetector)
    config = kl_detector.config
    if config.hacking_window < 1:
        return None  # the rule divides by it: leave its errors to the exact path
    kl_history = kl_detector._history
    kl_values = kl_history.values
    kl_threshold, kl_spike_min = config.kl_threshold, config.kl_spike_min
    (first_norm, first_history), (second_norm, second_history) = gradient._histories
    first_values, second_values = first_history.values, second_history.values
    norm_limit = gradient._quiet_limit
    warmup, judge_spike = config.loss_spike_warmup, spike.judge
    # (name, plateau state, spike state, start rule state or None) per loss, in
    # `LOSS_FIELDS` order (the plateau's and the spike's; `WATCHED` keeps it too).
    loss_states = tuple(
        (name, progress, spike._scales[name], start.watches.get(name))
        for name, progress in plateau._progress.items()
    )
    total_watch = start.watches["total_loss"]
    observe_start, note_run = start.observe, start.note_run
    # The plateau's per-loss step is the detector's own (a copy inlined here
    # saved nothing measurable).
    observe_plateau = plateau._observe
    windows = hacking._windows
    hacking_size = windows.size
    hacking_min_kl, hacking_kl_factor = config.hacking_min_kl, config.hacking_kl_factor
    negative_infinity = -math.inf

    def check(step: int, record: Mapping[str, Any], found: list[Anomaly]) -> None:
        # kl_explosion: at most the threshold and its spike bound (or the
        # spike floor), a finite KL only joins the window (`RecentMedian.append`).
        kls = record.get("kl")
        kl = kls.get("mean") if type(kls) is dict else None
        if (
            type(kl) is float
            and negative_infinity < kl <= kl_threshold
            and (kl <= kl_history.quiet_below or kl <= kl_spike_min)
        ):
            kl_values.append(kl)
            appends = kl_history.appends = kl_history.appends + 1
            if appends >= kl_history.due_at:
                kl_history.take_point()
        elif kls is not None:  # no KL at all: `evaluate` returns at once
            exact(kl_detector, step, record, found)

        losses = record.get("loss")
        if type(losses) is dict or losses is None:
            if not total_watch.done:
                note_run(record)  # the start rule's first step, as in its `evaluate`
            # No losses (another tool's run, HF between `logging_steps`): each rule
            # only keeps a holding incident going, as its `evaluate` does.
            losses_check(step, losses or _NO_LOSSES, found)
        else:
            exact(plateau, step, record, found)
            exact(spike, step, record, found)
            exact(start, step, record, found)

        # gradient_explosion: each norm missing, or below the hard limit and
        # its spike bound (NaN is neither): then each only joins its window.
        gradients = record.get("gradient")
        if type(gradients) is dict:
            first = gradients.get(first_norm)
            second = gradients.get(second_norm)
            if (
                first is None
                or (
                    type(first) is float
                    and first < norm_limit
                    and first <= first_history.quiet_below
                )
            ) and (
                second is None
                or (
                    type(second) is float
                    and second < norm_limit
                    and second <= second_history.quiet_below
                )
            ):
                if first is not None:
                    first_values.append(first)
                    appends = first_history.appends = first_history.appends + 1
                    if appends >= first_history.due_at:
                        first_history.take_point()
                if second is not None:
                    second_values.append(second)
                    appends = second_history.appends = second_history.appends + 1
                    if appends >= second_history.due_at:
                        second_history.take_point()
            else:
                exact(gradient, step, record, found)
        elif gradients is not None:  # no gradient group: `evaluate` returns at once
            exact(gradient, step, record, found)

        # entropy_collapse: no entropy, or one at least its quiet bound
        # (stateless then).
        extra = record.get("extra")
        length = None
        if type(extra) is dict:
            value = None
            for key in ENTROPY_KEYS:
                value = extra.get(key)
                if value is not None:
                    break
            if value is not None and not (type(value) is float and value >= entropy._quiet_from):
                exact(entropy, step, record, found)
            for key in RESPONSE_LENGTH_KEYS:
                length = extra.get(key)
                if length is not None:
                    break
        elif extra is not None:  # no extra group: no entropy, `evaluate` returns at once
            exact(entropy, step, record, found)

        # reward_hacking: three finite floats join the windows; once both are
        # full, the rule's tests on reward and KL (`verdict` repeats them).
        rewards = record.get("reward")
        reward = rewards.get("mean") if type(rewards) is dict else None
        if (
            type(reward) is float
            and type(kl) is float
            and type(length) is float
            and (reward - reward) + (kl - kl) + (length - length) == 0.0
        ):
            if windows.push(reward, kl, length):
                # `verdict`'s first tests, the same expressions: most steps stop here.
                new, old = windows.new, windows.old
                if (
                    new[0] / hacking_size > old[0] / hacking_size
                    and new[1] / hacking_size > hacking_min_kl
                    and new[1] / hacking_size > hacking_kl_factor * (old[1] / hacking_size)
                ):
                    finding = hacking.verdict()
                    if finding is not None:
                        alert(hacking, step, finding, found)
        elif rewards is not None and kls is not None and extra is not None:
            # (Without any of the three groups `evaluate` returns at once.)
            exact(hacking, step, record, found)

    def losses_check(step: int, losses: dict[str, Any], found: list[Anomaly]) -> None:
        # loss_plateau, loss_spike and loss_not_decreasing, one pass over the
        # losses: the `evaluate`s go loss by loss with separate state, and the
        # findings of each keep their order (alerted in `DETECTORS` order).
        plateau_findings: list[Finding] | None = None
        spike_findings: list[Finding] | None = None
        start_findings: list[Finding] | None = None
        for name, progress, scale, watch in loss_states:
            loss = losses.get(name)
            if loss is not None:
                if type(loss) is not float:
                    loss = as_float(loss)
                if loss is not None and loss - loss == 0.0:  # finite
                    progress.holding = observe_plateau(progress, name, loss)
                    if watch is not None and not watch.done:
                        observe_start(watch, name, loss)
                    # `LossSpikeDetector.evaluate`'s steps for one loss.
                    seen = scale.seen = scale.seen + 1
                    if seen > warmup:
                        spiked = (
                            judge_spike(name, scale, loss)
                            if abs(loss) >= scale.quiet_below
                            else None
                        )
                        if spiked is not None:
                            spike_findings = (
                                [spiked] if spike_findings is None else [*spike_findings, spiked]
                            )
                        else:
                            scale.values.append(loss)
                            scale.stale += 1
                            if scale.stale >= scale.every:
                                spike.refresh(scale)
            holding = progress.holding
            if holding is not None:
                plateau_findings = (
                    [holding] if plateau_findings is None else [*plateau_findings, holding]
                )
            if watch is not None and watch.holding is not None:
                start_findings = (
                    [watch.holding] if start_findings is None else [*start_findings, watch.holding]
                )
        if plateau_findings is not None:
            alert(plateau, step, plateau_findings, found)
        if spike_findings is not None:
            alert(spike, step, spike_findings, found)
        if start_findings is not None:
            alert(start, step, start_findings, found)

    return check
