"""AnomalyConfig: every detector's thresholds, in one place (the bottom of the room).

The detectors read it, `AnomalyMonitor` builds them from it, and the platform
runs the same config over stored records (`live/diagnostics.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AnomalyConfig:
    """Detector thresholds. Steps are counted in records fed to the monitor."""

    cooldown: int = 50
    """An incident ends once its condition has been clear for this many steps,
    or for twice as long as it has lasted, whichever is longer (at most
    `cooldown_max`); until then the detector stays quiet, so a flapping
    condition is one alert (50: the `window` of the recent medians, so spikes
    that keep coming back faster than a baseline forgets them are one) ..."""
    cooldown_max: int = 500
    """The longest clear stretch an incident needs to end (`findings.incident_quiet`)."""
    realert_factor: float = 10.0
    """... unless it gets more severe, or a value lands this many times further
    from its baseline (e.g. the recent median) than the one last alerted."""
    disabled: frozenset[str] = field(default_factory=frozenset)
    """Anomaly types to skip, e.g. ``{"entropy_collapse"}``."""

    kl_threshold: float = 1.0
    """`kl.mean` above this is a critical `kl_explosion` (RLHF runs sit at 0.01-0.3)."""
    kl_spike_factor: float = 10.0
    """`kl.mean` this many times its recent median is a `kl_explosion` warning ..."""
    kl_spike_min: float = 0.1
    """... if it is also above this (early KL is ~0, where any growth is a big ratio)."""

    loss_patience: int = 50
    """`loss_plateau`: a loss frozen (within `loss_min_delta`) this many steps,
    or one that clearly fell and then stopped, judged on blocks of half this
    many values (`loss_block`). `loss_not_decreasing`: a loss that has not
    gone below its start level this many steps after it (`loss_start.py`).
    See `loss.py` and `loss_start.py` for the rules."""
    loss_start_warmup: int = 10
    """`loss_not_decreasing`: values of each loss skipped before its start level
    (the median of the next `loss_block`) is taken: learning-rate warm-up and
    the first batches are no level to judge by."""
    loss_min_delta: float = 1e-4
    """A loss moving less than this is frozen (and must fall more than this to fall)."""
    loss_trend_drop: float = 0.1
    """A loss is watched for a plateau once the median of its last `window`
    values is this fraction (and 1.25 sigmas of its noise) below its early
    level, the median of its first `window` values, when that is clearly
    positive (above two sigmas of their noise)."""
    loss_spike_factor: float = 10.0
    """`loss_spike`: |loss| at least this many times its typical magnitude (the
    larger of the |median| of its last `min_history` values and the sigma of
    its last 2 x `window`, 1.4826 x MAD), for each loss on its own ..."""
    loss_spike_min: float = 0.01
    """... and at least this large (a loss that is ~0 by construction, in float
    noise, must not spike from 1e-9 to 1e-7)."""
    loss_spike_warmup: int = 20
    """Values of each loss ignored by the spike rule (early losses are large and falling)."""

    grad_spike_factor: float = 10.0
    """`gradient_explosion`: a grad norm this many times its recent median."""
    grad_spike_min: float = 0.0
    """... and at least this large (raise it when healthy norms sit near zero)."""
    grad_norm_limit: float | None = None
    """Optional hard limit: a grad norm above it is a critical explosion."""

    window: int = 50
    """Steps of history behind the recent medians (KL, grad norms, losses)."""
    min_history: int = 10
    """Values needed before a relative (median-based) rule may fire."""

    entropy_floor: float = 0.01
    """`entropy_collapse`: policy entropy (nats) below this ..."""
    entropy_drop_fraction: float = 0.9
    """... or below (1 - this) times its early level."""
    entropy_recovery_fraction: float = 0.5
    """... and, once collapsed, it has recovered only above this times its early
    level (until then the incident stays open)."""
    entropy_baseline_steps: int = 10
    """Records whose median entropy is the early level."""

    hacking_window: int = 20
    """`reward_hacking`: compares the mean of the last window with the one before."""
    hacking_kl_factor: float = 2.0
    """KL must grow at least this much between the windows ..."""
    hacking_min_kl: float = 0.05
    """... and end above this level ..."""
    hacking_length_factor: float = 1.3
    """... while the response length grows this much and the reward rises."""

    @property
    def loss_block(self) -> int:
        """Values per block of the loss rules' medians: half of `loss_patience`, at
        least `min_history` (and 1)."""
        return max(1, self.min_history, self.loss_patience // 2)

    @property
    def loss_start_judged_at(self) -> int:
        """The value of a loss at which `loss_not_decreasing` first judges it: after its
        warm-up, its start block and `loss_patience` more."""
        return max(0, self.loss_start_warmup) + self.loss_block + max(1, self.loss_patience)

    @property
    def early_records(self) -> int:
        """How many of a run's first records set early baselines (entropy, loss levels,
        each loss's start and its first `loss_not_decreasing` judgement)."""
        return max(self.entropy_baseline_steps, self.window, self.loss_start_judged_at)
