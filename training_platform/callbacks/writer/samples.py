"""Generated samples: `PlatformCallback.log_samples` columns in, `{job_id}_samples.jsonl` lines out.

Two halves, one per thread:

- `SampleLog.command` runs on the training thread, at the call: it checks the
  columns (equal lengths, text where text is due: a mistake raises there, as
  the programming error it is), turns tensors and arrays into lists (one
  ``tolist()`` each; a CUDA tensor is copied to the host once), applies the
  per-step cap and numbers the samples. Nothing is built or encoded there.
- `sample_lines` runs on the writer (the metrics' background thread, or
  inline): one `wire_samples.build_sample` + `wire_lines.encode_record` per
  sample, values made what the platform's `decode_sample_line` accepts. A
  sample that still cannot be written is skipped and logged once.

**Cap.** At most `max_per_step` samples per step, over every call for that
step. When `groups` are given, whole groups are kept, the first ones (in
order of first appearance) that fit; otherwise the first samples. The
dropped count goes to a debug log line.

**Index.** A sample's index is its position among the step's kept samples:
0..n-1 for the first call, continued by later calls for the same step (the
last `_TRACKED_STEPS` steps are remembered).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from training_platform.callbacks.base import report_failure
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import (
    FINISH_REASON_CHARS,
    GROUP_CHARS,
    MAX_INDEX,
    MAX_REWARD_COMPONENTS,
    REWARD_NAME_CHARS,
    build_sample,
)
from training_platform.callbacks.wire.schema import to_scalar
from training_platform.errors import RecordError

logger = logging.getLogger(__name__)

DEFAULT_MAX_PER_STEP: Final = 256
# The platform skips longer lines (PLATFORM_MAX_LINE_BYTES, 1 MiB by default):
# a sample's texts are cut to fit rather than lose the whole sample there.
MAX_LINE_BYTES: Final = 1 << 20
_TRACKED_STEPS: Final = 16  # steps whose sample count is kept, for index continuation

Column = Any
"""One value per sample: a list, a tuple, a numpy array or a torch tensor."""


class SampleColumns(NamedTuple):
    """The kept samples of one call, as plain lists (what the writer receives)."""

    prompts: list[Any]
    completions: list[Any]
    rewards: list[Any] | None
    components: dict[str, list[Any]] | list[Any] | None
    """name -> values, or one mapping per sample."""
    groups: list[Any] | None
    response_lengths: list[Any] | None
    finish_reasons: list[Any] | None
    extra: list[Any] | None


def _size(name: str, value: Any) -> int:
    if isinstance(value, (str, bytes, Mapping)):
        raise TypeError(
            f"log_samples: {name} must be a sequence with one item per sample, "
            f"got {type(value).__name__}"
        )
    try:
        return len(value)
    except TypeError:
        raise TypeError(
            f"log_samples: {name} must be a sequence with one item per sample (a list, "
            f"tuple, array or 1-d tensor), got {type(value).__name__}"
        ) from None


def _as_list(value: Any) -> list[Any]:
    """A list of plain values: one ``tolist()`` for a tensor or an array."""
    if type(value) is list:
        return value[:]  # the caller may reuse its list
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        # numpy and torch: one call, plain Python values. A tensor on a GPU is
        # copied to the host once inside it; one that requires grad needs no detach.
        return tolist()  # type: ignore[no-any-return]
    return list(value)


def _check_text(name: str, values: list[Any]) -> None:
    if set(map(type, values)) <= {str}:
        return
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(
                f"log_samples: {name}[{position}] must be a string, got {type(value).__name__}"
            )


def _mappings(name: str, values: list[Any]) -> list[dict[Any, Any] | None]:
    """Shallow copies (the trainer may reuse its dicts), or None; anything else raises."""
    copies: list[dict[Any, Any] | None] = []
    for position, value in enumerate(values):
        if value is None:
            copies.append(None)
        elif isinstance(value, Mapping):
            copies.append(dict(value))
        else:
            raise TypeError(
                f"log_samples: {name}[{position}] must be a mapping or None, "
                f"got {type(value).__name__}"
            )
    return copies


def _check_component_names(names: list[Any]) -> None:
    if len(names) > MAX_REWARD_COMPONENTS:
        raise ValueError(
            f"log_samples: at most {MAX_REWARD_COMPONENTS} reward components, got {len(names)}"
        )
    for name in names:
        if not isinstance(name, str) or not 0 < len(name) <= REWARD_NAME_CHARS:
            raise ValueError(
                "log_samples: reward component names must be strings of 1 to "
                f"{REWARD_NAME_CHARS} characters, got {name!r}"
            )


class SampleLog:
    """The training thread's half of `log_samples` (one per callback)."""

    def __init__(self, max_per_step: int = DEFAULT_MAX_PER_STEP) -> None:
        if max_per_step < 0:
            raise ValueError(f"max_samples_per_step must be >= 0, got {max_per_step}")
        self.max_per_step = max_per_step
        self._counts: dict[int, int] = {}  # kept samples per recent step
        self._warned_group_too_big = False

    def command(
        self,
        step: int,
        prompts: Column,
        completions: Column,
        rewards: Column | None,
        reward_components: Mapping[str, Column] | Column | None,
        groups: Column | None,
        response_lengths: Column | None,
        finish_reasons: Column | None,
        extra: Column | None,
        *,
        enabled: bool,
    ) -> tuple[int, int, SampleColumns] | None:
        """``(step, first_index, columns)`` for the writer, or None if nothing is kept.

        Raises `ValueError` for columns of unequal length on every rank (so the
        mistake shows wherever the code runs); `TypeError` for texts that are
        not strings (checked where the samples are written).
        """
        if isinstance(step, bool) or not isinstance(step, int):
            step = _index(step)
        if step < 0:
            raise ValueError(f"log_samples: step must be >= 0, got {step}")
        n = _size("prompts", prompts)
        columns = {
            "completions": completions,
            "rewards": rewards,
            "groups": groups,
            "response_lengths": response_lengths,
            "finish_reasons": finish_reasons,
            "extra": extra,
        }
        if isinstance(reward_components, Mapping):
            for name, values in reward_components.items():
                columns[f"reward_components[{name!r}]"] = values
        else:
            columns["reward_components"] = reward_components
        for name, value in columns.items():
            if value is not None and (size := _size(name, value)) != n:
                raise ValueError(
                    f"log_samples: {name} has {size} items but prompts has {n}: "
                    "every column needs one item per sample"
                )
        if not enabled or n == 0:
            return None

        prompt_list, completion_list = _as_list(prompts), _as_list(completions)
        _check_text("prompts", prompt_list)
        _check_text("completions", completion_list)
        components: dict[str, list[Any]] | list[Any] | None = None
        if isinstance(reward_components, Mapping):
            _check_component_names(list(reward_components))
            components = {name: _as_list(values) for name, values in reward_components.items()}
        elif reward_components is not None:
            components = _as_list(reward_components)
        group_list = None if groups is None else _as_list(groups)

        first = self._counts.get(step, 0)
        keep = self._keep(step, n, self.max_per_step - first, group_list)
        if keep is not None and not keep:
            return None

        def kept(values: list[Any] | None) -> list[Any] | None:
            if values is None or keep is None:
                return values
            return [values[i] for i in keep]

        def kept_mappings(name: str, values: Column | None) -> list[Any] | None:
            # Copied after the cap: a dict the trainer reuses is snapshotted now.
            return None if values is None else _mappings(name, kept(_as_list(values)) or [])

        if isinstance(components, dict):
            components = {name: kept(values) or [] for name, values in components.items()}
        else:
            components = kept_mappings("reward_components", components)
        out = SampleColumns(
            prompts=kept(prompt_list) or [],
            completions=kept(completion_list) or [],
            rewards=kept(None if rewards is None else _as_list(rewards)),
            components=components,
            groups=kept(group_list),
            response_lengths=kept(None if response_lengths is None else _as_list(response_lengths)),
            finish_reasons=kept(None if finish_reasons is None else _as_list(finish_reasons)),
            extra=kept_mappings("extra", extra),
        )
        # Counted once nothing can raise any more: a refused call takes no index.
        self._remember(step, first + len(out.prompts))
        return step, first, out

    def _keep(self, step: int, n: int, room: int, groups: list[Any] | None) -> list[int] | None:
        """Positions to keep (None: all of them)."""
        if n <= room:
            return None
        keep: list[int]
        if room <= 0:
            keep = []
        elif groups is None:
            keep = list(range(room))
        else:
            sizes: dict[Any, int] = {}  # in order of first appearance
            for group in groups:
                sizes[group] = sizes.get(group, 0) + 1
            chosen, total = set(), 0
            for group, size in sizes.items():
                if total + size > room:
                    break
                chosen.add(group)
                total += size
            keep = [i for i, group in enumerate(groups) if group in chosen]
            if not chosen and not self._warned_group_too_big:
                self._warned_group_too_big = True
                logger.warning(
                    "log_samples: a group of %d samples does not fit max_samples_per_step=%d "
                    "(%d left at step %d): whole groups only, so no sample of such a step is "
                    "kept; raise the cap (logged once)",
                    next(iter(sizes.values())),
                    self.max_per_step,
                    room,
                    step,
                )
        logger.debug(
            "log_samples: step %d: kept %d of %d samples, %d dropped (max_samples_per_step=%d)",
            step,
            len(keep),
            n,
            n - len(keep),
            self.max_per_step,
        )
        return keep

    def _remember(self, step: int, count: int) -> None:
        counts = self._counts
        counts[step] = count
        if len(counts) > _TRACKED_STEPS:
            del counts[next(iter(counts))]


