"""Hugging Face adapter: a `TrainerCallback` for `transformers.Trainer` and TRL.

    from training_platform.callbacks.integrations.hf import PlatformTrainerCallback

    trainer = Trainer(..., callbacks=[PlatformTrainerCallback("run7")])  # or TRL GRPOTrainer

The Trainer logs after `on_step_end` (`on_log`, then `on_evaluate`), so a step
whose logs are due stays open until they arrive and is written once, with the
loss, grad norm, TRL's reward/KL/entropy keys and the eval metrics together.
`stop_on_anomaly=True` sets ``control.should_training_stop``. Only the main
process (``state.is_world_process_zero``) writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from training_platform.callbacks.base import StopTraining, report_failure
from training_platform.callbacks.platform_callback import PlatformCallback
from training_platform.callbacks.wire.run_file import package_version

# Keys of the summary the Trainer logs once, after the last step.
_SUMMARY_KEYS = frozenset({"train_runtime", "train_samples_per_second", "train_steps_per_second"})


class PlatformTrainerCallback(TrainerCallback):
    """Feeds a `PlatformCallback` from the Trainer's events.

    Pass a job id (and any `PlatformCallback` option), or a ready `platform`.
    """

    def __init__(
        self,
        job_id: str | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        *,
        platform: PlatformCallback | None = None,
        **options: Any,
    ) -> None:
        if platform is None:
            if job_id is None:
                raise ValueError("PlatformTrainerCallback needs a job_id or a platform callback")
            platform = PlatformCallback(job_id, output_dir, **options)
        self.platform = platform
        self._reported: set[tuple[int, str]] = set()

    def _call(self, hook: str, control: TrainerControl, fn: Callable[[], None]) -> None:
        # Never let monitoring break the Trainer; a requested stop becomes the
        # Trainer's own clean stop, checked right after the step's log/eval/save.
        try:
            fn()
        except StopTraining:
            control.should_training_stop = True
        except Exception:
            report_failure(self._reported, self, hook)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not state.is_world_process_zero:
            self.platform.enabled = False
            return
        total = state.max_steps if state.max_steps and state.max_steps > 0 else None
        self._call("on_train_begin", control, lambda: self._describe_run(args))
        self._call("on_train_begin", control, lambda: self.platform.on_train_begin(total))

    def _describe_run(self, args: TrainingArguments) -> None:
        """The run file's config and framework from the Trainer's arguments (TRL's
        configs are `TrainingArguments` too), unless the user gave their own."""
        info = self.platform.run_info
        is_trl = type(args).__module__.split(".", 1)[0] == "trl"
        framework = "trl" if is_trl else "transformers"
        info.fill(
            config=args, framework={"name": framework, "version": package_version(framework) or "?"}
        )
        run_name = getattr(args, "run_name", None)
        if info.name is None and isinstance(run_name, str) and run_name != args.output_dir:
            info.name = run_name

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        epoch = int(state.epoch or 0)
        self._call("on_epoch_begin", control, lambda: self.platform.on_epoch_begin(epoch))

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # global_step counts finished steps: the step starting now ends as global_step + 1.
        step = state.global_step + 1
        self._call("on_step_begin", control, lambda: self.platform.on_step_begin(step))

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # DefaultFlowCallback ran first and decided whether logs/eval follow.
        waiting = bool(control.should_log or control.should_evaluate)
        step = state.global_step
        self._call(
            "on_step_end", control, lambda: self.platform.on_step_end(step, commit=not waiting)
        )

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs:
            return
        metrics: Mapping[str, Any] = logs
        if _SUMMARY_KEYS & logs.keys():  # the end-of-training summary: keep it apart
            metrics = {f"summary/{key}": value for key, value in logs.items()}
        step = state.global_step

        def log() -> None:
            self.platform.on_log(step, metrics)
            if not control.should_evaluate:  # an evaluation's metrics still follow
                self.platform.commit_step()

        self._call("on_log", control, log)

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        step = state.global_step

        def evaluate() -> None:
            if metrics:
                self.platform.on_evaluate(step, metrics)
            self.platform.commit_step()

        self._call("on_evaluate", control, evaluate)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        step = state.global_step
        path = os.path.join(str(args.output_dir), f"checkpoint-{step}")
        self._call("on_save", control, lambda: self.platform.on_save(step, path))

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._call("on_train_end", control, self.platform.on_train_end)
