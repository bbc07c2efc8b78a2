"""`loss_not_decreasing`: a loss that has not gone down from where it started.

The documents' "Loss 不下降": a loss that is flat or rising from its first
step. `loss_plateau` cannot see it (it needs a clear fall first, or a loss
that moved and then froze), so this rule watches each loss with a direction
from its start, once:

1. Its first `loss_start_warmup` values are skipped (learning-rate warm-up,
   the first batches); its start level is the median of the next `block`
   (`AnomalyConfig.loss_block`, half of `loss_patience`) values.
2. `loss_patience` values later it is judged, and after that on every value:
   the median of its last `block` values (its current level) against the
   start level, in units of the standard error of that difference (two
   medians of `block` values: ~1.25 sigma x sqrt(2 / block)), at least
   `loss_min_delta`. Sigma comes from the values' step-to-step differences
   (1.4826 x their MAD / sqrt 2), which a steady trend does not inflate,
   once, at the first judgement.
3. Above start - 1/2 unit: not decreasing, one warning naming the loss,
   both levels and the steps waited; it holds (one incident) until the loss
   is 4 units below its start: improved. Then, or if it improved before it
   was judged, or if it clearly fell during its warm-up (a warm-up median 4
   units above the start: it converged early), the rule is done with that
   loss: a loss that fell and then stalls is `loss_plateau`'s, and a
   converged loss is no alarm. In between, it keeps watching.

Only a loss that can "not go down" is watched (docs/trainer.md has the table):

- `loss.total_loss` (HF/TRL SFT and DPO `loss`): down, unless the run
  reports a reward or a KL. Then it is an RL objective (TRL GRPO's `loss` is
  the surrogate plus beta x KL: it hovers near zero and grows with the KL),
  with no direction.
- `loss.critic_loss` (verl `critic/vf_loss`, TRL PPO `loss/value_avg`): down.
- `loss.actor_loss`, a policy loss (verl `actor/pg_loss`, TRL PPO
  `loss/policy_avg`): never. Advantage-weighted, it hovers around zero and
  may rise while the policy improves.
- Any of them whose start level is not clearly positive (above two sigmas of
  its noise): around zero, "not lower than the start" is a coin toss.

KL and entropy losses are not in the `loss` group (verl's `actor/kl_loss` is
`kl.mean`, `actor/entropy_loss` stays in `extra`): `kl_explosion` and
`entropy_collapse` watch them, and neither has "down" as its healthy direction.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final

from training_platform.callbacks.detectors.findings import Detector, Finding, as_float, number
from training_platform.callbacks.detectors.windows import level_and_noise, median_of

if TYPE_CHECKING:
    from training_platform.callbacks.detectors.config import AnomalyConfig

WATCHED: Final = ("total_loss", "critic_loss")
"""The losses that must go down (`actor_loss`, a policy loss, has no direction)."""
# The start level is watched only when clearly positive: above this many sigmas.
_POSITIVE_SIGMAS: Final = 2.0
# Not decreasing: the current level above start - this many units (a loss
# falling by 1.5 sigma between the two blocks is there by chance in ~1e-4 of
# runs, by 1 sigma in ~1 %: docs/trainer.md); improved: at most start - this
# many (a flat loss is, by chance, in ~3e-5 of its windows).
_FLAG_UNITS: Final = 0.5
_CLEAR_UNITS: Final = 4.0
# sqrt(pi / 2): the standard error of a median of n Gaussian values is about
# this times sigma / sqrt(n).
_MEDIAN_ERROR: Final = 1.2533


class _Watch:
    """What the rule keeps about one loss."""

    __slots__ = (
        "clear_at", "cleared", "done", "flag_at", "flagged", "holding", "level", "recent",
        "seen", "values",
    )  # fmt: skip

    def __init__(self) -> None:
        self.seen = 0  # finite values observed, warm-up included
        self.values: list[float] = []  # every value until the first judgement
        self.recent: deque[float] = deque()  # the last `block` values, once judged
        self.level = 0.0  # the start level
        # The current level is above `flag_at` unless more than half of `recent`
        # is at most that (the same for `clear_at`): two counts, no sort per value.
        self.flag_at = self.clear_at = 0.0
        self.flagged = self.cleared = 0
        self.holding: Finding | None = None  # the finding while not decreasing
        self.done = False  # improved, or nothing to watch: the rule is over for it


class LossNotDecreasingDetector(Detector):
    """A loss with a direction that has not gone below its start level (warning)."""

    type = "loss_not_decreasing"

    def __init__(self, config: AnomalyConfig) -> None:
        super().__init__(config)
        self._block = config.loss_block
        self._warmup = max(0, config.loss_start_warmup)
        self._judged_at = config.loss_start_judged_at
        # The current level is the median: at most a threshold once this many
        # of the last `block` values are (`median_of` takes the upper middle).
        self._majority = self._block // 2 + 1
        self.watches = {name: _Watch() for name in WATCHED}

    def evaluate(self, step: int, record: Mapping[str, Any]) -> list[Finding] | None:
        self.note_run(record)
        losses = record.get("loss")
        if type(losses) is not dict and not isinstance(losses, Mapping):
            losses = None
        found: list[Finding] | None = None
        for name, watch in self.watches.items():
            if watch.done:
                continue
            loss = None if losses is None else losses.get(name)
            if loss is not None:
                if type(loss) is not float:
                    loss = as_float(loss)
                if loss is not None and loss - loss == 0.0:  # finite
                    self.observe(watch, name, loss)
            # A record without the loss keeps the incident going, as a plateau's does.
            if watch.holding is not None:
                found = [watch.holding] if found is None else [*found, watch.holding]
        return found

    def note_run(self, record: Mapping[str, Any]) -> None:
        """Stop watching the total loss once the run shows a reward or a KL: an RL run's."""
        total = self.watches["total_loss"]
        if not total.done and (
            number(record, "reward", "mean") is not None or number(record, "kl", "mean") is not None
        ):
            _retire(total)

    def observe(self, watch: _Watch, name: str, loss: float) -> None:
        """Fold one finite value of a watched loss in; set or clear `watch.holding`."""
        seen = watch.seen = watch.seen + 1
        if seen < self._judged_at:
            watch.values.append(loss)
            return
        if seen == self._judged_at:
            watch.values.append(loss)
            if not self._start(watch):
                return
        else:
            # The window's counts, kept without a sort: this runs per value.
            recent = watch.recent
            gone = recent[0]  # full: the append below drops it
            if gone <= watch.flag_at:
                watch.flagged -= 1
                if gone <= watch.clear_at:
                    watch.cleared -= 1
            recent.append(loss)
            if loss <= watch.flag_at:
                watch.flagged += 1
                if loss <= watch.clear_at:
                    watch.cleared += 1
        if watch.cleared >= self._majority:
            _retire(watch)  # improved: a later stall is `loss_plateau`'s
        elif watch.flagged < self._majority and watch.holding is None:
            watch.holding = self._finding(watch, name)

    def _start(self, watch: _Watch) -> bool:
        """The first judgement's thresholds; False (and done) if the loss has no
        direction or clearly fell during its warm-up."""
        warmup, block = self._warmup, self._block
        early, values = watch.values[:warmup], watch.values[warmup:]
        watch.values = []
        level = median_of(values[:block])
        # Sigma from the step-to-step differences: a steady fall shifts them
        # all alike, which their MAD ignores; each carries two values' noise.
        noise = level_and_noise([b - a for a, b in pairwise(values)])[1]
        noise /= math.sqrt(2.0)
        if not level > _POSITIVE_SIGMAS * noise:  # zero-centred, negative, or ~0
            _retire(watch)
            return False
        unit = max(_MEDIAN_ERROR * noise * math.sqrt(2.0 / block), self.config.loss_min_delta)
        if early and median_of(early) >= level + _CLEAR_UNITS * unit:
            _retire(watch)  # it did decrease, before its start: converged early
            return False
        watch.level = level
        watch.flag_at = flag_at = level - _FLAG_UNITS * unit
        watch.clear_at = clear_at = level - _CLEAR_UNITS * unit
        watch.recent = deque(values[-block:], maxlen=block)
        watch.flagged = sum(1 for v in watch.recent if v <= flag_at)
        watch.cleared = sum(1 for v in watch.recent if v <= clear_at)
        return True

    def _finding(self, watch: _Watch, name: str) -> Finding:
        block = self._block
        current = median_of(list(watch.recent))
        return Finding(
            "warning",
            (
                f"loss.{name} has not decreased in the {watch.seen - self._warmup} steps "
                f"after its warm-up: median {current:.4g} over its last {block} values, "
                f"{watch.level:.4g} over its first {block}"
            ),
            f"loss.{name}",
        )


def _retire(watch: _Watch) -> None:
    watch.done = True
    watch.holding = None
    watch.values = []
    watch.recent = deque()
