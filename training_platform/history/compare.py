"""Several runs on one chart (`GET /api/compare`) and the config keys they differ in.

Each run's answer is exactly its `/metrics?max_points=` answer
(`series.answer.downsampled_history`: plan -> read -> merge -> shape, min/max
per bucket, so a spike in one run stays visible next to the others), plus
each point's x on the chosen axis and, when asked, a smoothed line per series
(`smoothing.py`), both read through the same stages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import orjson
from sqlalchemy.orm import Session

from training_platform.history.compare_system import compare_system, system_series_of
from training_platform.history.series.answer import downsampled_history
from training_platform.history.series.buckets import finite_time, series_values
from training_platform.history.series.plan import count_up_to, first_step, first_timestamp
from training_platform.history.series.stored.rows import raw_rows
from training_platform.history.smoothing import ExactSmoother, Smoothing, smooth_buckets

XAxis = Literal["step", "time", "tokens"]
MAX_COMPARED: Final = 20
# Token counts, best first: TRL's running total, then verl's per-step count.
TOKEN_SERIES: Final = (("extra.num_tokens", True), ("extra.perf/total_num_tokens", False))
_WARM_UP_POINTS: Final = 2_000  # buckets of the run before a range, to start its smoothing


def compare_histories(
    session: Session,
    job_ids: Sequence[str],
    *,
    fields: frozenset[str] | None,
    max_points: int,
    start_step: int | None,
    end_step: int | None,
    x: XAxis,
    smoothing: Smoothing | None,
    exact_rows: int,
    max_bytes: int | None,
    max_series: int | None,
    system: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Per job, in `job_ids` order: its columnar answer with `x_values` (and smoothed lines),
    `system_series` (the run-level system series it has) and, for the `system` series
    asked, `system`: those series on their own points (`compare_system.py`).

    The byte cap is shared: each run gets an equal part of it.
    """
    share = None if max_bytes is None else max_bytes // max(1, len(job_ids))
    entries = []
    for job_id in job_ids:
        body = downsampled_history(
            session, job_id=job_id, start_step=start_step, end_step=end_step,
            max_points=max_points, fields=fields, max_bytes=share, max_series=max_series,
        )  # fmt: skip
        body["x_values"] = x_values(session, job_id, body, x)
        if smoothing is not None:
            body["smoothing_exact"] = smooth_series(session, job_id, body, smoothing, exact_rows)
        body["system_series"] = system_series_of(session, job_id)
        if system:
            found = compare_system(
                session, job_id, system, max_points=max_points, x=x,
                start_step=start_step, end_step=end_step,
            )  # fmt: skip
            if found is not None:
                body["system"] = found
        entries.append(body)
    return entries


def x_values(session: Session, job_id: str, body: Mapping[str, Any], x: XAxis) -> list[Any]:
    """Each point's x: its first step, seconds since the run's first record, or tokens so far."""
    steps: list[int] = body["steps"]
    if x == "step" or not steps:
        return list(steps)
    if x == "time":
        start = first_timestamp(session, job_id)
        return [None if t is None or start is None else t - start for t in body["timestamps"]]
    return token_axis(session, job_id, body)


def token_axis(session: Session, job_id: str, body: Mapping[str, Any]) -> list[float | None]:
    """Tokens seen by each point's first step; nulls when the run reports none.

    A running total (TRL's `num_tokens`) is read as it is: a bucket's minimum
    is its value at its first step. A per-step count (verl's
    `perf/total_num_tokens`) is summed from the run's start, a bucket counting
    its step span at its mean (exact when every step reports it).
    """
    steps: list[int] = body["steps"]
    lo, hi, max_points = body["start_step"], body["end_step"], body["max_points"]
    for key, running_total in TOKEN_SERIES:
        answer = downsampled_history(
            session, job_id=job_id, start_step=lo, end_step=hi, max_points=max_points,
            fields=frozenset({key}),
        )  # fmt: skip
        columns = answer["series"].get(key)
        if columns is None:
            continue
        exact = not answer["downsampled"]
        at_step: dict[int, float | None] = {}
        if running_total:
            values = columns["values"] if exact else columns["min"]
            at_step = dict(zip(answer["steps"], map(finite_time, values), strict=True))
        else:
            total = tokens_before(session, job_id, key, lo)
            spans = _spans(answer)
            values = columns["values"] if exact else columns["mean"]
            for step, value, span in zip(answer["steps"], values, spans, strict=True):
                number = finite_time(value) or 0.0
                at_step[step] = total + number  # through the point's first step
                total += number * span
        return [at_step.get(step) for step in steps]
    return [None] * len(steps)