def _index(value: Any) -> int:
    value = to_scalar(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"log_samples: step must be an integer, got {type(value).__name__}")
    return value


# -- the writer's half -----------------------------------------------------


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if type(value) is float:
        return float(value)
    value = to_scalar(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"a reward must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _length(value: Any) -> int | None:
    if value is None:
        return None
    value = to_scalar(value)
    if type(value) is float and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INDEX:
        raise RecordError(f"a response length must be an integer >= 0, got {value!r}")
    return value


def _short_text(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(to_scalar(value))
    return text[:limit]


def _row_rewards(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RecordError(f"reward components must be a mapping, got {type(value).__name__}")
    _check_component_names(list(value))
    return {name: _number(number) for name, number in value.items()}


def sample_lines(
    step: int,
    first: int,
    timestamp: float | None,
    columns: SampleColumns,
    reported: set[tuple[int, str]],
    owner: object,
) -> list[bytes]:
    """One encoded line per sample; a sample that cannot be written is skipped,
    and logged once per `owner` (`report_failure`)."""
    count = len(columns.prompts)
    rewards, groups = columns.rewards, columns.groups
    lengths, finishes, extras = columns.response_lengths, columns.finish_reasons, columns.extra
    components = columns.components
    named = components if isinstance(components, dict) else None
    rows = components if isinstance(components, list) else None
    lines: list[bytes] = []
    for i in range(count):
        try:
            reward_map: dict[str, Any] | None
            if named is not None:
                reward_map = {name: _number(values[i]) for name, values in named.items()}
            else:
                reward_map = None if rows is None else _row_rewards(rows[i])
            sample = build_sample(
                step,
                first + i,
                columns.prompts[i],
                columns.completions[i],
                reward=None if rewards is None else _number(rewards[i]),
                rewards=reward_map,
                group=None if groups is None else _short_text(groups[i], GROUP_CHARS),
                response_length=None if lengths is None else _length(lengths[i]),
                finish_reason=None
                if finishes is None
                else _short_text(finishes[i], FINISH_REASON_CHARS),
                extra=None if extras is None else _extra(extras[i]),
                timestamp=timestamp,
            )
            line = encode_record(sample)
            lines.append(line if len(line) <= MAX_LINE_BYTES else _shortened(sample))
        except Exception:
            report_failure(reported, owner, "sample")
    return lines


def _extra(value: Any) -> Mapping[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return value
    raise RecordError(f"a sample's extra must be a mapping, got {type(value).__name__}")


def _shortened(sample: dict[str, Any]) -> bytes:
    """The line of a sample over `MAX_LINE_BYTES`, its longest texts cut (their
    heads kept) until it fits; ``extra["truncated"]`` gives their full lengths
    in characters. Raises `RecordError` if even empty texts leave it too long."""
    full = {key: len(sample[key]) for key in ("prompt", "completion")}
    extra = dict(sample.get("extra") or {})
    while True:
        line = encode_record(sample)
        excess = len(line) - MAX_LINE_BYTES
        if excess <= 0:
            return line
        key = max(full, key=lambda name: len(sample[name]))
        text = sample[key]
        if not text:
            raise RecordError(f"a sample's line is over {MAX_LINE_BYTES} bytes without its texts")
        # A character is at least one byte: cutting `excess` of them is enough,
        # unless the mark below adds a few (then the next pass takes those).
        sample[key] = text[: max(0, min(len(text) - excess, len(text) * 3 // 4))]
        extra["truncated"] = {name: full[name] for name in full if len(sample[name]) < full[name]}
        sample["extra"] = extra
