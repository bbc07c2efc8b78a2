"""TRL GRPO: every generation batch's prompts, completions and per-function rewards, as samples.

    from training_platform.callbacks.integrations.hf import PlatformTrainerCallback
    from training_platform.callbacks.integrations.trl import record_samples

    callback = PlatformTrainerCallback("run7")
    reward_funcs = record_samples(callback, reward_funcs)  # the one added line
    trainer = GRPOTrainer(..., reward_funcs=reward_funcs, callbacks=[callback])

`record_samples` wraps each reward function. TRL calls them one after the
other on the same batch (``prompts``, ``completions``, ``completion_ids``, the
dataset's other columns, ``trainer_state``, ...); when the last one has
returned, the batch goes to `PlatformCallback.log_samples` once, one sample
per completion: the prompt and completion as text, each function's reward as
a component, their weighted sum as TRL computes its ``reward``, the group
(the prompt's place in the batch) and the completion's length and finish
reason. What a reward function returns is handed back untouched (the same
object). Details and limits: docs/trainer.md, "TRL GRPO: samples".

Nothing here imports TRL or torch: a reward function is wrapped by a plain
callable, and the trainer is found through the bound methods TRL passes to
reward functions (``log_metric``, TRL >= 1.0).
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from training_platform.callbacks.base import report_failure
from training_platform.callbacks.wire.samples import MAX_REWARD_COMPONENTS, REWARD_NAME_CHARS

RewardFunc = Any
"""What GRPOTrainer accepts as a reward function: a callable, a model id, a model."""


def record_samples(callback: Any, reward_funcs: RewardFunc | Sequence[RewardFunc]) -> list[Any]:
    """Wrap TRL reward functions so that each generation batch is logged as samples.

    Args:
        callback: a `PlatformTrainerCallback` (its ``platform`` is used), a
            `PlatformCallback`, or `platform_run`'s run.
        reward_funcs: what you pass to ``GRPOTrainer(reward_funcs=...)``: one
            reward function or a list. Model ids and reward models are returned
            as they are (TRL scores those itself; they are not recorded).

    Returns:
        A new list for ``GRPOTrainer(reward_funcs=...)``, in the same order.
        Each wrapper keeps the function's name (TRL's ``rewards/<name>/...``
        metrics are unchanged), is async when the function is, and returns
        exactly what the function returned.
    """
    platform = getattr(callback, "platform", callback)
    if not callable(getattr(platform, "log_samples", None)):
        raise TypeError(
            "record_samples needs a PlatformTrainerCallback, a PlatformCallback or a "
            f"platform_run run, got {type(callback).__name__}"
        )
    if reward_funcs is None:
        return []
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    return SampleRecorder(platform).wrap(funcs)


class _Recorded:
    """What the reward-function wrappers share: the function, its name and its recorder."""

    def __init__(self, recorder: SampleRecorder, index: int, func: Callable[..., Any], key: str):
        self.func = func
        self.key = key  # its reward component's name (unique among the recorder's functions)
        self._recorder = recorder
        self._index = index
        name = _callable_name(func)
        # TRL names the function (and its metrics) by ``__name__``: the original one.
        self.__name__ = name
        self.__qualname__ = getattr(func, "__qualname__", name)
        self.__doc__ = getattr(func, "__doc__", None)
        self.__wrapped__ = func  # inspect.signature() sees the function's parameters

    def __repr__(self) -> str:
        return f"<recorded reward {self.func!r}>"


class RecordedReward(_Recorded):
    """A synchronous reward function whose batches are logged as samples."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self.func(*args, **kwargs)
        self._recorder.record(self, args, kwargs, values)
        return values


class AsyncRecordedReward(_Recorded):
    """An async reward function (TRL awaits it on its event-loop thread)."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = await self.func(*args, **kwargs)
        self._recorder.record(self, args, kwargs, values)
        return values


class _Batch:
    """One call of the trainer's reward step: the same `completions` list for every function."""

    __slots__ = ("args", "completions", "kwargs", "values")

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any], completions: Any) -> None:
        self.args = args
        self.kwargs = kwargs
        self.completions = completions  # kept: its identity tells this batch from the next
        self.values: dict[int, list[float | None] | None] = {}


