"""The loss detectors: every loss a run reports, each with its own state.

verl reports `actor/pg_loss` and `critic/vf_loss` (no total), TRL's GRPO and
the HF Trainer report `loss`, TRL's PPO `loss/policy_avg` and `loss/value_avg`;
`wire.FIELD_SOURCES` puts them in `loss.actor_loss`, `loss.critic_loss` and
`loss.total_loss`. Both detectors watch all three, so a stream that reports
only a policy loss is watched as closely as one with a total.

What "spike" and "plateau" mean for a loss that hovers around zero and changes
sign (GRPO's policy loss) is the hard part; the rules, in short:

- spike: ``|loss| >= loss_spike_factor x`` its *typical magnitude* over its
  recent values, and ``>= loss_spike_min``. The typical magnitude is the
  larger of its level (|median| of its last `min_history` values) and its
  noise (1.4826 x the median absolute deviation of its last 2 x `window`
  values, a robust sigma). For a positive loss that is its level:
  a 10x jump fires. For a zero-centred one it is sigma: a 10x jump fires, and
  noise would need a 10-sigma swing (a ratio to the largest |loss| seen, or to
  a mean near zero, is meaningless there). The floor keeps a loss that is ~0
  by construction (1e-9 float noise) quiet.
- plateau, stopped falling: only for a loss that was meant to decrease and
  did: its early level (median of its first `window` values) is clearly
  positive (above two sigmas of their noise) and the median of its last
  `window` values has since fallen below it by `loss_trend_drop` (10 %) of it
  and by 1.25 sigmas. Then, over three consecutive blocks of
  `loss_patience // 2` values, the median fell from the first block to the
  second by far more than noise, and from the second to the third by less
  than a tenth of that (`_stalled`). A zero-centred policy loss, or TRL's
  GRPO loss (beta x KL, which grows), never qualifies: "not improving" is
  their normal state. A loss that converges smoothly is not a plateau; "no
  new best for `loss_patience` values" on raw values fired on every noisy,
  slowly falling loss (a lucky low takes long to beat), so it is gone.
- plateau, frozen: any loss that had been moving (by more than ten
  `loss_min_delta`) and then stays within `loss_min_delta` for
  `loss_patience` values: updates stopped. The one plateau a zero-centred
  loss can have.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from training_platform.callbacks.detectors.findings import Detector, Finding, as_float
from training_platform.callbacks.detectors.windows import (
    MAD_TO_SIGMA,
    SpikeScale,
    level_and_noise,
    median_of,
)

if TYPE_CHECKING:
    from training_platform.callbacks.detectors.config import AnomalyConfig

LOSS_FIELDS: Final = ("total_loss", "actor_loss", "critic_loss")
"""Every field of the `loss` group: total (HF, TRL), policy and value losses."""
# A loss must have spanned this many `loss_min_delta`s before staying within
# one counts as frozen: a loss that is ~0 throughout never moved at all.
_MOVED_FACTOR: Final = 10.0


# An early level is "clearly positive" above this many sigmas of its noise.
_POSITIVE_SIGMAS: Final = 2.0
# A stall: the block before fell by this many standard errors of a median
# difference, and the latest block by less than this fraction of that.
_STALL_SIGMAS: Final = 8.0
_STALL_FRACTION: Final = 0.1
# A decrease must exceed this many sigmas of noise (two medians of 50 noisy
# values differ by ~0.25 sigma by chance: 1.25 sigma is five times that).
_TREND_SIGMAS: Final = 1.25


class LossSpikeDetector(Detector):
    """A loss far beyond its typical magnitude (critical), each loss on its own."""

    type = "loss_spike"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        # Twice the usual window: a noise estimate from 50 values is off by
        # ~16 %, which a 10x rule on a zero-centred loss cannot afford.
        self._scales = {
            name: SpikeScale(2 * config.window, config.min_history, config.min_history)
            for name in LOSS_FIELDS
        }
        # `size >= factor * |level|` is necessary for a spike (the typical
        # magnitude is at least |level|) only for a factor >= 0; else 0: no filter.
        factor = config.loss_spike_factor
        self._level_factor = factor if factor >= 0.0 else 0.0

    def evaluate(self, step: int, record: Mapping[str, Any]) -> list[Finding] | None:
        losses = record.get("loss")
        if type(losses) is not dict and not isinstance(losses, Mapping):
            return None
        config = self.config
        found: list[Finding] | None = None
        for name, scale in self._scales.items():
            loss = losses.get(name)
            if loss is None:
                continue  # not reported by this run (or this step)
            if type(loss) is not float:
                loss = as_float(loss)
                if loss is None:
                    continue
            if loss - loss != 0.0:  # NaN or Inf: the nan_inf detector's case
                continue
            scale.seen += 1
            if scale.seen <= config.loss_spike_warmup:
                continue  # early losses are large and falling: not a scale to judge by
            # The quiet path, one comparison: below the floor or the level's
            # share of the threshold (`quiet_below`), no noise is needed to
            # know it is no spike; inf until `min_history` values are in.
            if abs(loss) >= scale.quiet_below:
                spiked = self.judge(name, scale, loss)
                if spiked is not None:
                    found = [spiked] if found is None else [*found, spiked]
                    # A spike is not folded into the scale: the next value
                    # is judged against the healthy magnitude, not the spike.
                    continue
            # `scale.append(loss)`, inlined: this runs per loss per step.
            scale.values.append(loss)
            scale.stale += 1
            if scale.stale >= scale.every:
                self.refresh(scale)
        return found

    def refresh(self, scale: SpikeScale) -> None:
        """`scale.refresh()`, due now, and the quiet bound from its new level."""
        scale.refresh()
        config = self.config
        if len(scale) >= config.min_history:  # refreshed: a level is in
            scale.quiet_below = max(config.loss_spike_min, self._level_factor * abs(scale.level))

    def judge(self, name: str, scale: SpikeScale, loss: float) -> Finding | None:
        """The spike finding for a `loss` not below `scale.quiet_below`, else None."""
        size = abs(loss)
        typical = max(abs(scale.level), scale.noise())
        if size < self.config.loss_spike_factor * typical:
            return None
        times = size / typical if typical > 0 else math.inf
        message = (
            f"loss.{name} {loss:.4g} is {times:.3g}x its typical magnitude "
            f"{typical:.4g} over the last {len(scale)} steps"
        )
        return Finding("critical", message, f"loss.{name}", size - typical)


class _Progress:
    """What the plateau rule tracks about one loss."""

    __slots__ = (
        "armed", "band_high", "band_low", "band_steps", "below", "blocks", "early",
        "early_level", "high", "holding", "low", "recent", "seen", "stale", "stall",
        "trend_limit", "trending",
    )  # fmt: skip

    def __init__(self, window: int, block: int) -> None:
        self.early: list[float] = []
        self.early_level: float | None = None  # set once clearly positive, else stays None
        # Until armed: the last `window` values, judged every `window // 10`
        # (`stale` counts the values since) ...
        self.recent: deque[float] = deque(maxlen=window)
        self.stale = max(1, window // 10)
        # ... and how many of them are at most `trend_limit`, above which their
        # median cannot have fallen enough: most windows are settled by that
        # count, with no sort.
        self.trend_limit = -math.inf
        self.below = 0
        self.trending = True  # the trend may still arm the rule: follow it
        self.armed = False  # the loss has shown the decrease that makes a plateau news
        self.blocks: deque[float] = deque(maxlen=3 * block)
        self.seen = 0  # values observed
        self.band_low = self.band_high = 0.0
        self.band_steps = 0
        self.low, self.high = math.inf, -math.inf
        self.holding: Finding | None = None  # the finding while the plateau holds
        # While a stall holds: (its finding, the level it stopped at, how far
        # below that the loss must get to be falling again).
        self.stall: tuple[Finding, float, float] | None = None


class LossPlateauDetector(Detector):
    """A loss that stopped falling after a clear decrease, or that froze (warning)."""

    type = "loss_plateau"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._block = max(config.min_history, config.loss_patience // 2)
        self._every = max(1, self._block // 5)
        self._trend_every = max(1, config.window // 10)
        self._progress = {name: _Progress(config.window, self._block) for name in LOSS_FIELDS}
        # Config values read per loss per step, as attributes of this object.
        self._min_delta = config.loss_min_delta
        self._patience = config.loss_patience
        self._moved = _MOVED_FACTOR * config.loss_min_delta

    def evaluate(self, step: int, record: Mapping[str, Any]) -> list[Finding] | None:
        losses = record.get("loss")
        if type(losses) is not dict and not isinstance(losses, Mapping):
            losses = None
        found: list[Finding] | None = None
        for name, progress in self._progress.items():
            loss = None if losses is None else losses.get(name)
            if loss is not None:
                if type(loss) is not float:
                    loss = as_float(loss)
                if loss is not None and loss - loss == 0.0:  # finite
                    progress.holding = self._observe(progress, name, loss)
            # A record without the loss (HF logs it every `logging_steps`) keeps
            # a holding plateau going: the incident continues, it is not new.
            if progress.holding is not None:
                found = [progress.holding] if found is None else [*found, progress.holding]
        return found

    def _observe(self, progress: _Progress, name: str, loss: float) -> Finding | None:
        if progress.trending:
            if progress.early_level is None:
                self._follow_early(progress, loss)  # the first `window` values
            else:
                # The trend's window and count, inlined: this runs per loss per step.
                recent, limit = progress.recent, progress.trend_limit
                if len(recent) == recent.maxlen and recent[0] <= limit:
                    progress.below -= 1  # the append below drops it
                recent.append(loss)
                if loss <= limit:
                    progress.below += 1
                progress.stale += 1
                if progress.stale >= self._trend_every and len(recent) == recent.maxlen:
                    self._judge_trend(progress)
        progress.blocks.append(loss)
        # Plain comparisons, not min()/max(): this runs per loss per step.
        low, high = progress.band_low, progress.band_high
        if loss < low:
            low = loss
        elif loss > high:
            high = loss
        band_steps = progress.band_steps
        if band_steps and high - low <= self._min_delta:
            progress.band_low, progress.band_high = low, high
            band_steps += 1
        else:
            progress.band_low = progress.band_high = loss
            band_steps = 1
        progress.band_steps = band_steps
        if loss < progress.low:
            progress.low = loss
        if loss > progress.high:
            progress.high = loss

        progress.seen += 1
        if progress.armed and len(progress.blocks) == progress.blocks.maxlen:
            stalled = self.stall(progress, name)
            if stalled is not None:
                return stalled
        # Patience steps after its first, having moved before (the cheap test first).
        if band_steps > self._patience and progress.high - progress.low > self._moved:
            return self.frozen(progress, name, loss)
        return None

    def stall(self, progress: _Progress, name: str) -> Finding | None:
        """The stall finding of an armed loss with full blocks (that held, or new), else None."""
        stall = progress.stall
        # Medians of blocks move little from one value to the next: judged
        # every `_every` values, it costs a fifth and finds a stall at most
        # `_every - 1` values later.
        due = progress.seen % self._every == 0
        if stall is not None:
            holding, level, margin = stall
            if not due:
                return holding
            latest = list(progress.blocks)[-self._block :]
            if median_of(latest) > level - margin:
                return holding  # still stuck: the same incident, however long
            progress.stall = None  # falling again
        return self._stalled(progress, name) if due else None

    def frozen(self, progress: _Progress, name: str, loss: float) -> Finding:
        """The finding of a loss that has stayed within `loss_min_delta` too long."""
        return Finding(
            "warning",
            (
                f"loss.{name} has stayed within {self._min_delta:g} of {loss:.4g} "
                f"for {progress.band_steps - 1} steps (it ranged "
                f"{progress.low:.4g}..{progress.high:.4g} before): has training stopped?"
            ),
            f"loss.{name}",
        )

    def _stalled(self, progress: _Progress, name: str) -> Finding | None:
        """The finding when the loss fell clearly over one block and then stopped.

        With three consecutive blocks of `_block` values, oldest first: the
        median fell from the first to the second by far more than noise, and
        from the second to the third by less than `_STALL_FRACTION` of that. A
        loss that levels off smoothly keeps falling by a steady fraction of
        the block before (an exponential by e^(-block/tau)) until that is lost
        in the noise, and is left alone; a loss that stops is flagged about
        1.25 blocks after it stopped.
        """
        block = self._block
        values = list(progress.blocks)
        before, previous, latest = values[:block], values[block : 2 * block], values[2 * block :]
        level_before, level_previous = median_of(before), median_of(previous)
        fell = level_before - level_previous
        if fell <= self.config.loss_min_delta:
            return None
        level = median_of(latest)
        if level_previous - level > _STALL_FRACTION * fell:
            return None
        # The noise, from all three blocks (each value against its block's
        # median): one block's MAD is too unsteady to judge by.
        residuals = sorted(
            [abs(v - level_before) for v in before]
            + [abs(v - level_previous) for v in previous]
            + [abs(v - level) for v in latest]
        )
        noise = MAD_TO_SIGMA * residuals[len(residuals) // 2]
        # Two medians of `block` values differ by chance by ~1.25 * sigma * sqrt(2 / block).
        if fell < _STALL_SIGMAS * 1.25 * noise * math.sqrt(2 / block):
            return None
        finding = Finding(
            "warning",
            (
                f"loss.{name} stopped falling: median {level:.4g} over its last {block} "
                f"values, {level_previous:.4g} over the {block} before, {level_before:.4g} "
                "before that"
            ),
            f"loss.{name}",
        )
        progress.stall = finding, level, max(self.config.loss_min_delta, fell / 2)
        return finding

    def _follow_early(self, progress: _Progress, loss: float) -> None:
        """Collect the first `window` values; then follow the trend if their level is positive."""
        config = self.config
        early = progress.early
        if len(early) >= config.window:
            return
        early.append(loss)
        if len(early) == config.window:
            level, noise = level_and_noise(early)
            # Only a clearly positive early level: around zero, "fell by
            # some fraction" is a coin toss of the noise.
            if level > _POSITIVE_SIGMAS * noise:
                progress.early_level = level
                # The median must be at most this to have fallen by
                # `loss_trend_drop` (a hair above it: rounding must not
                # let the count rule out a window the exact test passes).
                drop = config.loss_trend_drop
                progress.trend_limit = (
                    level - drop * level + 1e-9 * (abs(level) + abs(drop * level))
                )
            else:
                progress.trending = False

    def _judge_trend(self, progress: _Progress) -> None:
        """Arm the plateau rule if the full window's median fell clearly below the early level.

        Called every `window // 10` values (as a re-sort was): in between,
        the verdict of the last call stands.
        """
        config = self.config
        early_level = progress.early_level
        assert early_level is not None
        progress.stale = 0
        # The median is above `trend_limit` unless more than half the values
        # are at most that: then it has not fallen enough, whatever the noise.
        if progress.below <= len(progress.recent) // 2:
            return
        level, noise = level_and_noise(progress.recent)
        # Fallen by `loss_trend_drop` of the early level, and by far more than
        # two window medians of noise differ by chance (~0.25 sigma at 50).
        if early_level - level >= max(config.loss_trend_drop * early_level, _TREND_SIGMAS * noise):
            progress.armed = True
            progress.trending = False
