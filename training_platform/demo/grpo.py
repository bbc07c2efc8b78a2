"""GRPO on a small synthetic sequence task, in plain torch on CPU.

The task: a prompt ``p`` asks for a sequence of ``target_length(p)`` tokens,
each from the prompt's allowed class (``token % classes == p % classes``),
then EOS. The reward in [0, 1] is half the fraction of allowed tokens and half
how close the length came to the target. Several tokens are equally good, so
a healthy policy keeps real entropy; a learning-rate blow-up collapses it.

The policy is a small MLP over (prompt, position, previous token) embeddings,
sampled autoregressively; the reference is a frozen copy of the initial
policy. One GRPO update per batch: group-normalised advantages, a per-token
policy-gradient loss plus ``beta`` times the k3 KL estimator (as in DeepSeek's
GRPO), gradient clipping, Adam. The metrics are measured, not simulated.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class GRPOConfig:
    """The run's hyper-parameters (defaults: a few ms per step on one CPU core)."""

    vocab: int = 16
    """Content tokens; EOS is one more."""
    classes: int = 4
    """Allowed tokens for prompt p: those with token % classes == p % classes."""
    max_length: int = 12
    """Room past the longest target (7): a healthy policy ends with EOS before it."""
    prompts: int = 8
    group_size: int = 8
    """Samples per prompt: the G of GRPO."""
    batch_prompts: int = 8
    hidden: int = 32
    lr: float = 2e-3
    beta: float = 0.5
    """Weight of the KL-to-reference penalty in the loss."""
    max_grad_norm: float = 1.0


class Policy(nn.Module):
    """Logits over vocab + EOS for every (prompt, position, previous token) state.

    The policy is Markov in that small state space (8 x 8 x 18 states), so one
    forward yields the whole table, which serves the rollout and the loss: far
    fewer tiny CPU ops than a forward per generated position. The three
    embeddings are added by broadcasting rather than by index lookups, whose
    backward is the slowest op at this size.
    """

    def __init__(self, config: GRPOConfig) -> None:
        super().__init__()
        size = config.hidden
        self.prompt = nn.Parameter(torch.randn(config.prompts, 1, 1, size))
        self.position = nn.Parameter(torch.randn(1, config.max_length, 1, size))
        self.previous = nn.Parameter(torch.randn(1, 1, config.vocab + 2, size))  # + EOS, BOS
        self.body = nn.Sequential(nn.Tanh(), nn.Linear(size, size), nn.Tanh())
        self.head = nn.Linear(size, config.vocab + 1)
        with torch.no_grad():
            # An untrained policy already ends its answers now and then (EOS about
            # as likely as three content tokens), as a pretrained model does:
            # otherwise most of its first answers run into the length limit.
            self.head.bias[config.vocab] += math.log(3.0)

    def forward(self) -> torch.Tensor:
        """Log-probabilities, shape (prompts, max_length, vocab + 2, vocab + 1)."""
        hidden = self.prompt + self.position + self.previous
        return torch.log_softmax(self.head(self.body(hidden)), dim=-1)


@dataclass
class Rollout:
    """What one step generated and how it was scored (for `log_samples`)."""

    prompts: torch.Tensor
    """(batch,) prompt ids; each prompt's `group_size` samples are consecutive."""
    tokens: torch.Tensor
    """(batch, max_length) sampled tokens; EOS from the first EOS on."""
    lengths: torch.Tensor
    """(batch,) generated tokens, the EOS included (the metrics' response length)."""
    finished: torch.Tensor
    """(batch,) bool: EOS was generated before the length limit."""
    reward: torch.Tensor
    components: dict[str, torch.Tensor]
    """The reward functions, each in [0, 1]; `reward` is their mean."""


StageFactory = Callable[[str], AbstractContextManager[Any]]
"""``stage("rollout")``: a context manager timing one stage (the profiling kit's `stage`)."""


class _OwnTimer:
    """The stage timing the demo does without the profiling kit: seconds per stage."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - started


def _top_level(times: dict[str, float]) -> dict[str, float]:
    """The demo's own timing group: the five stages (backward and optimizer are in the update)."""
    return {name: seconds for name, seconds in times.items() if name not in _NESTED}


