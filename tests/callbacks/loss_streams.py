"""Synthetic verl-, TRL- and HF-shaped metric streams for the loss detector tests.

Each stream is the flat dict a trainer logs per step, with the key set of the
captured samples in tests/callbacks/samples (verl's PPO step metrics, TRL's
GRPO and PPO logs) or of a plain HF Trainer log, and values that move the way
a healthy run's do: a GRPO policy loss that hovers around zero and changes
sign, value and LM losses that fall and level off, KL that drifts up, noise
with occasional wider batches. `Fault`s rewrite a stream from an onset on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.callbacks.helpers import sample

Metrics = dict[str, Any]
Fault = Callable[[int, Metrics], None]

# verl's GRPO has no critic: these keys of the PPO sample are not logged.
_VERL_CRITIC_ONLY = (
    "critic/vf_loss",
    "critic/vf_clipfrac",
    "critic/vpred_mean",
    "critic/grad_norm",
    "critic/lr",
    "critic/values/mean",
    "critic/values/max",
    "critic/values/min",
    "critic/vf_explained_var",
    "timing_s/values",
    "timing_s/update_critic",
)


def _noise(rng: random.Random, sigma: float) -> float:
    """Gaussian noise with one batch in fifty twice as wide (a realistic tail)."""
    return rng.gauss(0.0, sigma * (2.0 if rng.random() < 0.02 else 1.0))


def _decaying(step: int, start: float, end: float, scale: float) -> float:
    return end + (start - end) * math.exp(-step / scale)


def verl_ppo(step: int, rng: random.Random) -> Metrics:
    metrics: Metrics = sample("verl_ppo_step_metrics.json")
    progress = min(1.0, step / 2000)
    kl = 0.002 + 0.02 * progress
    metrics.update(
        {
            "training/global_step": step,
            "actor/pg_loss": -0.005 + _noise(rng, 0.02),
            "actor/kl_loss": kl * (1 + _noise(rng, 0.05)),
            "actor/ppo_kl": 0.001 * (1 + _noise(rng, 0.2)),
            "actor/entropy": 0.9 - 0.3 * progress + _noise(rng, 0.01),
            "actor/grad_norm": 0.9 * (1 + _noise(rng, 0.15)),
            "critic/vf_loss": _decaying(step, 1.2, 0.15, 400) * (1 + _noise(rng, 0.05)),
            "critic/grad_norm": 2.0 * (1 + _noise(rng, 0.15)),
            "critic/score/mean": 0.3 + 0.3 * progress + _noise(rng, 0.02),
            "response_length/mean": 410.0 * (1 + _noise(rng, 0.03)),
        }
    )
    return metrics


def verl_grpo(step: int, rng: random.Random) -> Metrics:
    metrics = verl_ppo(step, rng)
    for key in _VERL_CRITIC_ONLY:
        del metrics[key]
    metrics["actor/pg_loss"] = _noise(rng, 0.02)  # zero-mean advantages: sign changes
    return metrics


def trl_grpo(step: int, rng: random.Random) -> Metrics:
    metrics: Metrics = sample("trl_grpo_log.json")
    progress = min(1.0, step / 2000)
    kl = 0.001 + 0.05 * progress
    metrics.update(
        {
            # beta * KL plus a zero-mean surrogate term: small, changes sign early.
            "loss": 0.04 * kl + _noise(rng, 0.01),
            "grad_norm": 0.4 * (1 + _noise(rng, 0.15)),
            "kl": kl * (1 + _noise(rng, 0.05)),
            "entropy": 0.7 - 0.2 * progress + _noise(rng, 0.01),
            "reward": 1.0 + 0.5 * progress + _noise(rng, 0.05),
            "completions/mean_length": 230.0 * (1 + _noise(rng, 0.03)),
        }
    )
    return metrics


def trl_ppo(step: int, rng: random.Random) -> Metrics:
    metrics: Metrics = sample("trl_ppo_log.json")
    progress = min(1.0, step / 2000)
    metrics.update(
        {
            "episode": 64 * step,
            "loss/policy_avg": -0.01 + _noise(rng, 0.015),
            "loss/value_avg": _decaying(step, 0.5, 0.05, 300) * (1 + _noise(rng, 0.05)),
            "objective/kl": 0.05 + 0.3 * progress + _noise(rng, 0.005),
            "objective/entropy": 40.0 - 10 * progress + _noise(rng, 0.3),
            "objective/scores": 1.0 + 0.5 * progress + _noise(rng, 0.05),
            "policy/entropy_avg": 1.9 - 0.5 * progress + _noise(rng, 0.01),
        }
    )
    return metrics


def hf_sft(step: int, rng: random.Random) -> Metrics:
    """A plain HF Trainer log: an LM loss that falls fast, then slowly."""
    loss = _decaying(step, 3.0, 1.2, 150) * (1 + _noise(rng, 0.03))
    return {
        "loss": loss,
        "grad_norm": 1.5 * (1 + _noise(rng, 0.15)),
        "learning_rate": 2e-5,
        "epoch": step / 1000,
    }


@dataclass(frozen=True)
class Stream:
    name: str
    make: Callable[[int, random.Random], Metrics]
    policy_key: str
    """The flat key of the policy (or only) loss."""
    policy_field: str
    """Where the wire format puts it."""
    falling_key: str | None
    """A loss that falls and levels off, if the stream has one."""
    falling_field: str | None


STREAMS = (
    Stream("verl_ppo", verl_ppo, "actor/pg_loss", "actor_loss", "critic/vf_loss", "critic_loss"),
    Stream("verl_grpo", verl_grpo, "actor/pg_loss", "actor_loss", None, None),
    Stream("trl_grpo", trl_grpo, "loss", "total_loss", None, None),
    Stream("trl_ppo", trl_ppo, "loss/policy_avg", "actor_loss", "loss/value_avg", "critic_loss"),
    Stream("hf_sft", hf_sft, "loss", "total_loss", "loss", "total_loss"),
)


def verl_ppo_slow_value(step: int, rng: random.Random) -> Metrics:
    """verl PPO with a value loss that falls slowly under its noise: by ~1.5
    sigma over the 50 steps between the middles of its start block and of the
    block `loss_not_decreasing` first judges."""
    metrics = verl_ppo(step, rng)
    metrics["critic/vf_loss"] = _decaying(step, 1.2, 0.3, 500) * (1 + _noise(rng, 0.05))
    return metrics


def verl_grpo_positive_policy(step: int, rng: random.Random) -> Metrics:
    """verl GRPO whose policy loss sits clearly above zero and drifts up (token-mean
    aggregation over groups of uneven lengths): a policy loss has no direction."""
    metrics = verl_grpo(step, rng)
    metrics["actor/pg_loss"] = 0.05 + 0.02 * min(1.0, step / 500) + _noise(rng, 0.005)
    return metrics


def trl_grpo_kl_loss(step: int, rng: random.Random) -> Metrics:
    """TRL GRPO with a large beta: its `loss` is mostly beta x KL, clearly positive
    and growing with the KL (the total of an RL run has no direction)."""
    metrics = trl_grpo(step, rng)
    metrics["loss"] = 0.2 * metrics["kl"] + 0.01 + _noise(rng, 0.001)
    return metrics


HEALTHY_RL = (
    Stream(
        "verl_ppo_slow_value",
        verl_ppo_slow_value,
        "actor/pg_loss",
        "actor_loss",
        "critic/vf_loss",
        "critic_loss",
    ),
    Stream(
        "verl_grpo_positive_policy",
        verl_grpo_positive_policy,
        "actor/pg_loss",
        "actor_loss",
        None,
        None,
    ),
    Stream("trl_grpo_kl_loss", trl_grpo_kl_loss, "loss", "total_loss", None, None),
)
"""More healthy RL runs whose losses do not fall (or barely): no alarm either."""
HEALTHY = STREAMS + HEALTHY_RL


def metrics_stream(
    stream: Stream, steps: int, fault: Fault | None = None, seed: int = 0
) -> Iterator[tuple[int, Metrics]]:
    """(step, flat metrics) for `steps` steps, each passed through `fault`."""
    rng = random.Random(seed)
    for step in range(steps):
        metrics = stream.make(step, rng)
        if fault is not None:
            fault(step, metrics)
        yield step, metrics


def spike(key: str, onset: int, times: float = 10.0) -> Fault:
    """At `onset`, `key` jumps to `times` x the largest |value| of the 20 steps
    before (a 10x spike however the loss is read), with the sign flipped: a
    GRPO policy loss spikes either way."""
    recent: list[float] = []

    def fault(step: int, metrics: Metrics) -> None:
        if step < onset:
            recent.append(metrics[key])
        elif step == onset:
            metrics[key] = -math.copysign(times * max(map(abs, recent[-20:])), recent[-1])

    return fault


def frozen(key: str, onset: int) -> Fault:
    """From `onset` on, `key` repeats its value of the onset step: updates stopped."""
    held: list[float] = []

    def fault(step: int, metrics: Metrics) -> None:
        if step >= onset:
            if not held:
                held.append(metrics[key])
            metrics[key] = held[0]

    return fault


def stalled(key: str, onset: int, wobble: float = 0.01) -> Fault:
    """From `onset` on, `key` stops falling and wobbles up to `wobble` (relative)
    above its onset value: a plateau, with noise."""
    held: list[float] = []

    def fault(step: int, metrics: Metrics) -> None:
        if step >= onset:
            if not held:
                held.append(metrics[key])
            metrics[key] = held[0] * (1 + wobble * (step % 3) / 2)

    return fault
