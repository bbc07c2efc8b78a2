"""A tiny decoder-only transformer for demos and tests of `profile-inference`.

``training_platform.tools.tiny_model:build`` is a valid ``module:factory``: it
returns a model with ``make_batch(batch_size, device)`` (random token ids) and
``tokens_per_sample``, which is all the profiler needs to know about an input.
`next_token_accuracy` is an example accuracy hook.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class TinyTransformer(nn.Module):
    """Embedding, a few causal self-attention blocks and a language-model head."""

    causal_mask: torch.Tensor

    def __init__(
        self,
        vocab_size: int = 512,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        seq_len: int = 32,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.tokens_per_sample = seq_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Parameter(torch.zeros(1, seq_len, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, dim_feedforward=4 * d_model, batch_first=True, dropout=0.0
        )
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, seq_len, vocab_size)."""
        hidden = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        mask = self.causal_mask[: tokens.shape[1], : tokens.shape[1]]
        return self.head(self.blocks(hidden, mask=mask, is_causal=True))

    def make_batch(self, batch_size: int, device: torch.device | str) -> torch.Tensor:
        """Random token ids of shape (batch_size, seq_len)."""
        return torch.randint(
            0, self.vocab_size, (batch_size, self.tokens_per_sample), device=device
        )


def build(**kwargs: Any) -> TinyTransformer:
    """The factory `profile-inference` calls (``...tiny_model:build``)."""
    torch.manual_seed(0)  # the same weights every run, so runs compare
    return TinyTransformer(**kwargs).eval()


def next_token_accuracy(outputs: torch.Tensor, batch: torch.Tensor) -> float:
    """Fraction of positions whose argmax equals the next input token (an accuracy hook)."""
    predicted = outputs[:, :-1].argmax(dim=-1)
    return float((predicted == batch[:, 1:]).float().mean().item())