_NESTED = frozenset({"backward", "optimizer"})


class GRPOTrainer:
    """Owns the task, the policy, its frozen reference and the optimizer."""

    def __init__(self, config: GRPOConfig, seed: int) -> None:
        self.config = config
        self.generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):  # seeded init, global RNG untouched
            torch.manual_seed(seed)
            self.policy = Policy(config)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        # fused: one kernel for all parameters, ~2x faster than the loop at this size
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr, fused=True)
        self.eos = config.vocab
        self.bos = config.vocab + 1
        prompts = torch.arange(config.prompts)
        self.targets = 2 + prompts % 6  # lengths 2 .. 7, well inside max_length
        self.positions = torch.arange(config.max_length)
        # Row of state (prompt, position, previous) in the flattened table.
        self.states_per_position = config.vocab + 2
        self.position_offsets = self.positions * self.states_per_position
        self._reference_table: torch.Tensor | None = None
        self.last_rollout: Rollout | None = None

    def step(
        self, lr: float, inject_nan: bool = False, stage: StageFactory | None = None
    ) -> dict[str, Any]:
        """One GRPO step; returns the groups of docs/contract.md §2 for the record.

        The stages (rollout, reward, ref, advantage, update_actor with its
        backward and optimizer inside) are timed by `stage` when given (the
        profiling kit's `StepProfiler.stage`, whose ``timing`` group then goes
        into the record), else by the demo itself, into ``timing``.
        """
        config = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        own = _OwnTimer() if stage is None else None
        timed: StageFactory = own if own is not None else stage  # type: ignore[assignment]
        started = time.perf_counter()

        with timed("rollout"):
            table = self.policy()  # with grad: reused by the update below
            with torch.no_grad():
                prompts, tokens, mask = self._rollout(table.detach())

        with timed("reward"):
            rewards, components = self._reward(prompts, tokens, mask)

        with timed("ref"):
            previous = torch.cat([torch.full_like(tokens[:, :1], self.bos), tokens[:, :-1]], dim=1)
            index = (self._state_index(prompts)[:, None] + self.position_offsets + previous).view(
                -1
            )
            with torch.no_grad():
                if self._reference_table is None:  # the reference is frozen: one forward
                    self._reference_table = self.reference().view(-1, config.vocab + 1)
                ref_logp = self._reference_table.index_select(0, index).view(*tokens.shape, -1)

        with timed("advantage"):
            grouped = rewards.view(-1, config.group_size)
            spread = grouped.std(1, keepdim=True)
            advantages = ((grouped - grouped.mean(1, keepdim=True)) / (spread + 1e-4)).reshape(
                -1, 1
            )
            zero_std = (spread < 1e-6).float().mean().item()

        with timed("update_actor"):
            logp_all = table.view(-1, config.vocab + 1).index_select(0, index)
            logp_all = logp_all.view(*tokens.shape, -1)
            logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
            ref_taken = ref_logp.gather(-1, tokens[..., None]).squeeze(-1)
            ratio = torch.exp(logp - logp.detach())  # one on-policy update: ratio is 1, grad is not
            delta = ref_taken - logp
            k3 = torch.exp(delta) - delta - 1.0  # unbiased, always >= 0 KL estimator
            per_token = -advantages * ratio + config.beta * k3
            lengths = mask.sum(1).clamp(min=1)
            self.last_rollout = Rollout(
                prompts, tokens, lengths, (tokens == self.eos).any(1), rewards, components
            )
            loss = ((per_token * mask).sum(1) / lengths).mean()
            if inject_nan:
                loss = loss * math.nan  # a corrupt batch: the loss, then every gradient
            self.optimizer.zero_grad(set_to_none=True)
            with timed("backward"):
                loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self.policy.parameters(), config.max_grad_norm
            )
            # Like AMP's GradScaler: a non-finite gradient skips the update, the run goes on.
            with timed("optimizer"):
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
        t_update = time.perf_counter()

        with torch.no_grad():
            logp_all = logp_all.detach()
            probs = logp_all.exp()
            kl_tok = (probs * (logp_all - ref_logp)).sum(-1)  # exact KL(pi || ref) per token
            entropy_tok = -(probs * logp_all).sum(-1)
            kl_seq = (kl_tok * mask).sum(1) / lengths
            n_tokens = mask.sum().item()
            stats = torch.stack(
                [
                    loss.detach(),
                    rewards.mean(),
                    rewards.std(),
                    rewards.max(),
                    rewards.min(),
                    kl_seq.mean(),
                    kl_seq.max(),
                    grad_norm,
                    (entropy_tok * mask).sum() / n_tokens,
                    (k3.detach() * mask).sum() / n_tokens,
                    lengths.mean(),
                    lengths.max(),
                ]
            ).tolist()  # one conversion instead of a dozen .item() calls
        (loss_v, r_mean, r_std, r_max, r_min, kl_mean, kl_max, g_norm, entropy, k3_mean,
         len_mean, len_max) = stats  # fmt: skip
        step_time = t_update - started
        return {
            "loss": {"actor_loss": loss_v},
            "reward": {"mean": r_mean, "std": r_std, "max": r_max, "min": r_min},
            "kl": {"mean": kl_mean, "max": kl_max},
            "gradient": {"actor_norm": g_norm},
            "performance": {"tokens_per_second": n_tokens / step_time, "step_time": step_time},
            **({"timing": _top_level(own.times)} if own is not None else {}),
            "extra": {
                "actor/entropy": entropy,
                "actor/kl_k3": k3_mean,
                "actor/kl_coef": config.beta,
                "actor/lr": lr,
                "response_length/mean": len_mean,
                "response_length/max": len_max,
                "reward/frac_zero_std": zero_std,
            },
        }

    @property
    def tokens_last_step(self) -> int:
        """Tokens generated in the last step (for the profiler's tokens/s)."""
        rollout = self.last_rollout
        return int(rollout.lengths.sum().item()) if rollout is not None else 0

    def _state_index(self, prompts: torch.Tensor) -> torch.Tensor:
        return prompts * (self.config.max_length * self.states_per_position)

    def _rollout(self, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample `group_size` completions for `batch_prompts` random prompts.

        Gumbel-max sampling with all the noise drawn up front: per position one
        gather, one add and one argmax.
        """
        config = self.config
        picked = torch.randint(config.prompts, (config.batch_prompts,), generator=self.generator)
        prompts = picked.repeat_interleave(config.group_size)
        batch = prompts.shape[0]
        uniform = torch.rand(batch, config.max_length, config.vocab + 1, generator=self.generator)
        gumbel = -torch.log(-torch.log(uniform.clamp_(1e-10, 1.0 - 1e-7)))
        tokens = torch.full((batch, config.max_length), self.eos, dtype=torch.long)
        previous = torch.full((batch,), self.bos, dtype=torch.long)
        flat = table.view(-1, config.vocab + 1)
        base = self._state_index(prompts)
        for position in range(config.max_length):
            rows = flat.index_select(0, base + self.position_offsets[position] + previous)
            sampled = (rows + gumbel[:, position]).argmax(-1)
            sampled = torch.where(previous == self.eos, self.eos, sampled)
            tokens[:, position] = sampled
            previous = sampled
        # Generated tokens: everything up to and including the first EOS.
        is_eos = tokens == self.eos
        before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
        mask = (before == 0).float()
        return prompts, tokens, mask

    def _reward(
        self, prompts: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The reward and the two functions it averages (share of allowed
        tokens, closeness of the length)."""
        config = self.config
        content = mask.bool() & (tokens != self.eos)
        count = content.sum(1)
        allowed = (tokens % config.classes == (prompts % config.classes)[:, None]) & content
        fraction = allowed.sum(1) / count.clamp(min=1)
        distance = (count - self.targets[prompts]).abs() / config.max_length
        # An empty answer earns nothing: a length score for saying nothing would
        # pay the policy for emitting EOS at once (reward hacking).
        closeness = torch.where(count > 0, 1.0 - distance, torch.zeros_like(distance))
        reward = 0.5 * fraction + 0.5 * closeness
        return reward, {"allowed_tokens": fraction, "length": closeness}