class SampleRecorder:
    """Collects one batch's rewards from every wrapped function, then logs the batch once.

    The functions of one batch are recognised by the ``completions`` list TRL
    passes to each (the same object). Synchronous functions run on the training
    thread; async ones on TRL's event-loop thread while the training thread
    waits for them, so a lock is all the ordering needed.
    """

    def __init__(self, platform: Any) -> None:
        self._platform = platform
        self._lock = threading.Lock()
        self._wrappers: list[_Recorded] = []
        self._pending: _Batch | None = None
        self._groups_at: tuple[int, int] = (-1, 0)  # (step, next free group number)
        self._batches = 0
        self._reported: set[tuple[int, str]] = set()

    def wrap(self, funcs: list[Any]) -> list[Any]:
        out: list[Any] = []
        used: set[str] = set()
        for func in funcs:
            if isinstance(func, _Recorded):
                func = func.func  # wrapped again: record once, here
            if isinstance(func, str) or _is_module(func) or not callable(func):
                out.append(func)  # a reward model (or its id): TRL scores it, not recorded
                continue
            key = _unique(_callable_name(func)[:REWARD_NAME_CHARS] or "reward", used)
            kind = AsyncRecordedReward if _is_async(func) else RecordedReward
            wrapper = kind(self, len(self._wrappers), func, key)
            self._wrappers.append(wrapper)
            out.append(wrapper)
        return out

    def record(
        self, wrapper: _Recorded, args: tuple[Any, ...], kwargs: dict[str, Any], values: Any
    ) -> None:
        """Called by a wrapper after its function returned; never raises."""
        try:
            self._record(wrapper, args, kwargs, values)
        except Exception:
            report_failure(self._reported, self, "record_samples")

    # -- internals ---------------------------------------------------------

    def _record(
        self, wrapper: _Recorded, args: tuple[Any, ...], kwargs: dict[str, Any], values: Any
    ) -> None:
        if not getattr(self._platform, "enabled", True):
            return  # not the main process (or disabled): nothing is written here anyway
        state = kwargs.get("trainer_state")
        if state is not None and not getattr(state, "is_world_process_zero", True):
            return
        trainer = _find_trainer(kwargs)
        if trainer is not None and not getattr(getattr(trainer, "model", None), "training", True):
            return  # an evaluation batch: only training batches are recorded
        completions = kwargs["completions"] if "completions" in kwargs else args[1]
        snapshot = _snapshot(values, len(completions))
        with self._lock:
            batch = self._pending
            # Another batch, or a function called twice: start anew (an unfinished one is dropped).
            if (
                batch is None
                or batch.completions is not completions
                or wrapper._index in batch.values
            ):
                batch = self._pending = _Batch(args, kwargs, completions)
            batch.values[wrapper._index] = snapshot
            ours, weights = self._layout(trainer)
            if not ours or any(w._index not in batch.values for w in ours):
                return  # more reward functions of this batch to come
            self._pending = None
            self._log(batch, ours, weights, trainer)

    def _layout(self, trainer: Any) -> tuple[list[_Recorded], list[float] | None]:
        """The wrappers a batch is complete with, in the trainer's order, and
        their weights (None when the trainer has reward functions we do not see)."""
        if trainer is None:
            return self._wrappers, [1.0] * len(self._wrappers)
        funcs = list(trainer.reward_funcs)
        ours = [f for f in funcs if isinstance(f, _Recorded) and f._recorder is self]
        weights = trainer.reward_weights
        weights = list(weights.tolist() if hasattr(weights, "tolist") else weights)
        if len(ours) != len(funcs) or len(weights) != len(funcs):
            return ours, None
        return ours, [float(w) for w in weights]

    def _log(
        self, batch: _Batch, ours: list[_Recorded], weights: list[float] | None, trainer: Any
    ) -> None:
        kwargs, args = batch.kwargs, batch.args
        prompts = kwargs["prompts"] if "prompts" in kwargs else args[0]
        n = len(batch.completions)
        prompt_texts = [_text(prompt) for prompt in prompts]
        completion_texts = [_text(completion) for completion in batch.completions]
        columns = [batch.values[w._index] for w in ours]
        components = {
            w.key: [None] * n if column is None else column
            for w, column in zip(ours[:MAX_REWARD_COMPONENTS], columns, strict=False)
        }
        rewards = None
        if weights is not None and all(column is not None for column in columns):
            rewards = _weighted_sums(columns, weights, n)  # type: ignore[arg-type]
        state = kwargs.get("trainer_state") or getattr(trainer, "state", None)
        step = self._step(state)
        ids = kwargs.get("completion_ids")
        if not isinstance(ids, Sequence) or len(ids) != n:
            ids = None
        self._platform.log_samples(
            step,
            prompt_texts,
            completion_texts,
            rewards=rewards,
            reward_components=components,
            groups=self._groups(step, prompt_texts, trainer),
            response_lengths=None if ids is None else [len(row) for row in ids],
            finish_reasons=None if ids is None else _finish_reasons(trainer, ids),
        )

    def _step(self, state: Any) -> int:
        """The step this batch trains: ``global_step + 1`` (the number the HF
        adapter's on_step_begin gives it); else the callback's current step;
        else the batch's ordinal (1, 2, ...)."""
        self._batches += 1
        global_step = getattr(state, "global_step", None)
        if isinstance(global_step, int) and not isinstance(global_step, bool):
            return global_step + 1
        steps = getattr(self._platform, "_steps", None)  # PlatformCallback's StepBuffer
        current = getattr(steps, "open", None) or getattr(steps, "last", None)
        step = getattr(current, "step", None)
        return step if isinstance(step, int) else self._batches

    def _groups(self, step: int, prompts: list[str], trainer: Any) -> list[str]:
        """The prompt's number within the step: GRPO repeats each prompt
        ``num_generations`` times in a row; without the trainer, a run of equal
        prompts is one group. Numbering goes on across batches of one step."""
        size = getattr(trainer, "num_generations", None)
        local: list[int] = []
        if isinstance(size, int) and size > 0:
            local = [i // size for i in range(len(prompts))]
        else:
            number = -1
            for i, prompt in enumerate(prompts):
                if i == 0 or prompt != prompts[i - 1]:
                    number += 1
                local.append(number)
        last_step, free = self._groups_at
        base = free if last_step == step else 0
        self._groups_at = (step, base + (local[-1] + 1 if local else 0))
        return [str(base + number) for number in local]


def _find_trainer(kwargs: Mapping[str, Any]) -> Any:
    """The GRPOTrainer behind this call: TRL passes its bound methods."""
    for name in ("log_metric", "log_extra"):
        owner = getattr(kwargs.get(name), "__self__", None)
        if hasattr(owner, "reward_funcs") and hasattr(owner, "reward_weights"):
            return owner
    return None


def _snapshot(values: Any, n: int) -> list[float | None] | None:
    """The rewards as floats (None kept), or None if they cannot be read without
    consuming them (an iterator) or do not have one per completion."""
    if isinstance(values, (list, tuple)):
        items = list(values)
    elif callable(getattr(values, "tolist", None)):  # numpy array, tensor
        items = values.tolist()
    else:
        return None
    if not isinstance(items, list) or len(items) != n:
        return None
    return [_reward(value) for value in items]


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _weighted_sums(columns: list[list[float | None]], weights: list[float], n: int) -> list[Any]:
    """TRL's ``reward``: the weighted sum over the functions, a None (NaN for
    TRL) skipped; None where no function scored the completion."""
    sums: list[float | None] = []
    for i in range(n):
        total, scored = 0.0, False
        for column, weight in zip(columns, weights, strict=True):
            value = column[i]
            if value is not None and not math.isnan(value):
                total += weight * value
                scored = True
        sums.append(total if scored else None)
    return sums


def _finish_reasons(trainer: Any, ids: Sequence[Any]) -> list[str | None] | None:
    """TRL's own test: a completion not ending in an EOS or pad token was cut at
    ``max_completion_length``."""
    if trainer is None:
        return None
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
    eos = getattr(trainer, "eos_token_ids", None) or [getattr(trainer, "eos_token_id", None)]
    tokens = [*eos, *(getattr(tokenizer, name, None) for name in ("eos_token_id", "pad_token_id"))]
    stops = {token for token in tokens if isinstance(token, int)}
    if not stops:
        return None
    reasons: list[str | None] = []
    for row in ids:
        last = row[-1] if len(row) else None
        reasons.append(None if last is None else "stop" if int(last) in stops else "length")
    return reasons


def _text(value: Any) -> str:
    """A prompt or completion as text. Conversational ones are lists of
    messages: one message gives its content; several give ``role: content``
    blocks separated by blank lines (a system prompt, tool turns)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(m, Mapping) for m in value):
        if len(value) == 1:
            return _message_text(value[0])
        return "\n\n".join(f"{m.get('role', '?')}: {_message_text(m)}" for m in value)
    return str(value)


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, (list, tuple)):  # content blocks: text, images, ...
        parts = []
        for block in content:
            if isinstance(block, Mapping):
                part = block.get("text")
                parts.append(part if isinstance(part, str) else f"<{block.get('type', 'part')}>")
            else:
                parts.append(str(block))
        text = "\n".join(parts)
    else:
        text = str(content)
    calls = message.get("tool_calls")
    if calls:
        text += ("\n" if text else "") + "tool_calls: " + json.dumps(calls, default=str)
    return text


def _callable_name(func: Any) -> str:
    """TRL's name for a reward function (``get_callable_name``)."""
    while isinstance(func, functools.partial):
        func = func.func
    return str(getattr(func, "__name__", type(func).__name__))


def _is_async(func: Any) -> bool:
    """TRL's test (``is_async_callable``): an async function, or an instance
    whose ``__call__`` is async."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004  # the method itself, as TRL inspects it
    )


def _is_module(func: Any) -> bool:
    torch = sys.modules.get("torch")  # a torch module exists only if torch was imported
    return torch is not None and isinstance(func, torch.nn.Module)


def _unique(name: str, used: set[str]) -> str:
    key, number = name, 1
    while key in used:
        number += 1
        suffix = f"_{number}"
        key = name[: REWARD_NAME_CHARS - len(suffix)] + suffix
    used.add(key)
    return key
