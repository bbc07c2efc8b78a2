"""training_platform: monitoring for LLM reinforcement-learning training runs."""

__version__ = "0.1.0"
