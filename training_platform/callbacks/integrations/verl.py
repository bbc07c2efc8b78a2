"""verl adapter: a tracking backend with verl's logger interface.

verl's trainers log one flat dict per step through
``verl.utils.tracking.Tracking``, which calls ``log(data=..., step=...)`` on
each backend (and ``finish()`` on some). `VerlTrackingBackend` is such a
backend; verl's keys (``actor/pg_loss``, ``critic/score/mean``,
``timing_s/gen``, ``perf/throughput``, ...) map onto the groups of docs/contract.md §2 through
`wire.FIELD_SOURCES`, the rest lands in ``extra``.

Plugging it in, in the process that runs ``RayPPOTrainer.fit()`` (verl's
``TaskRunner.run`` in ``main_ppo.py``, or your own entry point)::

    from training_platform.callbacks.integrations.verl import register_verl_backend
    register_verl_backend()            # then: trainer.logger='[console,platform]'

The job id defaults to ``trainer.experiment_name``; pass ``job_id=...`` to
choose it. With your own `Tracking` object, one line does it::

    attach_to_tracking(tracking, "run7")

verl has no stop hook: with ``stop_on_anomaly=True``, `StopTraining` leaves
``log()`` and ends ``fit()``; the status file says ``stopped`` and why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from training_platform.callbacks.base import StopTraining
from training_platform.callbacks.platform_callback import PlatformCallback
from training_platform.callbacks.wire.run_file import package_version

BACKEND_NAME = "platform"


class VerlTrackingBackend:
    """``log(data, step)`` / ``finish()``: one record per verl step."""

    def __init__(
        self,
        job_id: str | None = None,
        output_dir: str | os.PathLike[str] | None = None,
        *,
        total_steps: int | None = None,
        platform: PlatformCallback | None = None,
        **options: Any,
    ) -> None:
        if platform is None:
            if job_id is None:
                raise ValueError("VerlTrackingBackend needs a job_id or a platform callback")
            platform = PlatformCallback(job_id, output_dir, **options)
        self.platform = platform
        self.total_steps = total_steps
        self._started = False
        self._last_step: int | None = None

    def log(self, data: Mapping[str, Any], step: int) -> None:
        """Write `data` as the record of `step` (a second call for the same step
        merges into it: the platform keeps the newest line of a step)."""
        if not self._started:
            self._started = True
            self.platform.on_train_begin(self.total_steps)
        step = int(step)
        try:
            if step == self._last_step:  # e.g. validation metrics logged separately
                self.platform.on_log(step, data)
            else:
                self.platform.on_step_end(step, data)
            self._last_step = step
        except StopTraining as stop:
            self.platform.on_exception(stop)
            self.finish()
            raise

    def finish(self) -> None:
        """Mark the run completed (or stopped/failed if it was) and close the files."""
        if self._started:
            self.platform.on_train_end()
            self._started = False


def attach_to_tracking(
    tracking: Any, job_id: str, output_dir: str | os.PathLike[str] | None = None, **options: Any
) -> VerlTrackingBackend:
    """Add a `VerlTrackingBackend` to an existing ``verl.utils.tracking.Tracking``."""
    backend = VerlTrackingBackend(job_id, output_dir, **options)
    tracking.logger[BACKEND_NAME] = backend
    return backend


def job_id_from_name(name: str) -> str:
    """A valid job id from a free-form experiment name (invalid characters -> ``_``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-")[:128]
    return cleaned or "verl"


def register_verl_backend(
    job_id: str | None = None, output_dir: str | os.PathLike[str] | None = None, **options: Any
) -> None:
    """Teach ``verl.utils.tracking.Tracking`` a ``"platform"`` backend (idempotent).

    After this, ``trainer.logger=[console,platform]`` makes every `Tracking`
    built with that backend list write the platform's files, and finishes the
    run when verl drops its `Tracking` at the end of ``fit()``.
    """
    from verl.utils import tracking as verl_tracking

    cls: Any = verl_tracking.Tracking  # patched in place: its own types do not allow it
    if getattr(cls, "_training_platform_options", None) is not None:
        cls._training_platform_options = (job_id, output_dir, options)
        return
    cls._training_platform_options = (job_id, output_dir, options)
    if BACKEND_NAME not in cls.supported_backend:
        cls.supported_backend = [*cls.supported_backend, BACKEND_NAME]
    original_init = cls.__init__
    original_del = getattr(cls, "__del__", None)

    def __init__(
        self: Any,
        project_name: str,
        experiment_name: str,
        default_backend: str | list[str] = "console",
        config: Any = None,
    ) -> None:
        original_init(self, project_name, experiment_name, default_backend, config)
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        if BACKEND_NAME in backends:
            chosen, directory, extra = cls._training_platform_options
            backend = VerlTrackingBackend(
                chosen or job_id_from_name(str(experiment_name)),
                directory,
                total_steps=_total_steps(config),
                **extra,
            )
            describe_verl_run(backend.platform, project_name, experiment_name, config)
            self.logger[BACKEND_NAME] = backend

    def __del__(self: Any) -> None:
        backend = getattr(self, "logger", {}).get(BACKEND_NAME)
        if backend is not None:
            backend.finish()
        if original_del is not None:
            original_del(self)

    cls.__init__ = __init__
    cls.__del__ = __del__


def describe_verl_run(
    platform: PlatformCallback, project_name: Any, experiment_name: Any, config: Any
) -> None:
    """The run file from what verl gives its trackers: project, experiment, config
    (an OmegaConf object, converted when the file is written)."""
    info = platform.run_info
    info.fill(config=config, framework={"name": "verl", "version": package_version("verl") or "?"})
    if info.project is None and project_name:
        info.project = str(project_name)
    if info.name is None and experiment_name:
        info.name = str(experiment_name)


def _total_steps(config: Any) -> int | None:
    try:
        value = config["trainer"]["total_training_steps"]
    except (KeyError, TypeError, IndexError):
        return None
    return value if isinstance(value, int) and value > 0 else None
