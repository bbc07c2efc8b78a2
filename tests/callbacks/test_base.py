from __future__ import annotations

from typing import Any

import pytest

from training_platform.callbacks import Callback, CallbackList, StopTraining
from training_platform.callbacks.base import Metrics

HOOKS = [
    ("on_train_begin", (100,)),
    ("on_epoch_begin", (0,)),
    ("on_step_begin", (1,)),
    ("on_rollout_end", (1, {"reward": 0.5})),
    ("on_log", (1, {"loss": 1.0})),
    ("on_step_end", (1, {"loss": 1.0})),
    ("on_evaluate", (1, {"eval_loss": 1.2})),
    ("on_save", (1, "/ckpt/1")),
    ("on_epoch_end", (0,)),
    ("on_exception", (RuntimeError("x"),)),
    ("on_train_end", ()),
]


class Recorder(Callback):
    def __init__(self, name: str, calls: list[tuple[str, str, tuple[Any, ...]]]) -> None:
        self.name = name
        self.calls = calls

    def __getattribute__(self, attr: str) -> Any:
        if attr.startswith("on_"):
            return lambda *args: self.calls.append((self.name, attr, args))
        return super().__getattribute__(attr)


class Failing(Callback):
    def __getattribute__(self, attr: str) -> Any:
        if attr.startswith("on_"):

            def fail(*args: Any) -> None:
                raise ValueError(f"{attr} is broken")

            return fail
        return super().__getattribute__(attr)


def test_every_hook_reaches_every_callback_in_order() -> None:
    calls: list[tuple[str, str, tuple[Any, ...]]] = []
    hooks = CallbackList([Recorder("a", calls), Recorder("b", calls)])
    for name, args in HOOKS:
        getattr(hooks, name)(*args)
    expected = [(who, name, args) for name, args in HOOKS for who in ("a", "b")]
    assert calls == expected


def test_the_base_callback_accepts_every_hook_and_does_nothing() -> None:
    callback = Callback()
    for name, args in HOOKS:
        assert getattr(callback, name)(*args) is None


def test_a_failing_callback_never_breaks_the_loop_and_is_logged_once_per_hook(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[tuple[str, str, tuple[Any, ...]]] = []
    hooks = CallbackList([Failing(), Recorder("ok", calls)])
    for step in range(50):
        hooks.on_step_begin(step)
        hooks.on_step_end(step, {"loss": 1.0})
    assert len(calls) == 100  # the healthy callback saw every hook
    assert hooks.failures == 100
    assert caplog.text.count("on_step_end is broken") == 1
    assert caplog.text.count("on_step_begin is broken") == 1


def test_stop_training_passes_through_after_all_callbacks_saw_the_hook() -> None:
    calls: list[tuple[str, str, tuple[Any, ...]]] = []

    class Stopper(Callback):
        def on_step_end(self, step: int, metrics: Metrics | None = None) -> None:
            raise StopTraining("enough", [{"type": "kl_explosion", "severity": "critical"}])

    hooks = CallbackList([Stopper(), Recorder("after", calls)])
    with pytest.raises(StopTraining) as stopped:
        hooks.on_step_end(3, {"loss": 1.0})
    assert calls == [("after", "on_step_end", (3, {"loss": 1.0}))]
    assert stopped.value.reason == "enough"
    assert stopped.value.anomalies[0]["type"] == "kl_explosion"


def test_a_stop_raised_while_finishing_is_ignored() -> None:
    class StopsAtTheEnd(Callback):
        def on_train_end(self) -> None:
            raise StopTraining("too late")

        def on_exception(self, exc: BaseException) -> None:
            raise StopTraining("too late")

    hooks = CallbackList([StopsAtTheEnd()])
    hooks.on_exception(RuntimeError("boom"))
    hooks.on_train_end()


def test_keyboard_interrupt_is_not_swallowed() -> None:
    class Interrupted(Callback):
        def on_step_begin(self, step: int) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        CallbackList([Interrupted()]).on_step_begin(0)


def test_callbacks_can_be_appended_and_iterated() -> None:
    first, second = Callback(), Callback()
    hooks = CallbackList([first])
    hooks.append(second)
    assert list(hooks) == [first, second]
    assert len(hooks) == 2
