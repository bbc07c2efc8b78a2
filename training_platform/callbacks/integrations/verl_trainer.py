"""verl's trainer with the design documents' shape: ``trainer.add_callback(cb)``.

The tracking backend (`integrations.verl`) sees what verl logs; this module
attaches the hooks of `base.Callback` to a real ``RayPPOTrainer`` instead,
without editing verl's source::

    from training_platform.callbacks.integrations.verl_trainer import enable_callbacks
    enable_callbacks()                 # RayPPOTrainer gains add_callback / _trigger_callbacks
    trainer = RayPPOTrainer(...); trainer.init_workers()
    trainer.add_callback(PlatformCallback("run7"))
    trainer.fit()

(``add_callback(trainer, callback)`` does the same for one instance, with
the class left alone.) The first callback of a trainer replaces a few of its
methods *on the instance* with wrappers that fire the hooks:

==================  ==========================================================
hook                where it fires
==================  ==========================================================
on_train_begin      ``fit()`` starts (``total_steps=trainer.total_training_steps``)
on_step_begin       ``_get_gen_batch()`` of a training step (the first call a step
                    makes on the trainer; validation's calls are skipped)
on_rollout_end      ``async_rollout_manager.generate_sequences()`` returned
                    (training only): ``rollout/sequences``, ``rollout/seconds``
on_evaluate         ``_validate()`` returned its metrics
on_save             ``_save_checkpoint()`` returned: ``<default_local_dir>/global_step_N``
on_step_end         ``fit()``'s ``Tracking.log(metrics, step)`` of the open step: the
                    step's full metrics (verl's keys, mapped like the backend's)
on_log              any other ``Tracking.log`` (validation before training, step 0)
on_exception        ``fit()`` raised: the hooks see it, then it propagates
on_train_end        ``fit()`` returned, or after ``on_exception``
==================  ==========================================================

``fit()`` builds its ``Tracking`` from ``verl.utils.tracking`` at call time,
so for the duration of the wrapped ``fit()`` that name is a subclass whose
``log()`` also fires the step hooks, restored afterwards even on error. A
`StopTraining` from a hook leaves ``fit()`` early, as with the backend: the
hooks get ``on_exception(stop)`` and ``on_train_end()``, and ``fit()`` returns.
Do not also select ``trainer.logger=[platform]`` for the same job: each
would write its records.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from training_platform.callbacks.base import Callback, CallbackList, StopTraining
from training_platform.callbacks.integrations.verl import describe_verl_run
from training_platform.callbacks.platform_callback import PlatformCallback

logger = logging.getLogger(__name__)

# The instance attribute that holds a trainer's callbacks (and marks it wrapped).
HOOKS_ATTRIBUTE = "_training_platform_hooks"
HOOK_NAMES = frozenset(name for name in vars(Callback) if name.startswith("on_"))


class TrainerHooks:
    """One trainer's callbacks and the little state its wrapped methods share."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.callbacks = CallbackList()
        # The step whose on_step_begin fired and whose on_step_end has not:
        # verl's one Tracking.log for that step is its end, any other is a log.
        self.open_step: int | None = None
        # _validate() calls _get_gen_batch() and generate_sequences() too;
        # those calls are not a training step's.
        self.validating = False

    @property
    def step(self) -> int:
        return int(getattr(self.trainer, "global_steps", 0) or 0)

    def run_fit(self, fit: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = None
        try:
            self.callbacks.on_train_begin(_total_steps(self.trainer))
            with _step_end_from_tracking(self), _rollout_end_from_manager(self):
                result = fit(*args, **kwargs)
        except StopTraining as stop:
            # A stop requested by a hook ends fit() cleanly, as verl's own
            # last step would: the run is "stopped", not failed.
            self.callbacks.on_exception(stop)
            _shut_down_dump_executor(self.trainer)
        except BaseException as exc:
            self.callbacks.on_exception(exc)
            self.callbacks.on_train_end()
            raise
        finally:
            self.open_step = None
            self.validating = False
        self.callbacks.on_train_end()
        return result

    def begin_step(self) -> None:
        if self.validating:
            return
        self.open_step = self.step
        self.callbacks.on_step_begin(self.open_step)

    def logged(self, step: int, data: Mapping[str, Any]) -> None:
        if step == self.open_step:
            self.open_step = None
            self.callbacks.on_step_end(step, data)
        else:
            self.callbacks.on_log(step, data)


def add_callback(trainer: Any, callback: Callback) -> None:
    """Attach `callback` to one verl trainer (also ``trainer.add_callback`` after
    `enable_callbacks`). The first call wraps the trainer's methods; a
    `PlatformCallback` also gets the run's project, name and config."""
    hooks = vars(trainer).get(HOOKS_ATTRIBUTE)
    if hooks is None:
        hooks = TrainerHooks(trainer)
        _wrap_methods(trainer, hooks)
        setattr(trainer, HOOKS_ATTRIBUTE, hooks)
    hooks.callbacks.append(callback)
    if isinstance(callback, PlatformCallback):
        config = getattr(trainer, "config", None)
        describe_verl_run(
            callback,
            _config_value(config, "trainer", "project_name"),
            _config_value(config, "trainer", "experiment_name"),
            config,
        )


def trigger_callbacks(trainer: Any, hook: str, *args: Any, **kwargs: Any) -> None:
    """Fire `hook` (``"on_step_end"``, ...) on the trainer's callbacks, for code of
    your own (a subclass's loop) that wants a hook the wrappers do not fire."""
    if hook not in HOOK_NAMES:
        raise ValueError(f"unknown hook {hook!r}; one of {sorted(HOOK_NAMES)}")
    hooks = vars(trainer).get(HOOKS_ATTRIBUTE)
    if hooks is not None:
        getattr(hooks.callbacks, hook)(*args, **kwargs)


_CLASS_METHODS: dict[str, Callable[..., None]] = {
    "add_callback": add_callback,
    "_trigger_callbacks": trigger_callbacks,
}


def enable_callbacks(cls: Any = None) -> Any:
    """Give a verl trainer class (default ``RayPPOTrainer``) ``add_callback`` and
    ``_trigger_callbacks`` (idempotent; `disable_callbacks` takes them back).
    Refuses to replace methods of the same names that verl itself defines."""
    cls = _trainer_class(cls)
    for name, method in _CLASS_METHODS.items():
        current = vars(cls).get(name)
        if current is None:
            setattr(cls, name, method)
        elif current is not method:
            raise TypeError(f"{cls.__name__}.{name} exists already; not replacing it")
    return cls


def disable_callbacks(cls: Any = None) -> None:
    """Undo `enable_callbacks` (trainers already wrapped keep their callbacks)."""
    cls = _trainer_class(cls)
    for name, method in _CLASS_METHODS.items():
        if vars(cls).get(name) is method:
            delattr(cls, name)


def _trainer_class(cls: Any) -> Any:
    if cls is None:
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        return RayPPOTrainer
    return cls


def _wrap_methods(trainer: Any, hooks: TrainerHooks) -> None:
    """Instance attributes that shadow the class's methods: verl's source and
    every other trainer stay as they are."""

    def wrap(name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = getattr(trainer, name)
        setattr(trainer, name, functools.wraps(original)(make(original)))

    def fit(original: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args, **kwargs: hooks.run_fit(original, *args, **kwargs)

    def get_gen_batch(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks.begin_step()
            return original(*args, **kwargs)

        return wrapper

    def validate(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks.validating = True
            try:
                metrics = original(*args, **kwargs)
            finally:
                hooks.validating = False
            # merged=True returns raw per-sample lists for a later merge, not metrics.
            merged = kwargs.get("merged", args[0] if args else False)
            if isinstance(metrics, Mapping) and not merged:
                hooks.callbacks.on_evaluate(hooks.step, metrics)
            return metrics

        return wrapper

    def save_checkpoint(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            step = hooks.step
            root = _config_value(getattr(trainer, "config", None), "trainer", "default_local_dir")
            path = os.path.join(str(root), f"global_step_{step}") if root is not None else None
            hooks.callbacks.on_save(step, path)
            return result

        return wrapper

    wrap("fit", fit)
    wrap("_get_gen_batch", get_gen_batch)
    wrap("_validate", validate)
    wrap("_save_checkpoint", save_checkpoint)


@contextmanager
def _step_end_from_tracking(hooks: TrainerHooks) -> Iterator[None]:
    """While fit() runs, ``verl.utils.tracking.Tracking`` is a subclass whose
    ``log()`` (after verl's own backends) fires on_step_end / on_log: fit()
    imports the name when it starts, and that one call carries the step's
    complete metrics, which no method of the trainer returns."""
    from verl.utils import tracking

    tracking_module: Any = tracking  # rebound for a while: its own types do not allow it
    original = tracking_module.Tracking

    class StepHookTracking(original):  # type: ignore[misc, valid-type]
        def log(self, data: Any, step: Any, backend: Any = None) -> None:
            super().log(data=data, step=step, backend=backend)
            hooks.logged(int(step), data)

    tracking_module.Tracking = StepHookTracking
    try:
        yield
    finally:
        tracking_module.Tracking = original


@contextmanager
def _rollout_end_from_manager(hooks: TrainerHooks) -> Iterator[None]:
    """Wrap the rollout manager's ``generate_sequences`` for the duration of fit():
    ``init_workers()`` creates the manager, so it may not exist at attach time."""
    manager = getattr(hooks.trainer, "async_rollout_manager", None)
    original = getattr(manager, "generate_sequences", None)
    if manager is None or original is None:
        yield
        return
    own = "generate_sequences" in getattr(manager, "__dict__", {})

    def generate_sequences(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        output = original(*args, **kwargs)
        if not hooks.validating:
            metrics: dict[str, Any] = {"rollout/seconds": time.perf_counter() - started}
            with suppress(TypeError):  # a manager of another verl version may return no batch
                metrics["rollout/sequences"] = len(output)
            hooks.callbacks.on_rollout_end(hooks.step, metrics)
        return output

    try:
        manager.generate_sequences = generate_sequences
    except (AttributeError, TypeError):  # a manager with __slots__ or a frozen proxy
        logger.warning("cannot wrap %s.generate_sequences: no on_rollout_end", type(manager))
        yield
        return
    try:
        yield
    finally:
        if own:
            manager.generate_sequences = original
        else:
            del manager.generate_sequences


def _shut_down_dump_executor(trainer: Any) -> None:
    # verl drains its generation-dump thread on its last step; a stop skips that.
    shutdown = getattr(trainer, "_shutdown_dump_executor", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception:
            logger.exception("verl's dump executor did not shut down cleanly")


def _total_steps(trainer: Any) -> int | None:
    value = getattr(trainer, "total_training_steps", None)
    return value if isinstance(value, int) and value > 0 else None


def _config_value(config: Any, *keys: str) -> Any:
    try:
        for key in keys:
            config = config[key]
    except (KeyError, TypeError, IndexError, AttributeError):
        return None
    return config
