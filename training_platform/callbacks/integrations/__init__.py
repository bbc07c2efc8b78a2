"""Adapters for real trainers; each imports its library, so import the one you use:

- `training_platform.callbacks.integrations.hf`: `PlatformTrainerCallback` for
  `transformers.Trainer` and TRL's trainers;
- `training_platform.callbacks.integrations.trl`: `record_samples`, one line
  that logs a GRPO run's prompts, completions and per-function rewards;
- `training_platform.callbacks.integrations.verl`: `VerlTrackingBackend`,
  `register_verl_backend()`, `attach_to_tracking()` (verl's own rollout dumps
  are read by the platform: docs/contract.md, Samples).

Plain loops need no adapter: `training_platform.callbacks.platform_run`.
"""
