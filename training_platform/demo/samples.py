"""The demo's generated samples as text: prompts and completions a person can read.

The demo's model has no tokenizer: its tokens are ids. Each id gets a word
from its class (the task's "allowed" classes become categories: fruits,
colours, animals, numbers), and each prompt says what the task asks of it,
so ``"Name 3 colours."`` → ``"red blue fig"`` reads as what the policy did
(one wrong class, length right). Nothing is made up: the words are the
sampled tokens, in order, up to the EOS the policy generated.
"""

from __future__ import annotations

from typing import Any

from training_platform.demo.grpo import GRPOConfig, GRPOTrainer

_CATEGORIES = (
    ("fruits", ("apple", "pear", "plum", "fig", "kiwi", "lime", "date", "lemon")),
    ("colours", ("red", "blue", "green", "gold", "pink", "grey", "teal", "navy")),
    ("animals", ("cat", "dog", "owl", "fox", "bee", "elk", "yak", "emu")),
    ("numbers", ("one", "two", "six", "ten", "nine", "five", "four", "zero")),
    ("tools", ("saw", "axe", "file", "drill", "rake", "hoe", "vise", "awl")),
    ("metals", ("iron", "tin", "zinc", "lead", "steel", "nickel", "cobalt", "copper")),
)


class Vocabulary:
    """Words for the demo's token ids, and the text of its prompts."""

    def __init__(self, config: GRPOConfig) -> None:
        self.eos = config.vocab
        self.words = [self._word(token, config.classes) for token in range(config.vocab)]
        self.prompts = [  # prompt p asks for 2 + p % (max_length - 2) tokens of class p % classes
            f"Name {2 + p % (config.max_length - 2)} {self._category(p % config.classes)}."
            for p in range(config.prompts)
        ]

    @staticmethod
    def _category(cls: int) -> str:
        return _CATEGORIES[cls][0] if cls < len(_CATEGORIES) else f"class-{cls} words"

    @staticmethod
    def _word(token: int, classes: int) -> str:
        cls, rank = token % classes, token // classes
        if cls < len(_CATEGORIES) and rank < len(_CATEGORIES[cls][1]):
            return _CATEGORIES[cls][1][rank]
        return f"w{token}"

    def decode(self, tokens: list[int]) -> str:
        """The generated words up to (not including) the first EOS."""
        words, eos = self.words, self.eos
        return " ".join(words[token] for token in tokens if token != eos)


def rollout_samples(trainer: GRPOTrainer, vocabulary: Vocabulary) -> dict[str, Any]:
    """`log_samples` arguments for the trainer's last step (one group per prompt slot)."""
    rollout = trainer.last_rollout
    if rollout is None:
        raise RuntimeError("no step has run yet")
    group_size = trainer.config.group_size
    decode, texts = vocabulary.decode, vocabulary.prompts
    # After the first EOS every token is EOS, so dropping EOS keeps the generated words.
    rows = rollout.tokens.tolist()
    finished = rollout.finished.tolist()
    return {
        "prompts": [texts[prompt] for prompt in rollout.prompts.tolist()],
        "completions": [decode(row) for row in rows],
        "rewards": rollout.reward,
        "reward_components": rollout.components,
        "groups": [position // group_size for position in range(len(rows))],
        "response_lengths": rollout.lengths.long(),
        "finish_reasons": ["stop" if done else "length" for done in finished],
    }