def tokens_before(session: Session, job_id: str, key: str, step: int) -> float:
    """The per-step counts `key` summed over the steps before `step`."""
    if step <= 0:
        return 0.0
    answer = downsampled_history(
        session, job_id=job_id, start_step=None, end_step=step - 1, max_points=2,
        fields=frozenset({key}),
    )  # fmt: skip
    columns = answer["series"].get(key)
    if columns is None:
        return 0.0
    if not answer["downsampled"]:
        return sum(finite_time(v) or 0.0 for v in columns["values"])
    return sum((m or 0.0) * s for m, s in zip(columns["mean"], _spans(answer), strict=True))


def smooth_series(
    session: Session, job_id: str, body: dict[str, Any], smoothing: Smoothing, exact_rows: int
) -> bool:
    """Add `smoothed` to each series of `body`; True when computed from every record.

    The smoothing is the run's, as it stands at each point, whatever the range:
    it starts at the run's first record, not at `start_step`, so a zoomed
    chart's line continues the whole run's line instead of starting again at
    its left edge.
    """
    series: dict[str, dict[str, list[Any]]] = body["series"]
    if not series:
        return True
    lo, hi = body["start_step"], body["end_step"]
    first = first_step(session, job_id)
    start = lo if first is None else min(first, lo)
    if count_up_to(session, job_id, start, hi, exact_rows + 1) > exact_rows:
        column = "mean" if body["downsampled"] else "values"
        before = _buckets_before(session, job_id, start, lo, list(series))
        spans = [span for span, _ in before] + _spans(body)
        for key, columns in series.items():
            means = [means_of.get(key) for _, means_of in before] + list(columns[column])
            smoothed = smooth_buckets([finite_time(mean) for mean in means], spans, smoothing)
            columns["smoothed"] = smoothed[len(before) :]
        return False
    smoothers = {key: ExactSmoother(smoothing) for key in series}
    lines: dict[str, list[float | None]] = {key: [] for key in series}
    # A point's value is the smoothing after its last record (its only one
    # when the answer is exact).
    ends: list[int] = body["last_steps"] if body["downsampled"] else body["steps"]
    point = 0

    def close_points_before(step: int | None) -> None:
        nonlocal point
        while point < len(ends) and (step is None or step > ends[point]):
            for key, smoother in smoothers.items():
                lines[key].append(smoother.value)
            point += 1

    for record in raw_rows(session, job_id, start, hi):
        close_points_before(record["step"])
        values = series_values(record)
        for key, smoother in smoothers.items():
            if key in values:
                smoother.add(values[key])
    close_points_before(None)
    for key, columns in series.items():
        columns["smoothed"] = lines[key]
    return True


def _buckets_before(
    session: Session, job_id: str, start: int, lo: int, keys: list[str]
) -> list[tuple[int, dict[str, Any]]]:
    """The run before the range as (span, mean per series) buckets, to start the
    smoothing over buckets where the run starts (nothing when the range does)."""
    if lo <= start:
        return []
    answer = downsampled_history(
        session, job_id=job_id, start_step=start, end_step=lo - 1, max_points=_WARM_UP_POINTS,
        fields=frozenset(keys),
    )  # fmt: skip
    column = "mean" if answer["downsampled"] else "values"
    means = [
        {key: columns[column][i] for key, columns in answer["series"].items()}
        for i in range(len(answer["steps"]))
    ]
    return list(zip(_spans(answer), means, strict=True))


def _spans(answer: Mapping[str, Any]) -> list[int]:
    if not answer["downsampled"]:
        return [1] * len(answer["steps"])
    bounds = zip(answer["steps"], answer["last_steps"], strict=True)
    return [last - first + 1 for first, last in bounds]


def flatten_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted keys; a list, a scalar or an empty object is one value."""
    if not isinstance(config, Mapping) or (not config and prefix):
        return {prefix: config} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in config.items():
        flat.update(flatten_config(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


_MISSING: Final = object()


def config_differences(configs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"jobs", "differences": {key: {job: value}}, "same"}`` (docs/contract.md)."""
    flat = {job_id: flatten_config(config or {}) for job_id, config in configs.items()}
    keys = sorted({key for values in flat.values() for key in values})
    differences: dict[str, dict[str, Any]] = {}
    same = 0
    for key in keys:
        values = [flat[job_id].get(key, _MISSING) for job_id in flat]
        encoded = {_canonical(value) for value in values}
        if len(encoded) == 1 and values[0] is not _MISSING:
            same += 1
            continue
        differences[key] = {
            job_id: None if value is _MISSING else value
            for job_id, value in zip(flat, values, strict=True)
        }
    return {"jobs": list(configs), "differences": differences, "same": same}


def _canonical(value: Any) -> bytes:
    if value is _MISSING:
        return b"\x00missing"
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
